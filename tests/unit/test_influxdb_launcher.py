"""The package's InfluxDB launcher (inferload.local.influxdb) on stand-in programs: a fake `influxd`
that answers /ping and /query like InfluxDB 1.x, one that dies at start, one that never answers.
The real `influxd` runs under it in every integration test that uses the `influxdb` fixture."""

from __future__ import annotations

import shutil
import stat
import sys
from pathlib import Path

import psutil
import pytest

from inferload.errors import ServerError
from inferload.local.influxdb import LocalInfluxDB

SLEEP = shutil.which("sleep")  # found before a test empties PATH

#: reads the [http] bind-address from `-config`, answers /ping with 204 and /query with InfluxDB's JSON
FAKE_INFLUXD = """
import json, re, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs

config = open(sys.argv[sys.argv.index("-config") + 1]).read()
host, port = re.search(r'\\[http\\]\\n  bind-address = "([^:]+):(\\d+)"', config).groups()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(204 if self.path == "/ping" else 404)
        self.end_headers()

    def do_POST(self):
        form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        query = form["q"][0]
        if query.startswith("CREATE DATABASE"):
            status, body = 200, {"results": [{"statement_id": 0}]}
        else:
            status, body = 400, {"error": f"error parsing query: {query}"}
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps(body).encode())

    def log_message(self, *args):
        pass

HTTPServer((host, int(port)), Handler).serve_forever()
"""


def program(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_the_config_keeps_both_ports_on_loopback_and_every_folder_under_root(tmp_path: Path) -> None:
    influx = LocalInfluxDB(tmp_path / "db", port=18086, rpc_port=18088)
    text = influx.config_text()
    assert 'bind-address = "127.0.0.1:18088"' in text and 'bind-address = "127.0.0.1:18086"' in text
    for folder in ("meta", "data", "wal"):
        assert f'"{tmp_path / "db" / folder}"' in text
    assert "reporting-disabled = true" in text and influx.url == "http://127.0.0.1:18086"


def test_start_waits_for_ping_then_queries_work_and_stop_ends_the_process(tmp_path: Path) -> None:
    fake = program(tmp_path, "influxd", f"#!{sys.executable}\n{FAKE_INFLUXD}")
    influx = LocalInfluxDB(tmp_path / "db")
    try:
        influx.start(timeout_s=20, influxd=fake)
        pid = influx.pid
        assert pid is not None and influx.answers_ping()
        influx.create_database("inferload")
        assert "error parsing query" in influx.query("SELEC nonsense")["error"]  # InfluxQL errors are data
    finally:
        influx.stop()
    assert influx.pid is None and not psutil.pid_exists(pid)
    influx.stop()  # twice is fine


@pytest.fixture()
def influxd_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", str(tmp_path))
    return tmp_path


def test_a_missing_influxd_says_how_to_install_it(influxd_on_path: Path) -> None:
    with pytest.raises(ServerError, match="influxd is missing: install it with `sudo apt-get install influxdb`"):
        LocalInfluxDB(influxd_on_path / "db").start()


def test_an_influxd_that_exits_at_start_is_an_error_with_its_log(influxd_on_path: Path) -> None:
    program(influxd_on_path, "influxd", "#!/bin/sh\necho 'run: open server: bad config' >&2\nexit 3\n")
    influx = LocalInfluxDB(influxd_on_path / "db")
    with pytest.raises(ServerError, match=r"influxd exited at start \(code 3\): run: open server: bad config"):
        influx.start(timeout_s=10)
    assert influx.pid is None


def test_an_influxd_that_never_answers_is_stopped_at_the_deadline(influxd_on_path: Path) -> None:
    pid_file = influxd_on_path / "pid"
    program(influxd_on_path, "influxd", f"#!/bin/sh\necho $$ > {pid_file}\nexec {SLEEP} 60\n")
    influx = LocalInfluxDB(influxd_on_path / "db")
    with pytest.raises(ServerError, match=r"did not answer http://127\.0\.0\.1:\d+/ping within 0\.5 s"):
        influx.start(timeout_s=0.5)
    assert influx.pid is None and not psutil.pid_exists(int(pid_file.read_text()))


def test_a_query_to_nothing_is_a_server_error(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="did not answer"):
        LocalInfluxDB(tmp_path).query("SHOW DATABASES")
