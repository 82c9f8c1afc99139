"""Run an inferload scenario with Locust:

    locust -f locustfiles/inferload_locustfile.py --scenario scenarios/steady.yaml [--headless]

One user class per scenario target (Triton gRPC, Triton HTTP or TorchServe REST), the scenario's
traffic shape, exact percentiles and summary.json at the end, exit code 1 on a breached SLO.
"""

import sys

import locust  # noqa: F401  (first: gevent monkey patching)

from inferload.run.install import install
from inferload.run.plugin import scenario_path_from_argv
from inferload.scenario.loader import load_scenario


def _load():
    path = scenario_path_from_argv(sys.argv[1:])
    if not path:
        sys.stderr.write("inferload: no scenario given: pass --scenario FILE (or set INFERLOAD_SCENARIO)\n")
        sys.exit(2)
    return load_scenario(path)


install(globals(), _load)
