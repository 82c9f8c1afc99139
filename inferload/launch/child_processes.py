"""The Locust processes the `inferload` command starts: signals forwarded once, none left behind.

Each child runs in its own session, so a Ctrl-C in the terminal (SIGINT to the whole foreground
process group) reaches only the CLI, which forwards it once to the *lead* process: the single Locust
process of a local run, or the master of a distributed one (the master stops its workers itself, see
`inferload.run.signals`). SIGTERM is forwarded the same way and SIGHUP as SIGTERM; a second signal is
forwarded too, and the lead then exits at once. On Linux a child also gets SIGHUP when the CLI dies
(PR_SET_PDEATHSIG, set by `inferload.launch.die_with_parent` before it execs the command), so even
a killed CLI leaves no load running: the child stops on it as on SIGTERM (its results written) and
ignores the repeats the kernel may send (one per thread the dying CLI had). A CLI started by another
CLI (a distributed sweep step) forwards the first SIGHUP only, for the same reason.

When the `with` block ends, every child has exited: the lead is waited for (it writes the results
after a signal), the others get `HELPER_EXIT_WAIT_S` to follow, and whatever is left is killed with
its process group.

Exit code (`exit_code`): the lead's own code when it is non-zero (130 after SIGINT, 143 after
SIGTERM: see `inferload.run.signals`), but 129 when the CLI got SIGHUP and passed SIGTERM on; 128 + the signal's number when the lead died of a signal, or
when the CLI got a signal and the lead still exited 0 (the run had just ended) unless a signal is
how the lead is meant to end (`signal_is_quit`: a web UI run, quit with Ctrl-C after the run
ended; a run the signal cut short exits 130 by itself).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, Protocol

from inferload.errors import InferloadError, StoppedBeforeStart
from inferload.launch.warm_locust import SHARED_SOCKET_ENV, WarmLocust
from inferload.paths import LOCUSTFILE
from inferload.run import early_signals

# The command line of a Locust run on inferload's own locustfile (used by `inferload run` and
# the demo).
#: how the CLI starts Locust: `python -m locust` with stop signals held from the first line (see the module)
LOCUST_ENTRY = "inferload.launch.locust_entry"


#: "0": a command's Locust runs each start as a new process, not as forks of a warm Locust
WARM_ENV = "INFERLOAD_WARM_LOCUST"


def locust_arguments(scenario: Path, headless: bool, out: Path | None, run_id: str | None, extra: list[str]) -> list[str]:
    """What `locust` is given for a run of `scenario` on inferload's locustfile."""
    arguments = ["-f", str(LOCUSTFILE), "--scenario", str(scenario)]
    if headless:
        arguments.append("--headless")
    if out is not None:
        arguments += ["--results-dir", str(out)]
    if run_id:
        arguments += ["--run-id", run_id]
    return arguments + list(extra)


