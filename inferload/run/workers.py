"""On a distributed run's master: every worker that took part, every one that went missing, and
the re-spread of a missing worker's load onto the live workers; on a worker, its last messages sent
before its process ends (`send_last_messages`).

Locust's master declares a worker missing when it has heard no heartbeat from it for
`HEARTBEAT_LIVENESS` + 1 heartbeat intervals (`HEARTBEAT_INTERVAL`; 3 + 1 times 1 s in Locust 2.47,
so 4 to 5 s after the worker's last heartbeat) and takes it out of its user dispatcher. It moves the
missing worker's users onto the live workers only with `--enable-rebalancing` (experimental) and
only when it is not spawning at that moment; otherwise they stay lost until the next change of the
shape's user count. The watch does it in every case: once the runner is running again and its live
workers report fewer users than the target, it asks the runner for the target again, which the
dispatcher now spreads over the live workers only. Parts that split other load by worker (the
open-loop arrival shares, `inferload.run.open_loop`) subscribe to `on_workers_changed`.

Each loss is kept as a `WorkerLoss`: when the master declared the worker missing and when the live
workers carried the whole user count again (summary.json's `worker_losses`).

A worker declared missing may only have stalled (a paused VM, a stopped process, a network cut that
heals): Locust takes it back at its next heartbeat with the users it still runs, on top of the ones
moved to the live workers (6 users ran where the shape asked for 4). The watch holds that heartbeat
back (`admit`, called by the master's socket, `run.secure_port`) and tells the worker to quit: it
sends its last report (its requests count) and stops; the loss notes when it came back
(`returned_after_s`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gevent
import zmq
from locust.env import Environment
from locust.runners import STATE_INIT, STATE_MISSING, STATE_RUNNING, MasterRunner, WorkerRunner

from inferload.results.summary import iso
from inferload.run.cli_values import wait_seconds

# `--worker-wait SECONDS`: a headless master does not wait forever for workers that never join.
#
# Locust's headless master waits for `--expect-workers` without end; its `--expect-workers-max-wait`
# gives up with exit code 1 and "Gave up waiting for workers to connect", which reads like any
# failed run. With `--worker-wait S` the master stops after S seconds when fewer workers than expected
# have joined, says how many did and for how long it waited, and exits 2 (a set-up problem, like an
# invalid scenario). `inferload run --workers/--remote-workers` passes it (default 120 s); plain
# `locust --master` gets it from `--worker-wait` or `INFERLOAD_WORKER_WAIT` (default 0: wait forever).
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


#: how long a master that ends its run waits for its workers' last reports
WORKER_QUIT_WAIT_S = 10.0
#: how often it looks
QUIT_POLL_S = 0.05


def quit_workers(runner: MasterRunner, wait_s: float = WORKER_QUIT_WAIT_S) -> list[str]:
    """Tell every live worker to quit and wait until each has, at most `wait_s`: a worker sends its
    last report before its quit, so the master's figures then hold every request it made (Locust's
    own quit waits 0.5 s for those reports, and a worker still stopping its users misses it). The
    last worker's quit makes Locust's master stop and quit the run itself. Returns the workers that
    did not quit in time (their last reports are missing; each named in a warning)."""
    ids = [client.id for client in runner.clients.all if client.state != STATE_MISSING]
    for client_id in ids:
        runner.send_message("quit", client_id=client_id)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(client_id in runner.clients for client_id in ids):
        gevent.sleep(QUIT_POLL_S)
    late = [client_id for client_id in ids if client_id in runner.clients]
    if late:
        logger.warning(
            "%d worker(s) did not quit within %g s; their last reports are missing: %s", len(late), wait_s, ", ".join(late)
        )
    return late


#: the longest a worker's end waits for its last messages to leave (a master that is gone never takes them)
LAST_MESSAGES_WAIT_MS = 2000


def send_last_messages(runner: WorkerRunner, wait_ms: int = LAST_MESSAGES_WAIT_MS) -> None:
    """Close the worker's socket once what it still holds has been sent, waiting at most `wait_ms`:
    its last report and its ``quit`` to the master. ZeroMQ sends from a thread of its own, so a
    process that ends right after queueing them (a fork of the warm Locust ends with ``os._exit``)
    could drop them; the master then waits for a quit that never comes until it declares the worker
    missing (4 to 5 s), and a lost last report takes its requests out of the figures. Called on
    Locust's ``quit`` event, its last, after Locust's own listeners sent those messages."""
    socket = runner.client.socket
    try:
        context = socket.context
        socket.close(linger=wait_ms)
        context.term()  # returns once the socket's queue is sent, or `wait_ms` has passed
    except zmq.ZMQError as error:  # the process ends anyway: what was queued may be lost, as before
        logger.warning("the worker's last messages to the master may be lost: %s", error)


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


logger = logging.getLogger(__name__)

POLL_S = 0.5
#: after asking for a re-spread, wait this long for the live workers' reports before asking again
#: (a live worker reports its users when it has spawned them, and every 3 s)
ASK_AGAIN_S = 3.0


@dataclass
class WorkerLoss:
    """One worker that went missing during the test."""

    worker: str
    lost_at: float  # time.time() when the master declared it missing (about 4-5 s after its last heartbeat)
    respread_at: float | None = None  # when the live workers carried the whole user count again; None: never
    returned_at: float | None = None  # when it came back (and was told to quit); None: it did not

    def as_dict(self) -> dict[str, Any]:
        """summary.json's form: {"worker", "lost_at" (ISO-8601), "respread_after_s" (null: not re-spread),
        "returned_after_s" (only when it came back)}."""
        after = None if self.respread_at is None else round(self.respread_at - self.lost_at, 3)
        entry: dict[str, Any] = {"worker": self.worker, "lost_at": iso(self.lost_at), "respread_after_s": after}
        if self.returned_at is not None:
            entry["returned_after_s"] = round(self.returned_at - self.lost_at, 3)
        return entry


class WorkerWatch:
    """Watches the master's clients from test start until the runner stops."""

    def __init__(self, runner: MasterRunner) -> None:
        self.runner = runner
        self.seen: set[str] = set()
        self.lost: set[str] = set()
        self.losses: list[WorkerLoss] = []
        #: called (on the watch's greenlet) whenever the set of live workers changes during the test
        self.on_workers_changed: list[Callable[[], None]] = []
        self._live: set[str] | None = None  # None: not polled yet
        self._missing: set[str] = set()
        self._redispatch: gevent.Greenlet | None = None
        self._asked_at = float("-inf")

    def start(self) -> gevent.Greenlet:
        return gevent.spawn(self._watch)

    def _watch(self) -> None:
        while self.runner.state not in ("stopped", "quitting"):
            self._hold_back_returning_workers()
            self.poll()
            gevent.sleep(POLL_S)

    def _hold_back_returning_workers(self) -> None:
        """Have the master's socket ask `admit` first (its socket is made again when Locust reconnects)."""
        server = getattr(self.runner, "server", None)
        if server is not None and hasattr(type(server), "admit") and server.admit != self.admit:
            server.admit = self.admit

    def admit(self, worker: str, message: Any) -> bool:
        """Whether Locust may handle `message`: not the heartbeat of a worker declared missing, which
        would take it back with its old users; that worker is told to quit instead (it reports first)."""
        if message.type != "heartbeat":
            return True
        client = self.runner.clients.get(worker)
        if client is not None and client.state != STATE_MISSING:
            return True
        if client is None and worker not in self.lost:
            return True  # a worker Locust does not know: it ignores its heartbeat itself
        loss = self._loss_of(worker, time.time())
        if loss.returned_at is None:
            loss.returned_at = time.time()
            logger.warning(
                "worker %s came back %.1f s after it went missing; its users run on the live workers: told it to quit",
                worker,
                loss.returned_at - loss.lost_at,
            )
        self.runner.send_message("quit", client_id=worker)
        return False

    def _loss_of(self, worker: str, now: float) -> WorkerLoss:
        """The worker's latest loss, recorded now if the poll has not seen it yet."""
        for loss in reversed(self.losses):
            if loss.worker == worker:
                return loss
        self.lost.add(worker)
        self._missing.add(worker)
        loss = WorkerLoss(worker, now)
        self.losses.append(loss)
        return loss

    def poll(self) -> None:
        now = time.time()
        live: set[str] = set()
        missing: set[str] = set()
        for client in list(self.runner.clients.values()):
            self.seen.add(client.id)
            if client.state == STATE_MISSING:
                missing.add(client.id)
            else:
                live.add(client.id)
        for worker in sorted(missing - self._missing):
            self.lost.add(worker)
            self.losses.append(WorkerLoss(worker, now))
            logger.warning(
                "worker %s went missing: its users and open-loop share move to the live workers; "
                "its last unreported requests are lost",
                worker,
            )
        self._missing = missing
        changed = self._live is not None and live != self._live
        self._live = live
        if changed:
            for callback in self.on_workers_changed:
                callback()
        self.respread(now)

    def respread(self, now: float) -> None:
        """Put the lost users back on the live workers; note when they carry the whole count again."""
        pending = [loss for loss in self.losses if loss.respread_at is None]
        runner = self.runner
        if not pending or not self._live or runner.state != STATE_RUNNING or not runner.spawning_completed:
            return  # nothing to do, no one to do it, or a dispatch under way (it spreads over the live workers)
        if runner.user_count >= runner.target_user_count:
            for loss in pending:
                loss.respread_at = now
                logger.info(
                    "worker %s's load is on the live workers again, %.1f s after it went missing", loss.worker, now - loss.lost_at
                )
            return
        if (self._redispatch is None or self._redispatch.dead) and now - self._asked_at >= ASK_AGAIN_S:
            self._asked_at = now
            logger.info("spreading %d users over %d live worker(s)", runner.target_user_count, len(self._live))
            self._redispatch = gevent.spawn(runner.start, runner.target_user_count, runner.spawn_rate)

    def loss_records(self) -> list[dict[str, Any]]:
        """Every loss in summary.json's form (`WorkerLoss.as_dict`), oldest first."""
        return [loss.as_dict() for loss in self.losses]

    def count(self) -> int:
        """Workers that took part, the connected ones included."""
        self.seen.update(self.runner.clients.keys())
        return len(self.seen)
