"""The local KServe model server's parts that need no server: its venv's key and layout, its command
line, the `--servers` lists of `servers up` and `demo`, and the demo's KServe target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inferload.cli import main, parse_servers
from inferload.errors import InferloadError, ServerError
from inferload.local.demo import DEMO_SERVERS, demo_server, demo_target
from inferload.local.servers import kserve_local
from inferload.local.servers.kserve_local import KSERVE_VENV, REQUIREMENTS, kserve_command
from inferload.local.servers.manager import urls
from inferload.local.servers.ports import ServerPorts
from inferload.local.servers.server_venv import VenvSpec, link_main_packages, venv_dir
from inferload.scenario.loader import scenario_from_dict


def test_the_venv_is_named_by_a_hash_of_what_it_holds(tmp_path: Path) -> None:
    assert venv_dir(KSERVE_VENV, tmp_path) == tmp_path / f"kserve-{KSERVE_VENV.key()}"
    other = VenvSpec("kserve", (*REQUIREMENTS[:-1], "zz==1"))
    assert other.key() != KSERVE_VENV.key() and VenvSpec("kserve", REQUIREMENTS).key() == KSERVE_VENV.key()
    assert any(r.startswith("kserve==") for r in REQUIREMENTS) and not any(r.startswith("torch==") for r in REQUIREMENTS)


def test_torch_is_linked_from_the_main_environment_not_installed(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    link_main_packages(VenvSpec("x", (), links=("torch",)), tmp_path / "venv")
    linked = tmp_path / "venv" / "linked" / "torch"
    assert linked.is_symlink() and (linked / "__init__.py").is_file()
    assert (site / "zz_inferload_linked.pth").read_text().strip() == str(tmp_path / "venv" / "linked")


def test_the_command_serves_the_models_on_the_given_host_and_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = tmp_path / "model.pt"  # the fast layer builds no models: a file where the built one would be
    built.write_bytes(b"")
    monkeypatch.setattr(kserve_local, "torchscript_path", lambda model: built)
    ports = ServerPorts(kserve_http=18090, kserve_grpc=18091)
    command = kserve_command(tmp_path, ports, ("tiny",), host="127.0.0.1")
    assert command[0] == str(tmp_path / "bin" / "python") and command[1].endswith("kserve_model.py")
    assert command[command.index("--host") + 1] == "127.0.0.1"
    assert command[command.index("--http_port") + 1] == "18090" and command[command.index("--grpc_port") + 1] == "18091"
    (model,) = json.loads(command[command.index("--models") + 1])
    assert model["name"] == "tiny" and model["input"] == [16] and model["path"].endswith("model.pt")
    assert urls("kserve", ports) == {
        "http": "http://127.0.0.1:18090",
        "grpc": "127.0.0.1:18091",
        "metrics_url": "http://127.0.0.1:18090/metrics",
    }
    assert ports.for_server("kserve") == {"kserve_http": 18090, "kserve_grpc": 18091}


def test_server_lists_default_to_the_two_of_the_mission_and_name_what_is_unknown() -> None:
    assert parse_servers(None, "--servers") == ("triton", "torchserve")
    assert parse_servers("triton, kserve,triton", "--servers") == ("triton", "kserve")
    with pytest.raises(InferloadError, match=r"--servers: unknown server\(s\) \['mlserver'\]"):
        parse_servers("triton,mlserver", "--servers")


def test_a_server_the_demo_cannot_compare_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--servers", "triton,nope"]) == 2
    assert "unknown server(s) ['nope']" in capsys.readouterr().err
    assert main(["servers", "up", "--servers", "nope", "--state-dir", "/nonexistent/x"]) == 2


def test_the_demo_target_of_each_server_is_a_valid_scenario_target() -> None:
    ports = ServerPorts()
    targets = [demo_target(server.kind, f"{server.kind}.steady", "tiny", ports) for server in DEMO_SERVERS.values()]
    data = {"name": "demo", "duration": "5s", "targets": targets, "shape": {"kind": "steady", "users": 1}}
    loaded: dict[str, Any] = {t.kind: t for t in scenario_from_dict(data).targets}
    kserve = loaded[demo_server("kserve").kind]
    assert (kserve.address, kserve.metrics_url) == ("127.0.0.1:8091", "http://127.0.0.1:8090/metrics")
    with pytest.raises(ValueError, match="the demo cannot compare 'bentoml-x'"):
        demo_server("bentoml-x")


def test_a_model_not_built_yet_is_named_with_the_command_that_builds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kserve_local, "torchscript_path", lambda model: tmp_path / "missing" / "model.pt")
    with pytest.raises(ServerError, match=r"missing/model.pt is missing: build the sample models first"):
        kserve_command(tmp_path, ServerPorts(), ("tiny",))
