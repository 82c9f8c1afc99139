"""Stop signals that come while a process starts, before its own handlers are installed.

A process's imports and checks take a second or more (Locust imports inferload and checks the
models; the CLI validates the scenario). A SIGINT then was a KeyboardInterrupt traceback wherever it
landed (seen in a tune step's run.log), and in a process started with ``&`` by a non-interactive
shell (SIGINT ignored) it was lost: the run went on. `hold` makes a handler note SIGINT and SIGTERM
and nothing else: inferload's locustfile holds them as Locust loads it; the CLI from main's first
line, until a command that runs children at once (run, sweep, tune, worker) installs its handlers;
any other command (demo too, whose servers start first) gets Python's own back once its options
are read, and stops with 128 + the signal if one came meanwhile. The handlers installed later take what was
held (`take`) and act on it: the CLI stops before it starts anything (`StoppedBeforeStart`: 128 +
the signal's number), Locust's `RunStopper` as a signal at that moment would (the run not started:
no results, exit 130/143). The CLI starts Locust through `inferload.launch.locust_entry`, which holds
them from its first line, before Locust's own imports (half a second). Left unheld: the
interpreter's start and the few imports before the hold (tens of milliseconds).

A held signal waits at most `HELD_GRACE_S` for those handlers: a process blocked in a system call
meanwhile (a read that never returns, a connect with a long timeout) would otherwise never stop, since
the handler returns and Python retries the call (PEP 475). Past that, the process says so and exits
with 128 + the signal, as the handlers would have made it: nothing was started yet.

Signal dispositions belong to the process, so what was held is this module's (one list per process).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

HELD_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
#: seconds a held signal waits for the command's own handlers to take it before it stops the process
HELD_GRACE_S = 3.0


class _Held:
    """The signals held so far, and the deadline the first of them set."""

    def __init__(self) -> None:
        self.signals: list[int] = []
        self.deadline: threading.Timer | None = None

    def note(self, signum: int, _frame: FrameType | None) -> None:
        self.signals.append(signum)
        if self.deadline is None:
            self.deadline = threading.Timer(HELD_GRACE_S, self.stop, args=(signum,))
            self.deadline.daemon = True
            self.deadline.start()

    def stop(self, signum: int) -> None:
        name = signal.Signals(signum).name
        sys.stderr.write(f"inferload: {name} while starting, not taken within {HELD_GRACE_S:g} s: stopped\n")
        sys.stderr.flush()
        os._exit(128 + signum)

    def take(self) -> list[int]:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        taken = list(self.signals)
        self.signals.clear()
        return taken


_held = _Held()


def _note(signum: int, frame: FrameType | None) -> None:
    _held.note(signum, frame)


def hold() -> Callable[[], None]:
    """Note SIGINT and SIGTERM from now on (until another handler replaces this one); the function
    that puts the handlers from before back."""
    previous = {signum: signal.signal(signum, _note) for signum in HELD_SIGNALS}

    def release() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)

    return release


def take() -> list[int]:
    """The signals noted so far (oldest first); none are kept, and the deadline the first one set is off."""
    return _held.take()
