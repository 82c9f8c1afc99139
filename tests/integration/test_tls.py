"""TLS per target against real servers, with certificates made here by ``openssl``.

- Triton serves gRPC over TLS itself (``--grpc-use-ssl``), once with server TLS only and once with
  mutual TLS (``--grpc-use-ssl-mutual``: it refuses clients without a certificate from the CA).
- TorchServe serves its inference API over HTTPS itself (``inference_address=https://...`` with
  ``certificate_file``/``private_key_file``).
- Triton's HTTP endpoint has no TLS of its own: a ``triton-http`` target with TLS goes through a
  TLS-terminating proxy run by this test (``tests/support/tls_proxy.py``), standing in for the
  nginx or Envoy a user would put in front of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from inferload.local.models.specs import model_repository_dir, model_store_dir
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.procs import ProcessRecord, is_alive, spawn
from inferload.local.servers.torchserve_local import start_torchserve, stop_torchserve
from inferload.local.servers.triton_local import find_triton, prepare_backend_dir, stop_triton, triton_command, triton_env
from tests.support.locust_runner import run_locust
from tests.support.scenario_factory import tiny_target, write_scenario
from tests.support.tls_certs import Certificates, make_certificates
from tests.support.tls_proxy import TlsTerminatingProxy
from tests.support.waiting import wait_until

READY_DEADLINE_S = 180
MODEL = "identity"


@dataclass(frozen=True)
class TlsServers:
    certs: Certificates
    grpc_tls: str  # Triton gRPC with server TLS
    grpc_mtls: str  # Triton gRPC with mutual TLS
    http_proxy: str  # https:// proxy in front of the first Triton's plain HTTP port
    torchserve: str  # TorchServe's inference API over HTTPS


def _start_triton(work: Path, certs: Certificates, mutual: bool) -> tuple[ProcessRecord, ServerPorts]:
    ports = ServerPorts.free()
    install = find_triton()
    command = triton_command(install, prepare_backend_dir(install, work / "backends"), model_repository_dir(), ports, (MODEL,))
    command += [
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={certs.server_cert}",
        f"--grpc-server-key={certs.server_key}",
        f"--grpc-root-cert={certs.ca}",
    ]
    if mutual:
        command.append("--grpc-use-ssl-mutual=true")
    return spawn(command, work / "triton.log", triton_env(install), cwd=work), ports


def _ready_triton(work: Path, certs: Certificates, mutual: bool, deadline: float) -> tuple[ProcessRecord, ServerPorts]:
    """A Triton of ours answering ready on its ports. One that exits first (a port another session took
    between the choice and the bind: its HTTP ready check would read that other server) starts again on
    new ports, three times at most."""
    for attempt in range(1, 4):
        record, ports = _start_triton(work, certs, mutual)
        while is_alive(record.pid, record.start_ticks) and not _triton_ready(ports):
            assert time.monotonic() < deadline, (work / "triton.log").read_text()[-3000:]
            time.sleep(0.5)
        if is_alive(record.pid, record.start_ticks):
            return record, ports
        stop_triton(record)  # what it started before it exited
        assert attempt < 3, (work / "triton.log").read_text()[-3000:]
    raise AssertionError("unreachable")


def _triton_ready(ports: ServerPorts) -> bool:
    try:
        return requests.get(f"http://127.0.0.1:{ports.triton_http}/v2/models/{MODEL}/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _torchserve_answer(url: str, ca: Path) -> bytes:
    response = requests.post(url, data=bytes(64), headers={"Content-Type": "application/octet-stream"}, verify=str(ca), timeout=5)
    response.raise_for_status()
    return response.content


@pytest.fixture(scope="module")
def tls_servers(built_models: tuple[str, ...], tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServers]:
    work = tmp_path_factory.mktemp("tls")
    certs = make_certificates(work / "certs")
    (work / "t1").mkdir()
    (work / "t2").mkdir()
    started: list[tuple[ProcessRecord, ServerPorts]] = []
    ts_ports = ServerPorts.free()
    ts_record = start_torchserve(work, ts_ports, (MODEL,), store=model_store_dir(), tls=(certs.server_cert, certs.server_key))
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        started.append(_ready_triton(work / "t1", certs, False, deadline))
        started.append(_ready_triton(work / "t2", certs, True, deadline))
        ts_url = f"https://127.0.0.1:{ts_ports.ts_inference}"
        wait_until(
            lambda: _torchserve_answer(f"{ts_url}/predictions/{MODEL}", certs.ca), timeout_s=120, what="TorchServe over HTTPS"
        )
        tls_ports, mtls_ports = started[0][1], started[1][1]
        with TlsTerminatingProxy(("127.0.0.1", tls_ports.triton_http), certs.server_cert, certs.server_key) as proxy:
            yield TlsServers(
                certs,
                f"127.0.0.1:{tls_ports.triton_grpc}",
                f"127.0.0.1:{mtls_ports.triton_grpc}",
                f"https://127.0.0.1:{proxy.port}",
                ts_url,
            )
    finally:
        for record, _ in started:
            stop_triton(record)
        stop_torchserve(ts_record, work)


def _target(name: str, kind: str, address: str, **keys: Any) -> dict[str, Any]:
    target = tiny_target(name, kind, address, **keys)
    target["model"] = MODEL
    return target


def _scenario(folder: Path, targets: list[dict[str, Any]], users: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"name": "tls", "duration": "3s", "targets": targets, "shape": {"kind": "steady", "users": users}}
    return write_scenario(folder, data)


def test_triton_grpc_tls_and_mutual_tls_torchserve_https_and_triton_http_behind_a_proxy_run_without_failures(
    tls_servers: TlsServers, tmp_path: Path
) -> None:
    certs = tls_servers.certs
    ca = {"ca_file": str(certs.ca)}
    mutual = {**ca, "cert_file": str(certs.client_cert), "key_file": str(certs.client_key)}
    targets = [
        _target("grpc-tls", "triton-grpc", tls_servers.grpc_tls, tls=ca),
        _target("grpc-mtls", "triton-grpc", tls_servers.grpc_mtls, tls=mutual),
        _target("http-proxy", "triton-http", tls_servers.http_proxy, tls=ca),
        _target("ts-https", "torchserve-rest", tls_servers.torchserve, tls=ca),
    ]
    run = run_locust(_scenario(tmp_path, targets, users=4), tmp_path)

    assert run.returncode == 0, run.output
    for name in ("grpc-tls", "grpc-mtls", "http-proxy", "ts-https"):
        target = run.summary["targets"][name]
        assert target["requests"] > 0 and target["failures"] == 0, (name, target, run.failures_csv)
    for name in ("grpc-tls", "grpc-mtls", "http-proxy"):  # Triton's statistics read over the same TLS
        assert run.summary["targets"][name]["server_side"] is not None, (name, run.output[-3000:])
    key_line = certs.client_key.read_text().splitlines()[1]  # a line of the key's base64 body
    written = run.output + "".join(p.read_text(errors="replace") for p in run.results_dir.rglob("*") if p.is_file())
    assert key_line not in written


def test_a_wrong_ca_a_missing_client_certificate_and_plain_text_to_a_tls_port_stop_the_run_at_the_start_check(
    tls_servers: TlsServers, tmp_path: Path
) -> None:
    certs = tls_servers.certs
    wrong = {"ca_file": str(certs.other_ca)}
    targets = [
        _target("grpc-wrong-ca", "triton-grpc", tls_servers.grpc_tls, tls=wrong),
        _target("grpc-no-client-cert", "triton-grpc", tls_servers.grpc_mtls, tls={"ca_file": str(certs.ca)}),
        _target("grpc-plain", "triton-grpc", tls_servers.grpc_tls),
        _target("ts-wrong-ca", "torchserve-rest", tls_servers.torchserve, tls=wrong),
        _target("ts-plain", "torchserve-rest", tls_servers.torchserve.replace("https://", "http://")),
    ]
    run = run_locust(_scenario(tmp_path, targets, users=5), tmp_path)

    assert run.returncode == 2, run.output
    lines = {
        name: [line for line in run.output.splitlines() if f"target {name!r}" in line] for name in (t["name"] for t in targets)
    }
    assert all(lines.values()), run.output
    assert "TLS handshake failed" in lines["grpc-wrong-ca"][0], lines
    assert "does it want a client certificate" in lines["grpc-no-client-cert"][0], lines
    assert "does the server expect TLS" in lines["grpc-plain"][0], lines
    assert "CERTIFICATE_VERIFY_FAILED" in lines["ts-wrong-ca"][0] and str(certs.other_ca) in lines["ts-wrong-ca"][0], lines
    assert "serves HTTPS only" in lines["ts-plain"][0] and "write https://" in lines["ts-plain"][0], lines
