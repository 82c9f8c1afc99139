"""The local real servers: up, status, down, cold start, the installed Java (the checks that come
before anything starts are in tests/unit/test_local_server_checks.py)."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
import time
from pathlib import Path

from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts, is_port_open
from inferload.local.servers.procs import processes_mentioning
from inferload.local.servers.torchserve_local import check_java, short_tmpdir


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


def test_the_installed_java_is_accepted():
    assert check_java() >= 11


#: Triton's Python backend keeps an environment folder here (not under TMPDIR) and removes it only
#: when every model's stub has ended before Triton exits
TRITON_PYTHON_ENVS = "/tmp/python_env_*"


def test_down_from_another_process_leaves_nothing_behind(built_models, tmp_path):
    state_dir = tmp_path / "cycle"
    ports = ServerPorts.free()
    python_envs_before = set(glob.glob(TRITON_PYTHON_ENVS))
    result = LocalServers(state_dir, ports, ("tiny", "cnn")).up(timeout_s=120)
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
    # Triton unloaded every model before it exited (the cnn takes seconds), so its Python backend
    # removed its folder in /tmp
    triton_log = (state_dir / "triton" / "triton.log").read_text()
    assert "Exit timeout expired" not in triton_log and "Non-graceful termination" not in triton_log, triton_log[-2000:]
    assert "successfully unloaded 'cnn'" in triton_log
    assert set(glob.glob(TRITON_PYTHON_ENVS)) <= python_envs_before
    status = LocalServers(state_dir).status()
    assert status["running"] is False and status["servers"] == {}
    # down again: nothing to do, no error
    assert LocalServers(state_dir).down()["stopped"] == {}


def test_torchserve_runs_from_a_state_dir_too_deep_for_unix_sockets(built_models, tmp_path):
    """TorchServe's worker sockets live in its TMPDIR and a socket path holds at most 107 bytes: a
    deep state dir (a deep working folder with the default `.inferload/servers`) used to leave it
    never ready. It is reached through a short link instead, and `down` still leaves nothing."""
    state_dir = tmp_path / ("deep-folder-" * 8) / ".inferload" / "servers"
    link = short_tmpdir(state_dir / "torchserve" / "tmp")
    assert len(str(state_dir / "torchserve" / "tmp" / ".ts.sock.9000")) > 107 and link != state_dir / "torchserve" / "tmp"
    servers = LocalServers(state_dir, ServerPorts.free(), ("tiny",))
    try:
        result = servers.up(which=("torchserve",), timeout_s=120)
        assert result["servers"]["torchserve"]["cold_start_s"] > 0
    finally:
        servers.down()
    assert processes_mentioning(str(state_dir)) == [] and processes_mentioning(str(link)) == []
