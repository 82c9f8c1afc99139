"""Run an inferload scenario with Locust:

    locust -f locustfiles/inferload_locustfile.py --scenario scenarios/steady.yaml [--headless]

One user class per scenario target (Triton gRPC, Triton HTTP or TorchServe REST), the scenario's
traffic shape, exact percentiles and summary.json at the end, exit code 1 on a breached SLO.
"""

import locust  # noqa: F401  (first: gevent monkey patching)
from locust import events

import grpc.experimental.gevent as grpc_gevent

grpc_gevent.init_gevent()  # before any gRPC channel; see docs/architecture.md

import sys  # noqa: E402

from inferload.errors import ModelMismatchError, ScenarioError  # noqa: E402
from inferload.locust_plugin import InferloadRun, add_arguments, scenario_path_from_argv  # noqa: E402
from inferload.scenario_loader import load_scenario  # noqa: E402

events.init_command_line_parser.add_listener(add_arguments)

_scenario_path = scenario_path_from_argv(sys.argv[1:])
if not _scenario_path:
    sys.stderr.write("inferload: no scenario given: pass --scenario FILE (or set INFERLOAD_SCENARIO)\n")
    sys.exit(2)
try:
    _run = InferloadRun(load_scenario(_scenario_path))
except ScenarioError as _error:
    sys.stderr.write(f"{_error}\n")
    sys.exit(2)

globals().update(_run.user_classes)
ScenarioShape = _run.shape_class


@events.init.add_listener
def _on_init(environment, **kwargs):
    try:
        _run.on_init(environment, **kwargs)
    except ModelMismatchError as error:
        sys.stderr.write(f"inferload: the scenario does not match the served model:\n{error}\n")
        sys.exit(2)
