"""What every inferload locustfile does, in one call: gevent-ready gRPC, inferload's Locust
options, the scenario's user and shape classes in the locustfile's namespace, and the run hooks.

Two locustfiles use it: `locustfiles/inferload_locustfile.py` (the scenario named by
`--scenario`) and the self-contained locustfile `inferload run --workers` generates (the scenario
and its payload files embedded, so workers started with `locust -f - --worker` need nothing
else: see `inferload.run.embedded_locustfile`). Errors in the scenario or a mismatch with the served model end
the process with exit code 2 and one line per problem: this is the edge, where exiting is right.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import grpc.experimental.gevent as grpc_gevent
from locust import events

from inferload.errors import ModelMismatchError, ScenarioError
from inferload.scenario.model import Scenario

EXIT_INVALID = 2


def install(namespace: dict[str, Any], load: Callable[[], Scenario], known_models: dict[str, Any] | None = None) -> None:
    """Fill a locustfile's namespace for the scenario `load()` returns (or exit 2).

    `known_models`: Triton targets' model metadata and config shipped with the locustfile.
    """
    grpc_gevent.init_gevent()  # before any gRPC channel is made
    from inferload.run.plugin import InferloadRun, add_arguments  # after gevent is set up

    events.init_command_line_parser.add_listener(add_arguments)
    try:
        run = InferloadRun(load(), {name: tuple(info) for name, info in (known_models or {}).items()})
    except ScenarioError as error:
        sys.stderr.write(f"{error}\n")
        sys.exit(EXIT_INVALID)
    namespace.update(run.user_classes)
    namespace["ScenarioShape"] = run.shape_class

    def on_init(environment: Any, **kwargs: Any) -> None:
        try:
            run.on_init(environment, **kwargs)
        except ModelMismatchError as error:
            sys.stderr.write(f"inferload: the scenario does not match the served model:\n{error}\n")
            sys.exit(EXIT_INVALID)

    events.init.add_listener(on_init)
