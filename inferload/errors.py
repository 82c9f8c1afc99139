"""The exception tree of inferload.

    InferloadError                  every error inferload raises on purpose
    ├── ScenarioError               a scenario file is invalid (.problems: one line each)
    ├── ModelMismatchError          the scenario's tensors do not match the served model
    ├── ServerError                 a local server could not be started, reached or stopped
    │   ├── PortInUseError          a configured port is already taken
    │   └── JavaMissingError        TorchServe needs a JDK 11+ and none was found
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


class ServerError(InferloadError):
    """A local server could not be started, reached or stopped."""


class PortInUseError(ServerError):
    pass


class JavaMissingError(ServerError):
    pass


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
