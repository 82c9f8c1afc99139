"""What every inferload locustfile does, in one call: gevent-ready gRPC, inferload's Locust
options, the scenario's user and shape classes, and the run hooks (among them the SIGINT/SIGTERM
handler of `inferload.run.signals` and `--worker-wait`).

`scenario_classes(load)` does it and returns the classes (`ScenarioClasses`); the locustfile binds
them as module globals itself, where Locust looks for user and shape classes
(``users, ScenarioShape = scenario_classes(load)`` then ``globals().update(users)``).

Two locustfiles use it: `inferload/locustfile.py` (the scenario named by `--scenario`; the
checkout's `locustfiles/inferload_locustfile.py` is the same) and the self-contained locustfile
`inferload run --workers` generates (the scenario and its payload files embedded, so workers
started with `inferload worker` need nothing else: see `inferload.launch.embedded_locustfile`).
Errors in the scenario or a failed start check (a server that cannot be reached, a model it does
not serve, tensors that do not match, a results folder that cannot be written) end the process
with exit code 2 and one line per problem: this is the edge, where exiting is right. With a run
key in the environment (`INFERLOAD_RUN_KEY`, every master and worker has one) the master's port is
authenticated before Locust opens it (`inferload.run.secure_port`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import grpc.experimental.gevent as grpc_gevent
from locust import events

from inferload.errors import ModelMismatchError, ScenarioError
from inferload.scenario.schema import Scenario

if TYPE_CHECKING:
    from inferload.run.traffic import ScenarioShape
    from inferload.users.base import InferenceUser

EXIT_INVALID = 2


class ScenarioClasses(NamedTuple):
    """A scenario's Locust classes: one user class per target (by class name) and its load shape."""

    user_classes: dict[str, type[InferenceUser]]
    shape_class: type[ScenarioShape]


def scenario_classes(load: Callable[[], Scenario] | Scenario, known_models: dict[str, Any] | None = None) -> ScenarioClasses:
    """inferload's run of the scenario ``load`` (a Scenario, or a function that returns one): its
    options and run hooks on Locust's events, its user and shape classes returned (or exit 2).

    `known_models`: Triton targets' model metadata and config shipped with the locustfile.
    """
    grpc_gevent.init_gevent()  # before any gRPC channel is made
    from inferload.errors import RunKeyError, StartCheckError
    from inferload.measure.report_auth import run_key_from_environ
    from inferload.run.options import add_arguments
    from inferload.run.plugin import InferloadRun  # after gevent is set up
    from inferload.run.secure_port import secure_master_port
    from inferload.run.signals import RunStopper
    from inferload.run.workers import add_arguments as add_worker_wait_argument
    from inferload.run.workers import watch_worker_arrival

    events.init_command_line_parser.add_listener(add_arguments)
    events.init_command_line_parser.add_listener(add_worker_wait_argument)
    try:
        key = run_key_from_environ()
    except RunKeyError as error:
        sys.stderr.write(f"inferload: {error}\n")
        sys.exit(EXIT_INVALID)
    if key is not None:  # before Locust makes its runner: a master's and a worker's sockets speak CURVE
        secure_master_port(key)
    try:
        scenario = load if isinstance(load, Scenario) else load()
        run = InferloadRun(scenario, {name: tuple(info) for name, info in (known_models or {}).items()})
    except ScenarioError as error:
        sys.stderr.write(f"{error}\n")
        sys.exit(EXIT_INVALID)

    def on_init(environment: Any, **kwargs: Any) -> None:
        # SIGINT/SIGTERM stop the run and keep its results; installed first, so that its exit code
        # (130/143 for a run cut short) is set after the run's own (`quitting` fires in reverse order)
        RunStopper(environment, run).install()
        try:
            run.on_init(environment, **kwargs)
        except StartCheckError as error:
            anyway = " (--skip-start-checks sends it anyway)" if error.skippable else ""
            sys.stderr.write(f"inferload: the start checks failed; no load was sent{anyway}:\n{error}\n")
            sys.exit(EXIT_INVALID)
        except ModelMismatchError as error:
            sys.stderr.write(f"inferload: the scenario does not match the served model:\n{error}\n")
            sys.exit(EXIT_INVALID)
        except RunKeyError as error:
            sys.stderr.write(f"inferload: {error}\n")
            sys.exit(EXIT_INVALID)
        watch_worker_arrival(environment)

    events.init.add_listener(on_init)
    return ScenarioClasses(dict(run.user_classes), run.shape_class)
