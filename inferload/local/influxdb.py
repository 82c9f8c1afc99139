"""A throwaway InfluxDB 1.x (`influxd`, Debian's `influxdb` package) on loopback, in a folder of its own.

One launcher for everything that needs a real InfluxDB on this machine: the integration tests
(`tests/support/influx_fixture.py`) and the benchmarks (`bench/`). `start()` writes a config file
into `root` (data, WAL and meta folders under it, both ports on 127.0.0.1, reporting and the
internal monitor off), runs `influxd run -config ...` and polls `/ping` until it answers or the
deadline passes; `stop()` ends the process (terminate, then kill). Errors are `ServerError`s that
say what to do.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from inferload.errors import ServerError
from inferload.launch.distributed import free_port

LOOPBACK = "127.0.0.1"
INSTALL_HINT = "install it with `sudo apt-get install influxdb` (or `bash scripts/install-system-deps.sh test`)"


@dataclass
class LocalInfluxDB:
    """One `influxd` process with its own config, folders and loopback ports."""

    root: Path
    port: int = field(default_factory=free_port)
    rpc_port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        return self.root / "influxd.log"

    def config_text(self) -> str:
        return (
            f'reporting-disabled = true\nbind-address = "{LOOPBACK}:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{self.root / "meta"}"\n'
            f'[data]\n  dir = "{self.root / "data"}"\n  wal-dir = "{self.root / "wal"}"\n  query-log-enabled = false\n'
            f'[http]\n  bind-address = "{LOOPBACK}:{self.port}"\n  log-enabled = false\n'
            "[monitor]\n  store-enabled = false\n"
            "[continuous_queries]\n  enabled = false\n"
            '[logging]\n  level = "warn"\n'
        )

    def start(self, timeout_s: float = 30.0, influxd: str | None = None) -> None:
        """Start `influxd` and return once `/ping` answers 204; a ServerError (and nothing left running) if not."""
        program = influxd or shutil.which("influxd")
        if program is None:
            raise ServerError(f"influxd is missing: {INSTALL_HINT}")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "influxdb.conf"
        config.write_text(self.config_text())
        with self.log_path.open("ab") as log:  # the child keeps its own copy of the descriptor
            process = subprocess.Popen(
                [program, "run", "-config", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        with self._lock:
            self._process = process
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self.stop()
                raise ServerError(f"influxd exited at start (code {process.returncode}): {self.log_tail()}")
            if self.answers_ping():
                return
            time.sleep(0.1)  # poll interval of the /ping wait
        self.stop()
        raise ServerError(f"influxd did not answer {self.url}/ping within {timeout_s:g} s: {self.log_tail()}")

    def answers_ping(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/ping", timeout=1.0) as response:
                return bool(response.status == 204)
        except OSError:
            return False

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no log at {self.log_path})"

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the process: terminate, then kill after `timeout_s`. Safe to call twice, or when never started."""
        with self._lock:
            process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout_s)

    def query(self, influxql: str, database: str | None = None) -> dict[str, Any]:
        """Run InfluxQL through the real `/query` API (POST, epoch ms); the decoded JSON answer.

        InfluxQL errors come back as the answer's "error" keys (InfluxDB sends them as HTTP 400
        with a JSON body); anything else that fails is a ServerError.
        """
        params = {"q": influxql, "epoch": "ms"}
        if database is not None:
            params["db"] = database
        request = urllib.request.Request(f"{self.url}/query", data=urllib.parse.urlencode(params).encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10.0) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as exc:
            body = exc.read().decode(errors="replace")
            try:
                return dict(json.loads(body))
            except ValueError:
                raise ServerError(f"{influxql}: HTTP {exc.code}: {body}") from None
        except OSError as exc:
            raise ServerError(f"{influxql}: InfluxDB at {self.url} did not answer: {exc}") from None

    def create_database(self, name: str) -> None:
        answer = self.query(f'CREATE DATABASE "{name}"')
        errors = [r["error"] for r in answer.get("results", []) if "error" in r]
        if "error" in answer or errors:
            raise ServerError(f"CREATE DATABASE {name} failed: {answer.get('error') or errors[0]}")

    def __enter__(self) -> LocalInfluxDB:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()
