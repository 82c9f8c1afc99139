"""A stop signal that came while Locust loaded inferload's locustfile (held by `early_signals`) is
acted on when `RunStopper` installs its handlers, as the signal would have been then: before Locust
made its runner, the process exits with the signal's code and no traceback. The signals of a
running run: tests/integration/test_signals.py."""

from __future__ import annotations

import os
import signal

import pytest
from locust.env import Environment

from inferload.run import early_signals
from inferload.run.signals import RunStopper


def test_a_held_sigint_stops_the_process_once_the_handlers_are_installed() -> None:
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    release = early_signals.hold()
    stopper = RunStopper(Environment())
    try:
        os.kill(os.getpid(), signal.SIGINT)  # as it would land while the locustfile imports
        with pytest.raises(SystemExit) as stopped:
            stopper.install()
        assert stopped.value.code == 130 and stopper.received == [signal.SIGINT]
    finally:
        stopper.uninstall()
        release()
        for signum, handler in before.items():
            signal.signal(signum, handler)