class Child(Protocol):
    """A child as `ChildProcesses` waits for and signals it: a `subprocess.Popen`, or a run forked from
    the warm Locust (`inferload.launch.warm_locust.ForkedLocust`)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


FORWARDED: dict[signal.Signals, signal.Signals] = {
    signal.SIGINT: signal.SIGINT,
    signal.SIGTERM: signal.SIGTERM,
    signal.SIGHUP: signal.SIGTERM,
}
#: what a child gets when the CLI dies (see `inferload.launch.die_with_parent`: repeats come, and are ignored)
PARENT_DEATH_SIGNAL = signal.SIGHUP
#: how long workers get to exit after their master did (they quit when it tells them to)
HELPER_EXIT_WAIT_S = 15.0
#: how long the lead gets to exit once the CLI leaves the block by an error (not a signal)
LEAD_EXIT_WAIT_S = 30.0


def _with_parent_death_signal(command: Sequence[str]) -> list[str]:
    """`command`, started through `inferload.launch.die_with_parent` on Linux (it gets SIGTERM when the
    CLI dies), unchanged elsewhere."""
    if not sys.platform.startswith("linux"):
        return list(command)
    wrapper = Path(__file__).with_name("die_with_parent.py")  # by path: importable from any cwd and env
    return [sys.executable, "-I", "-S", str(wrapper), f"--signal={PARENT_DEATH_SIGNAL.name}", str(os.getpid()), *command]


def exit_code(returncode: int, signals: Sequence[int], signal_is_quit: bool = False) -> int:
    """The CLI's exit code for a lead that ended with `returncode` after the CLI got `signals`
    (`signal_is_quit`: the lead's own 0 stands, a signal being how it is quit)."""
    if returncode < 0:  # the lead died of a signal
        return 128 - returncode
    if signals and returncode == 128 + FORWARDED.get(signal.Signals(signals[0]), signal.SIGTERM):
        return 128 + int(signals[0])  # the signal the CLI got, not the one passed on in its place (SIGHUP: SIGTERM)
    if returncode == 0 and signals and not signal_is_quit:
        return 128 + int(signals[0])
    return returncode


class ChildProcesses:
    """Locust processes of one `inferload` command; use as a context manager around the run."""

    def __init__(
        self,
        signal_is_quit: bool = False,
        on_second: Callable[[int], None] | None = None,
        warm: bool | WarmLocust = False,
    ) -> None:
        """`signal_is_quit`: a signal is how the lead is meant to end (a web UI run): its exit code stands.
        `on_second`: called with a second signal once it is forwarded (a command that ends at once then:
        `StopSignals.exit_at_once`); None: the block goes on until the lead has exited. `warm`: the
        block runs Locust many times (sweep steps, demo phases): `start_locust` forks each run from a
        warm Locust (`inferload.launch.warm_locust`): True, the block's own, stopped as it ends; a
        `WarmLocust`, one its caller shares between blocks (tune's candidates) and stops. Where
        `INFERLOAD_WARM_LOCUST_SOCKET` names a running one, every block's runs fork from it, False's
        included. None of this with `INFERLOAD_WARM_LOCUST=0`."""
        self.signal_is_quit = signal_is_quit
        self.on_second = on_second
        self.lead: Child | None = None
        self.helpers: list[Child] = []
        wanted = os.environ.get(WARM_ENV, "1") != "0" and (warm is not False or bool(os.environ.get(SHARED_SOCKET_ENV)))
        self._warm = (warm if isinstance(warm, WarmLocust) else WarmLocust()) if wanted else None
        self._owns_warm = wanted and not isinstance(warm, WarmLocust)
        #: the signals the CLI received while the block ran
        self.signals: list[int] = []
        self._previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}

    def start(
        self,
        command: Sequence[str],
        *,
        lead: bool = False,
        log: IO[bytes] | None = None,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a child in its own session (`lead`: the one that gets the signals; else a helper).

        `log`: its stdout and stderr (default: the CLI's); `env`: its environment (default: the CLI's)."""
        process = subprocess.Popen(  # no preexec_fn: the CLI may have gRPC's threads (see die_with_parent)
            _with_parent_death_signal(command),
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            start_new_session=True,
        )
        if lead:
            self._take_lead(process)
        else:
            self.helpers.append(process)
        return process

    def start_locust(
        self, arguments: Sequence[str], log: Path | None = None, env: Mapping[str, str] | None = None, lead: bool = True
    ) -> Child:
        """`locust ARGUMENTS` (`locust_arguments`), the lead (else a helper: a distributed run's
        worker), its output in `log` (emptied first; None: the CLI's own stdout and stderr), in the
        CLI's folder, with `env` (default: the CLI's environment): a fork of the block's warm Locust
        where it has one, else (or when the warm Locust cannot fork it, said in its output) a new
        process, as `start` starts one."""
        if log is not None:
            log.write_bytes(b"")
        if self._warm is not None:
            try:
                forked = self._warm.start(arguments, cwd=Path.cwd(), env=os.environ if env is None else env, stdout=log)
                if not lead:
                    self.helpers.append(forked)
                    return forked
                return self._take_lead(forked)
            except InferloadError as error:
                if self._owns_warm:
                    self._warm.close()
                self._warm = None
                said = f"inferload: {error}; this and the next runs start as new processes\n"
                if log is None:
                    sys.stderr.write(said)
                else:
                    with log.open("a") as file:
                        file.write(said)
        command = [sys.executable, "-m", LOCUST_ENTRY, *arguments]
        if log is None:
            return self.start(command, lead=lead, env=env)
        with log.open("ab") as file:
            return self.start(command, lead=lead, log=file, env=env)

    def _take_lead(self, process: Child) -> Child:
        self.lead = process
        if self.signals:  # a signal came while it was starting
            self._forward(self.signals[-1])
        return process

    def wait(self) -> int:
        """Wait for the lead to exit (forwarding signals meanwhile); the CLI's exit code."""
        if self.lead is None:
            raise RuntimeError("no lead process was started")
        return exit_code(self.lead.wait(), self.signals, self.signal_is_quit)

    # -- signals --------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == PARENT_DEATH_SIGNAL and signum in self.signals:
            return  # the repeat of a parent's death (one per thread it had), not a second request to stop
        self.signals.append(signum)
        self._forward(signum)
        if self.on_second is not None and len(self.signals) > 1:
            self.on_second(signum)

    def _forward(self, signum: int) -> None:
        if self.lead is not None and self.lead.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.lead.pid, FORWARDED.get(signal.Signals(signum), signal.SIGTERM))

    def __enter__(self) -> ChildProcesses:
        held = early_signals.take()
        if held:  # the command was told to stop while it started: nothing is started
            raise StoppedBeforeStart(held[0])
        for signum in FORWARDED:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if self.lead is not None and self.lead.poll() is None:
                self._forward(signal.SIGTERM)  # the CLI is leaving early (an error): stop the run, keep its results
                _wait_or_kill(self.lead, LEAD_EXIT_WAIT_S)
            for helper in self.helpers:
                _wait_or_kill(helper, HELPER_EXIT_WAIT_S)
        finally:
            if self._warm is not None and self._owns_warm:
                self._warm.close()
            for signum, previous in self._previous.items():
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
            self._previous.clear()


