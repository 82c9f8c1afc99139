"""inferload's locustfile, shipped in the package: run a scenario with Locust.

    python -m inferload.locustfile --scenario scenarios/steady.yaml [--headless] [Locust's flags]
    locust -f locustfiles/inferload_locustfile.py --scenario ...   (the same, from a checkout)

`python -m inferload.locustfile ARGS` is `locust -f <this file> ARGS`; `inferload run` gives Locust
this file too. When Locust loads it (under the module name `locustfile`), it gets one user class
per scenario target (Triton gRPC, Triton HTTP or TorchServe REST), the scenario's traffic shape,
exact percentiles and summary.json at the end, exit code 1 on a breached SLO. Imported under its
own name (`import inferload.locustfile`) it only defines what is below.
"""

from __future__ import annotations

import sys

import locust  # noqa: F401  (before the rest: gevent monkey patching)

from inferload.run import early_signals

if __name__ != "inferload.locustfile":  # Locust loads it: SIGINT/SIGTERM held while the rest imports (RunStopper takes them)
    early_signals.hold()

from inferload.run.locust_classes import ScenarioClasses, scenario_classes
from inferload.run.plugin import scenario_path_from_argv
from inferload.scenario.loader import load_scenario
from inferload.scenario.schema import Scenario

EXIT_NO_SCENARIO = 2


def scenario_from_argv() -> Scenario:
    """The scenario named by `--scenario FILE` (or `INFERLOAD_SCENARIO`); exit 2 when none is."""
    path = scenario_path_from_argv(sys.argv[1:])
    if not path:
        sys.stderr.write("inferload: no scenario given: pass --scenario FILE (or set INFERLOAD_SCENARIO)\n")
        sys.exit(EXIT_NO_SCENARIO)
    return load_scenario(path)


def scenario_classes_from_argv() -> ScenarioClasses:
    """The Locust classes of the scenario given on the command line, its run wired (or exit 2)."""
    return scenario_classes(scenario_from_argv)


def main(argv: list[str] | None = None) -> None:
    """`locust -f <this file> ARGV` in this process (Locust exits with its own code)."""
    from locust.main import main as locust_main

    sys.argv = ["locust", "-f", __file__, *(sys.argv[1:] if argv is None else argv)]
    locust_main()


if __name__ == "__main__":
    main()
elif __name__ != "inferload.locustfile":  # loaded by Locust as a locustfile: it finds the classes among the globals
    users, ScenarioShape = scenario_classes_from_argv()
    globals().update(users)
