"""The kserve-v1-http start check on servers without KServe's v1 model routes: TorchServe serves
``POST /v1/models/<m>:predict`` but answers 404 to ``GET /v1/models/<m>`` and ``GET /v1/models``;
that is no proof the model is not served. A fake HTTP server (in a thread) answers the routes."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from inferload.errors import ModelMismatchError
from inferload.scenario.targets import Target
from inferload.startchecks.kserve import read_v1_model
from tests.support.scenario_factory import bare_target


def fake_server(listing: list[str] | None) -> ThreadingHTTPServer:
    """404 to every model route; ``GET /v1/models`` lists ``listing`` (None: 404 too)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/v1/models" and listing is not None
            body = json.dumps({"models": listing} if found else {"error": "not found"}).encode()
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


@pytest.fixture
def serving(request: pytest.FixtureRequest) -> Iterator[Target]:
    server = fake_server(request.param)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Target.model_validate(
            bare_target("v1", "kserve-v1-http", f"http://127.0.0.1:{server.server_address[1]}", model="m")
        )
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("serving", [None], indirect=True)
def test_a_server_without_v1_model_routes_is_a_warning_not_a_model_it_does_not_serve(serving, caplog) -> None:
    with caplog.at_level(logging.WARNING):
        assert read_v1_model(serving, timeout_s=5.0) == {}
    assert "has no KServe v1 model routes" in caplog.text and "going on" in caplog.text


@pytest.mark.parametrize("serving", [["other"]], indirect=True)
def test_a_server_that_lists_its_models_without_this_one_does_not_serve_it(serving) -> None:
    with pytest.raises(ModelMismatchError, match=r"does not serve .*it serves: other"):
        read_v1_model(serving, timeout_s=5.0)
