"""The exception tree of inferload.

    InferloadError                  every error inferload raises on purpose
    ├── ScenarioError               a scenario file is invalid (.problems: one line each)
    ├── ModelMismatchError          the scenario's tensors do not match the served model
    ├── StartCheckError             the start checks found problems before any load (.problems)
    ├── RunKeyError                 a distributed run has no usable run key (INFERLOAD_RUN_KEY)
    ├── ServerError                 a local server could not be started, reached or stopped
    │   ├── PortInUseError          a configured port is already taken
    │   └── JavaMissingError        TorchServe needs a JDK 11+ and none was found
    ├── ScrapeError                 a server's metrics or statistics could not be read, or made no sense
    └── RequestError                one inference call failed (reported to Locust as a failure)
        ├── ConnectionRefused
        ├── RequestTimeout
        ├── HttpStatusError         .status
        ├── GrpcStatusError         .code
        └── BadOutputShape

Request errors have stable messages (no per-request numbers) so Locust groups them.
"""

from __future__ import annotations

from dataclasses import dataclass


class InferloadError(Exception):
    """Base of every error inferload raises on purpose."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file: where, and what was expected."""

    file: str
    key_path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key_path}" if self.key_path else self.file
        return f"{where}: {self.message}"


class ScenarioError(InferloadError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ModelMismatchError(InferloadError):
    """The scenario's tensors do not match what the server says the model takes."""


class StartCheckError(InferloadError):
    """The start checks found problems (``.problems``: one line each); no load was sent.

    Raised by ``inferload.run.model_fit.fit_to_models`` (servers and models) and
    ``inferload.run.results_dir.check_results_dir`` (run id, results folder); a locustfile exits 2 on it.
    """

    def __init__(self, problems: list[str], skippable: bool = True) -> None:
        self.problems = list(problems)
        #: whether ``--skip-start-checks`` would have let the run go on
        self.skippable = skippable
        super().__init__("\n".join(self.problems))


class RunKeyError(InferloadError):
    """No usable run key where a distributed run needs one."""


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
        super().__init__(f"HTTP {status}" + (f": {detail}" if detail else ""))


class GrpcStatusError(RequestError):
    def __init__(self, code: str, detail: str = "") -> None:
        self.code = code
        super().__init__(f"gRPC {code}" + (f": {detail}" if detail else ""))


class BadOutputShape(RequestError):
    pass
