"""What a failed write says: whether trying again can help, and a message without secrets."""

from __future__ import annotations

from inferload.errors import InferloadError


class SinkError(InferloadError):
    """A write to InfluxDB failed. `retryable` is False when the same batch would fail again
    (bad request, authentication, unknown database): that batch is dropped."""

    def __init__(self, message: str, retryable: bool, status: int | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status


def is_retryable_status(status: int) -> bool:
    return status == 429 or status >= 500
