"""SIGINT and SIGTERM inside Locust: a stopped run still writes its results.

Locust 2.47 installs its SIGTERM handler only after a headless *shape* run has returned (every
inferload run has a shape), so `docker stop` or a pod deletion killed the process with nothing
written; SIGINT became a KeyboardInterrupt wherever it landed, or nothing at all where the shell had
it ignored. `RunStopper` handles both signals in gevent's hub from the `init` event on:

- headless local run or master: the run is marked interrupted and the shape's greenlet is ended, so
  Locust's main greenlet takes its own end-of-shape path (stop, quit, the `quitting` event: summary.json,
  windows.csv, report.html). A master first tells its workers to quit and waits (up to
  `WORKER_QUIT_WAIT_S`) until each has: a worker sends its last report before it quits, so the
  results count every request the workers made.
- headless master still waiting for its workers: the joined workers are told to quit, the process exits.
- web UI: SIGINT quits the runner (a master its workers first) and stops the UI, which ends Locust's main
  path the same way; SIGTERM is Locust's own handler (installed in this mode), the run is only marked.
  With `--autostart --autoquit S`, Locust's main greenlet sleeps S seconds after the run before it
  quits: SIGINT sets the wait to 0 and, if the main greenlet is already in it, wakes it with the
  KeyboardInterrupt Locust's main path handles (report.html, `quitting`, exit).
- worker: sends its last report and quits, as when its master tells it to.

A second signal ends the process at once (no results): after the first, both signals go to a plain
Python handler, which runs even while the hub is blocked (matplotlib drawing report.html). The exit code of a process whose run a signal
cut short is 128 + the signal's number (130 for SIGINT, 143 for SIGTERM), in place of Locust's or
the SLO's; a signal that arrives while nothing runs (web UI idle) leaves Locust's exit code.

SIGHUP is what a process the `inferload` command started gets when the command dies (SIGKILL: see
`inferload.launch.die_with_parent`): it stops the run as SIGTERM does (exit code 129), and every later
SIGHUP is ignored, since the kernel sends one per thread the dying command had. It is never a second
signal: the results are written.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

import gevent
from locust.env import Environment
from locust.rpc import Message
from locust.runners import STATE_INIT, STATE_RUNNING, STATE_SPAWNING, MasterRunner, Runner, WorkerRunner

from inferload.run import early_signals
from inferload.run.workers import WORKER_QUIT_WAIT_S, quit_workers

logger = logging.getLogger(__name__)

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
#: the signal of the parent's death (`inferload.launch.child_processes.PARENT_DEATH_SIGNAL`): stops once, repeats ignored
PARENT_DEATH = signal.SIGHUP
#: the function of Locust's main (locust/main.py) whose greenlet sleeps --autoquit seconds after a run
LOCUST_AUTOQUIT_WAIT = "stop_and_optionally_quit"


class Interruptible(Protocol):
    """What the handler marks: the run (`InferloadRun`), written into summary.json as "interrupted"."""

    interrupted: bool


def exit_code_for(signum: int) -> int:
    """The shell's convention: 128 + the signal's number."""
    return 128 + int(signum)


def exit_at_once(signum: int) -> NoReturn:
    """The second signal: end the process now, whatever it is doing."""
    sys.stderr.write(f"inferload: {signal.Signals(signum).name} again: exiting at once, results not written\n")
    sys.stderr.flush()
    os._exit(exit_code_for(signum))


@dataclass
class RunStopper:
    """The SIGINT/SIGTERM handlers of one Locust process (master, worker or local)."""

    environment: Environment
    run: Interruptible | None = None
    worker_quit_wait_s: float = WORKER_QUIT_WAIT_S
    received: list[int] = field(default_factory=list)
    #: the signal that cut a run short (None: no run was cut short)
    interrupted_by: int | None = None
    _handlers: list[Any] = field(default_factory=list)

    def install(self) -> RunStopper:
        """Handle the stop signals from now on, in gevent's hub (this works where SIGINT is ignored too).

        Install it before the listeners that write the results: Locust fires `quitting` in reverse
        order, so this one runs after them and its exit code wins."""
        for signum in (*STOP_SIGNALS, PARENT_DEATH):
            self._handlers.append(gevent.signal_handler(signum, self.on_signal, signum))
        self.environment.events.quitting.add_listener(self._on_quitting)
        for held in early_signals.take():  # came while the process started: acted on now
            self.on_signal(held)
        return self

    def uninstall(self) -> None:
        for handler in self._handlers:
            handler.cancel()
        self._handlers.clear()

    # -- the handler ----------------------------------------------------------------------
    def on_signal(self, signum: int) -> None:
        try:
            self._on_signal(signum)
        except Exception:  # gevent would re-raise it in the main greenlet and end Locust without results
            logger.exception(
                "inferload: stopping on %s failed; send the signal again to exit at once", signal.Signals(signum).name
            )

    def _on_signal(self, signum: int) -> None:
        if signum == PARENT_DEATH and self.received:
            logger.info("SIGHUP again (the parent's death, once per thread it had): ignored")
            return
        self.received.append(signum)
        name = signal.Signals(signum).name
        if len(self.received) > 1:
            exit_at_once(signum)
        # the next signal is Python's to handle: it runs even while the hub is busy writing the results
        for stop_signal in STOP_SIGNALS:
            signal.signal(stop_signal, lambda number, _frame: exit_at_once(number))
        signal.signal(PARENT_DEATH, signal.SIG_IGN)  # repeats of the parent's death never cut the results short
        runner = self.environment.runner
        if runner is None:  # before Locust made its runner: nothing to save
            raise SystemExit(exit_code_for(signum))
        if isinstance(runner, WorkerRunner):
            self._stop_worker(runner, signum, name)
            return
        options = self.environment.parsed_options
        if options is not None and not getattr(options, "headless", True) and self.environment.web_ui is not None:
            self._stop_web_ui_run(runner, signum, name)
            return
        self._stop_headless_run(runner, signum, name)

    def _mark(self, signum: int) -> None:
        self.interrupted_by = signum
        if self.run is not None:
            self.run.interrupted = True

    def _stop_headless_run(self, runner: Runner, signum: int, name: str) -> None:
        shape = runner.shape_greenlet
        if shape is None or shape.dead:
            if runner.state != STATE_INIT:
                logger.info("%s: the run is already ending; its results are being written (send it again to exit at once)", name)
                return
            # a headless master still waiting for its workers (or a shape not started yet): nothing to save
            logger.warning("%s: stopping before the run started; no results", name)
            self._mark(signum)
            runner.quit()
            raise SystemExit(exit_code_for(signum))  # gevent raises it in the main greenlet
        self._mark(signum)
        logger.warning(
            "%s: stopping the run early; writing its results (summary.json marked interrupted). Send it again to exit at once",
            name,
        )
        if isinstance(runner, MasterRunner):
            quit_workers(runner, self.worker_quit_wait_s)
        shape = runner.shape_greenlet
        if shape is not None and not shape.dead:
            shape.kill(block=False)  # Locust's main greenlet then stops, quits and fires `quitting`

    def _stop_web_ui_run(self, runner: Runner, signum: int, name: str) -> None:
        running = runner.state in (STATE_RUNNING, STATE_SPAWNING) or (
            runner.shape_greenlet is not None and not runner.shape_greenlet.dead
        )
        if running:
            self._mark(signum)
        if signum == signal.SIGTERM:
            return  # Locust's own SIGTERM handler (installed in web UI mode) shuts down and fires `quitting`
        logger.warning("%s: quitting%s (send it again to exit at once)", name, "; writing the results" if running else "")
        if isinstance(runner, MasterRunner) and running:
            quit_workers(runner, self.worker_quit_wait_s)
        runner.quit()
        web_ui = self.environment.web_ui
        if web_ui is not None:
            web_ui.stop()  # Locust's main greenlet (the web UI's) ends: it shuts down and fires `quitting`
        self._end_autoquit_wait()

    def _end_autoquit_wait(self) -> None:
        """`--autostart --autoquit S`: Locust's main greenlet waits S s after the run, not the web UI's end.

        A run still going ends through Locust's own quit path at once (the wait set to 0); a main
        greenlet already in the wait gets the KeyboardInterrupt that Locust's main catches to
        write report.html and shut down (the `quitting` event: our results)."""
        options = self.environment.parsed_options
        if options is None or not getattr(options, "autostart", False):
            return
        options.autoquit = 0
        main = gevent.get_hub().parent
        frame = main.gr_frame if main is not None else None
        while frame is not None:
            if frame.f_code.co_name == LOCUST_AUTOQUIT_WAIT:
                gevent.get_hub().loop.run_callback(main.throw, KeyboardInterrupt)
                return
            frame = frame.f_back

    def _stop_worker(self, runner: WorkerRunner, signum: int, name: str) -> None:
        if runner.worker_state in (STATE_RUNNING, STATE_SPAWNING):
            self._mark(signum)
        logger.warning("%s: this worker sends its last report and quits", name)
        report: dict[str, Any] = {}
        self.environment.events.report_to_master.fire(client_id=runner.client_id, data=report)
        runner.send_message("stats", report)  # before anything yields: Locust's SIGTERM shutdown may follow
        runner.handle_message(Message("quit", None, runner.client_id))  # what a master's quit does

    # -- the exit code --------------------------------------------------------------------
    def _on_quitting(self, environment: Environment, **_: Any) -> None:
        if self.interrupted_by is not None:
            environment.process_exit_code = exit_code_for(self.interrupted_by)
