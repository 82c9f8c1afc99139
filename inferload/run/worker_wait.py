"""`--worker-wait SECONDS`: a headless master does not wait forever for workers that never join.

Locust's headless master waits for `--expect-workers` without end; its `--expect-workers-max-wait`
gives up with exit code 1 and "Gave up waiting for workers to connect", which reads like any
failed run. With `--worker-wait S` the master stops after S seconds when fewer workers than expected
have joined, says how many did and for how long it waited, and exits 2 (a set-up problem, like an
invalid scenario). `inferload run --workers/--remote-workers` passes it (default 120 s); plain
`locust --master` gets it from `--worker-wait` or `INFERLOAD_WORKER_WAIT` (default 0: wait forever).
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
from locust.env import Environment
from locust.runners import STATE_INIT, MasterRunner

from inferload.run.cli_values import wait_seconds

logger = logging.getLogger(__name__)

EXIT_WORKERS_MISSING = 2


def add_arguments(parser: Any) -> None:
    """Locust's `init_command_line_parser` hook: `--worker-wait`."""
    group = parser.add_argument_group("inferload (distributed)")
    group.add_argument(
        "--worker-wait",
        type=wait_seconds,  # finite, 0 to a day: nan or inf waited forever
        default=0.0,
        metavar="SECONDS",
        env_var="INFERLOAD_WORKER_WAIT",
        help="headless master: give up when fewer than --expect-workers workers joined after this many seconds "
        "(exit 2, naming how many joined); 0 waits forever (default)",
    )


def watch_worker_arrival(environment: Environment) -> gevent.Greenlet | None:
    """On a headless master with `--worker-wait S`: give up after S seconds if workers are missing."""
    runner = environment.runner
    options = environment.parsed_options
    if not isinstance(runner, MasterRunner) or options is None or not getattr(options, "headless", False):
        return None
    wait_s = float(getattr(options, "worker_wait", 0.0) or 0.0)
    if wait_s <= 0:
        return None
    expected = int(getattr(options, "expect_workers", 1) or 1)
    return gevent.spawn_later(wait_s, give_up_if_missing, runner, expected, wait_s)


def missing_workers_message(joined: int, expected: int, wait_s: float) -> str:
    return (
        f"inferload: {joined} of {expected} expected worker(s) joined within {wait_s:g} s (--worker-wait {wait_s:g}); "
        "stopping. Start the missing workers (`inferload worker --master-host HOST --master-port PORT`), "
        "check that they reach the master's address, or raise --worker-wait"
    )


def give_up_if_missing(runner: MasterRunner, expected: int, wait_s: float) -> None:
    """Exit 2 when the run has not started and fewer than `expected` workers are ready."""
    if runner.state != STATE_INIT or runner.shape_greenlet is not None:
        return  # the run started: every expected worker joined
    joined = len(runner.clients.ready)
    if joined >= expected:
        return
    logger.error(missing_workers_message(joined, expected, wait_s))
    runner.quit()  # the workers that joined are told to quit
    raise SystemExit(EXIT_WORKERS_MISSING)  # gevent raises it in the main greenlet (Locust's wait loop)
