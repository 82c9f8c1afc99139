"""A throwaway InfluxDB 1.x (Debian's `influxd`) on loopback, in a temporary folder."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from inferload.errors import ServerError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalInflux:
    """`influxd run` with its own config, data and ports; `stop()` ends it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = _free_port()
        self.rpc_port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        influxd = shutil.which("influxd")
        if influxd is None:
            raise ServerError("influxd is missing (install it: sudo apt-get install influxdb)")
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "influxdb.conf"
        config.write_text(
            f'reporting-disabled = true\nbind-address = "127.0.0.1:{self.rpc_port}"\n'
            f'[meta]\n  dir = "{self.root / "meta"}"\n'
            f'[data]\n  dir = "{self.root / "data"}"\n  wal-dir = "{self.root / "wal"}"\n  query-log-enabled = false\n'
            f'[http]\n  bind-address = "127.0.0.1:{self.port}"\n  log-enabled = false\n'
            "[monitor]\n  store-enabled = false\n"
        )
        log = (self.root / "influxd.log").open("wb")
        self._process = subprocess.Popen(
            [influxd, "run", "-config", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ServerError(f"influxd exited at start; see {self.root / 'influxd.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/ping", timeout=1.0):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise ServerError(f"influxd did not answer /ping in {timeout_s:g} s")

    def query(self, q: str) -> bytes:
        data = urllib.parse.urlencode({"q": q}).encode()
        with urllib.request.urlopen(f"{self.url}/query", data=data, timeout=10.0) as response:
            return response.read()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
        self._process = None
