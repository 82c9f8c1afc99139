"""What the two KServe REST users share: one geventhttpclient client per user, a JSON POST of a
pre-encoded body, the HTTP status turned into a failure class, and the JSON answer.

The bodies are JSON (``kserve_bodies``), encoded once per process and target up front; a call
picks the next one (``next_request()``), posts it and reads the whole answer, whose length is the
reported response size. KServe, MLServer and Triton put the reason of a refusal in ``error``
(v2) or ``detail`` (FastAPI); its first line goes in the failure message.
"""

from __future__ import annotations

import json
from typing import Any

from geventhttpclient import HTTPClient
from geventhttpclient.url import URL

from inferload.scenario.headers import request_headers
from inferload.users.base import InferenceUser
from inferload.users.engine import NativeTarget
from inferload.users.expected import expected_check_of
from inferload.users.http_answer import close_client, post_for_answer
from inferload.users.tls import http_tls_options, native_tls


class KServeHttpUser(InferenceUser):
    """Abstract: a KServe REST protocol; subclasses give ``path()`` and check the answer in ``send()``."""

    abstract = True
    request_type = "REST"

    def path(self) -> str:
        raise NotImplementedError

    @classmethod
    def target_path(cls) -> str:
        """The inference path of the class's target (``path()`` for the class)."""
        raise NotImplementedError

    @classmethod
    def native_answer_check(cls) -> dict[str, Any]:
        """How the engine judges an answer's body (``response_check: shape``; else nothing)."""
        return {"answer": "none"}

    @classmethod
    def native_target(cls) -> NativeTarget:
        """The engine's HTTP target: the pre-encoded JSON bodies, KServe's status and answer checks."""
        target = cls.target
        pool = cls.request_pool_of_class
        assert pool is not None  # native_target_id encodes the pool first
        path = cls.target_path()
        headers = {
            "Content-Type": "application/json",
            **request_headers(target.name, target.headers, target.headers_from_env, target.token_file, cls.scenario_dir),
        }
        check = {
            "status": "2xx" if target.response_check == "none" else "200",
            "detail": {"json_keys": ["error", "detail", "message"], "chars": 120},
            **cls.native_answer_check(),
        }
        address = target.address if "://" in target.address else f"http://{target.address}"
        return NativeTarget(
            protocol="http",
            address=address,
            requests=[(path, body, []) for body in pool.encoded_requests],
            check=check,
            headers=list(headers.items()),
            tls=native_tls(target.tls, cls.scenario_dir, target.name) if target.tls is not None else None,
        )

    def connect(self) -> None:
        target = self.target
        url = URL(target.address if "://" in target.address else f"http://{target.address}")
        tls = http_tls_options(target.tls, self.scenario_dir, target.name) if target.tls is not None else {}
        self._client = HTTPClient.from_url(
            url, concurrency=1, connection_timeout=target.timeout, network_timeout=target.timeout, **tls
        )
        self._expected = expected_check_of(type(self))  # response_check: expected (file read once per process)
        self._path = self.path()
        self.request_pool()  # the first user of the target in this process encodes every request here
        self._headers = {
            "Content-Type": "application/json",
            **request_headers(target.name, target.headers, target.headers_from_env, target.token_file, self.scenario_dir),
        }

    def post_next(self) -> tuple[int, bytes]:
        """(request index, answer body) of the next pre-encoded request; HttpStatusError unless accepted."""
        index, body = self.next_request()
        answer = post_for_answer(self._client, self._path, body, self._headers, self.target.response_check, error_detail)
        return index, answer

    def close(self) -> None:
        close_client(self)


def error_detail(body: bytes) -> str:
    """The first line of a KServe/MLServer/Triton error answer (``error`` or ``detail``), at most 120 characters."""
    try:
        answer: Any = json.loads(body)
    except ValueError:
        answer = None
    message = ""
    if isinstance(answer, dict):
        message = str(answer.get("error") or answer.get("detail") or answer.get("message") or "")
    elif body:
        message = body[:120].decode("utf-8", "replace")
    return message.strip().splitlines()[0][:120] if message.strip() else ""