def _wait_or_kill(process: Child, timeout_s: float) -> None:
    """Wait up to `timeout_s` for `process`; then kill it with its process group (its session's)."""
    try:
        process.wait(timeout=timeout_s)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # not reaped yet, so the group is still its own
    process.wait()


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP noted while a command that runs many children (sweep, tune) is between
    them: the first says the command is stopping, a second ends the process at once (128 + its number).

    `ChildProcesses` blocks inside it take the signals while they run (forwarded to their lead); the
    command adds what they got with `note`, so the next signal counts as the second."""

    def __init__(self, command: str, on_second: str = "") -> None:
        self.command = command
        self.on_second = on_second
        self.received: list[int] = []
        self._previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}

    def note(self, signals: Sequence[int]) -> None:
        """Signals a `ChildProcesses` block received (and forwarded)."""
        self.received.extend(signals)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == PARENT_DEATH_SIGNAL and signum in self.received:
            return  # the repeat of a parent's death
        self.received.append(signum)
        name = signal.Signals(signum).name
        if len(self.received) > 1:
            self.exit_at_once(signum)
        sys.stderr.write(f"{self.command}: {name}: stopping (send it again to exit at once)\n")
        sys.stderr.flush()

    def exit_at_once(self, signum: int) -> None:
        """A second signal: the process ends now (128 + its number), saying so."""
        sys.stderr.write(f"{self.command}: {signal.Signals(signum).name} again: exiting at once{self.on_second}\n")
        sys.stderr.flush()
        os._exit(128 + int(signum))

    def __enter__(self) -> StopSignals:
        held = early_signals.take()
        if held:
            raise StoppedBeforeStart(held[0])
        for signum in FORWARDED:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()
