"""Run an inferload scenario with Locust, from a checkout:

    locust -f locustfiles/inferload_locustfile.py --scenario scenarios/steady.yaml [--headless]

The same as `python -m inferload.locustfile --scenario ...` (the locustfile inside the package,
which also works where inferload is installed from a wheel): one user class per scenario target,
the scenario's traffic shape, exact percentiles and summary.json, exit code 1 on a breached SLO.
"""

import locust  # noqa: F401  (first: gevent monkey patching)

from inferload.locustfile import scenario_classes_from_argv

users, ScenarioShape = scenario_classes_from_argv()
globals().update(users)  # Locust finds the user classes among the locustfile's globals
