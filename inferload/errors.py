"""The exception tree of inferload.

    InferloadError                  every error inferload raises on purpose (exit code 1)
    ├── UsageError                  a bad option, argument or input: nothing was started (exit code 2)
    │   ├── ScenarioError           a scenario file is invalid (.problems: one line each)
    │   ├── ConfigFileError         another configuration file is invalid (the reference server's; .problems)
    │   ├── ModelMismatchError      the scenario's tensors do not match the served model
    │   ├── StartCheckError         the start checks found problems before any load (.problems)
    │   └── RunKeyError             a distributed run has no usable run key (INFERLOAD_RUN_KEY)
    ├── StoppedBeforeStart          SIGINT/SIGTERM came while the command started: nothing was started (128 + it)
    ├── ServerChangeError           a server's settings could not be changed, journaled or put back
    ├── ServerError                 a local server could not be started, reached or stopped
    │   ├── PortInUseError          a configured port is already taken
    │   └── JavaMissingError        TorchServe needs a JDK 11+ and none was found
    ├── ScrapeError                 a server's metrics or statistics could not be read, or made no sense
    └── RequestError                one inference call failed (reported to Locust as a failure)
        ├── ConnectionRefused
        ├── RequestTimeout
        ├── HttpStatusError         .status, .detail
        │   └── SequenceRefused     a new sequence refused (the user backs off and opens it again)
        ├── GrpcStatusError         .code
        └── BadOutputShape

Request errors have stable messages (no per-request numbers) so Locust groups them.

**Exit codes.** Each class carries the exit code of the `inferload` command it ends
(``exit_code``): 2 for every usage error (an option, argument, scenario or input file that is
wrong, a server that cannot be used as asked: found before anything starts), 1 for everything
else (SLO breaches and failed requests are 1 too, but they are verdicts, not errors). Only
``inferload.cli.main`` turns an error into an exit code; library code raises.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

#: what a secret (a token, a password) is shown as in logs, messages and result files
MASK = "***"
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<password>[^@/\s]+)@")


def mask_secrets(text: str, secrets: Iterable[str | None]) -> str:
    """`text` with every secret value, and any `user:password@` in a URL, replaced by ***."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)


#: the exit code of a usage error (shells and CI read 2 as "the command was used wrongly")
EXIT_USAGE = 2
#: the exit code of an SLO breach, failed requests, or any other error
EXIT_FAILED = 1


class InferloadError(Exception):
    """Base of every error inferload raises on purpose."""

    #: the `inferload` command's exit code when this error ends it (mapped in `inferload.cli.main` only)
    exit_code: int = EXIT_FAILED


class UsageError(InferloadError):
    """A bad option, argument or input (file, address, bound): found before anything started."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: where, and what was expected."""

    file: str
    key_path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key_path}" if self.key_path else self.file
        return f"{where}: {self.message}"


class ScenarioError(UsageError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigFileError(UsageError):
    """A configuration file other than a scenario (the reference server's) is invalid; ``.problems``
    are ``Problem`` lines (file, key path, what was expected)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ModelMismatchError(UsageError):
    """The scenario's tensors do not match what the server says the model takes."""


class StartCheckError(UsageError):
    """The start checks found problems (``.problems``: one line each); no load was sent.

    Raised by ``inferload.startchecks.fit.fit_to_models`` (servers and models) and
    ``inferload.run.results_dir.check_results_dir`` (run id, results folder); a locustfile exits 2 on it.
    """

    def __init__(self, problems: list[str], skippable: bool = True) -> None:
        self.problems = list(problems)
        #: whether ``--skip-start-checks`` would have let the run go on
        self.skippable = skippable
        super().__init__("\n".join(self.problems))


class RunKeyError(UsageError):
    """No usable run key where a distributed run needs one."""


class StoppedBeforeStart(InferloadError):
    """A stop signal came while the command was starting (`inferload.run.early_signals`): it ends
    before it starts anything, with the shell's code for that signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int) -> None:
        import signal

        self.exit_code = 128 + int(signum)
        super().__init__(f"{signal.Signals(signum).name} while starting: stopped before anything was started")


class ServerChangeError(InferloadError):
    """A server's settings could not be changed, recorded in the journal of server changes, or put back."""


class ServerError(InferloadError):
    """A local server could not be started, reached or stopped."""


class PortInUseError(ServerError):
    pass


class JavaMissingError(ServerError):
    pass


class ScrapeError(InferloadError):
    """A server's metrics page or statistics API could not be read, or its answer made no sense
    (refused, timed out, HTTP error, not Prometheus text, the model missing, counters that went back)."""


class RequestError(InferloadError):
    """One inference call failed; the message is stable so Locust groups failures."""


class ConnectionRefused(RequestError):
    pass


class RequestTimeout(RequestError):
    pass


class HttpStatusError(RequestError):
    def __init__(self, status: int, detail: str = "") -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"HTTP {status}" + (f": {detail}" if detail else ""))


class SequenceRefused(HttpStatusError):
    """The server refused to open a new sequence (TorchServe answers 503 while it still holds as many
    as its ``maxNumSequence``, an ended one among them for a while): the user backs off, as from a
    refused connection, and opens the same sequence again."""


class GrpcStatusError(RequestError):
    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        super().__init__(f"gRPC {code}" + (f": {detail}" if detail else ""))


class BadOutputShape(RequestError):
    pass
