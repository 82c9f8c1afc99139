"""The local real servers: up, status, down, cold start, and the errors users meet first."""

from __future__ import annotations

import json
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferload.errors import JavaMissingError, PortInUseError
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts, check_free, is_port_open
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import TorchServeModelConfig, check_java, config_properties, start_torchserve


def run_python(code: str) -> str:
    """Run code in a fresh interpreter (another process, as the CLI would be); its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_up_waits_for_a_real_inference_and_records_cold_start(local_servers):
    for server in ("triton", "torchserve"):
        entry = local_servers.up_result["servers"][server]
        assert entry["ready"] is True and entry["already_running"] is False
        assert entry["cold_start_s"] > 0
        assert set(entry["models_cold_start_s"]) == {"tiny", "cnn", "identity"}
        assert all(0 < s <= entry["cold_start_s"] for s in entry["models_cold_start_s"].values())


def test_state_json_holds_pids_ports_logs_and_cold_start(local_servers):
    state = json.loads((local_servers.state_dir / "state.json").read_text())
    assert state["ports"] == local_servers.ports.to_dict()
    for server in ("triton", "torchserve"):
        entry = state["servers"][server]
        assert entry["pid"] > 0 and entry["cold_start_s"] > 0
        assert Path(entry["log"]).stat().st_size > 0
    assert "Started GRPCInferenceService" in Path(state["servers"]["triton"]["log"]).read_text()


def test_servers_bind_loopback_only(local_servers):
    triton = local_servers.up_result["servers"]["triton"]["urls"]
    torchserve = local_servers.up_result["servers"]["torchserve"]["urls"]
    assert all("127.0.0.1" in url for url in [*triton.values(), *torchserve.values()])
    config = (local_servers.state_dir / "torchserve" / "config.properties").read_text()
    assert "0.0.0.0" not in config
    assert "--http-address=127.0.0.1" in " ".join(local_servers.up_result["servers"]["triton"]["process"]["command"])


def test_status_works_from_another_process(local_servers):
    out = run_python(
        "import json; from pathlib import Path; from inferload.local.servers.manager import LocalServers; "
        f"print(json.dumps(LocalServers(Path({str(local_servers.state_dir)!r})).status()))"
    )
    status = json.loads(out.strip().splitlines()[-1])
    assert status["running"] is True
    for server in ("triton", "torchserve"):
        assert status["servers"][server]["running"] is True
        assert all(status["servers"][server]["ports_open"].values())
        assert status["servers"][server]["cold_start_s"] > 0


def test_up_when_already_up_reports_it_instead_of_failing(local_servers):
    started = time.monotonic()
    again = local_servers.servers.up()
    assert time.monotonic() - started < 5
    assert again["servers"]["triton"]["already_running"] is True
    assert again["servers"]["torchserve"]["already_running"] is True
    assert again["servers"]["triton"]["pid"] == local_servers.up_result["servers"]["triton"]["pid"]


def test_a_taken_port_is_named_with_the_service_that_wanted_it(tmp_path):
    ports = ServerPorts.free()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports.ts_metrics))
        holder.listen()
        with pytest.raises(PortInUseError, match=rf"port {ports.ts_metrics} .*TorchServe metrics"):
            check_free(ports)
        with pytest.raises(PortInUseError, match=rf"port {ports.ts_metrics} .*TorchServe metrics"):
            LocalServers(tmp_path, ports, ("tiny",)).up(which=("torchserve",))
    assert processes_mentioning(str(tmp_path)) == []


def test_the_same_port_twice_is_refused():
    with pytest.raises(PortInUseError, match="configured twice"):
        check_free(ServerPorts(triton_http=18123, triton_grpc=18123))


def test_java_missing_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(JavaMissingError, match="no `java` was found on PATH"):
        check_java({"PATH": str(tmp_path)})
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(JavaMissingError, match="JDK"):
        start_torchserve(tmp_path / "state", ServerPorts.free(), ("tiny",))
    assert processes_mentioning(str(tmp_path)) == []


def test_java_older_than_11_is_refused(tmp_path):
    fake = tmp_path / "java"
    fake.write_text("#!/bin/sh\necho 'java version \"1.8.0_392\"' >&2\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(JavaMissingError, match="Java 11 or newer; the `java` on PATH is Java 8"):
        check_java({"PATH": str(tmp_path)})


def test_the_installed_java_is_accepted():
    assert check_java() >= 11


def test_torchserve_config_batches_and_keeps_everything_local(tmp_path):
    text = config_properties(
        ServerPorts(),
        ("tiny", "cnn"),
        tmp_path / "store",
        tmp_path / "tmp",
        TorchServeModelConfig(batch_size=8, max_batch_delay_ms=5),
    )
    assert "inference_address=http://127.0.0.1:8080" in text
    assert "metrics_mode=prometheus" in text and "model_metrics_auto_detect=true" in text
    assert "disable_token_authorization=true" in text
    assert f"-Djava.io.tmpdir={tmp_path / 'tmp'}" in text
    models = json.loads(text.split("\nmodels=", 1)[1].splitlines()[0])
    assert models["cnn"]["1.0"]["batchSize"] == 8 and models["cnn"]["1.0"]["maxBatchDelay"] == 5


def test_down_from_another_process_leaves_nothing_behind(built_models, tmp_path):
    state_dir = tmp_path / "cycle"
    ports = ServerPorts.free()
    result = LocalServers(state_dir, ports, ("tiny",)).up(timeout_s=120)
    assert processes_mentioning(str(state_dir)), "servers should be running"
    assert result["servers"]["triton"]["cold_start_s"] > 0
    assert result["servers"]["torchserve"]["cold_start_s"] > 0

    out = run_python(
        "import json; from pathlib import Path; from inferload.local.servers.manager import LocalServers; "
        f"print(json.dumps(LocalServers(Path({str(state_dir)!r})).down()))"
    )
    stopped = json.loads(out.strip().splitlines()[-1])["stopped"]
    assert stopped["triton"]["was_running"] and stopped["torchserve"]["was_running"]
    assert processes_mentioning(str(state_dir)) == []
    assert not any(is_port_open(p) for p in ports.to_dict().values())
    status = LocalServers(state_dir).status()
    assert status["running"] is False and status["servers"] == {}
    # down again: nothing to do, no error
    assert LocalServers(state_dir).down()["stopped"] == {}
