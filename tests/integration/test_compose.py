"""docker-compose.yml: valid for Docker Compose (checked by the real docker-compose 1.29, which
needs no engine for `config`), and wired the way docs/observability.md says. It needs the
docker-compose program (a system tool), so it is not in the fast layer."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.system_tools import REPO, require_tool

COMPOSE = REPO / "docker-compose.yml"
SECRETS = {
    "INFLUX_TOKEN": "test-token-123",
    "INFLUX_PASSWORD": "test-password",
    "GRAFANA_ADMIN_PASSWORD": "test-admin",
    "INFERLOAD_RUN_KEY": "test-run-key-0123456789",
}


def docker_compose() -> str:
    return require_tool("docker-compose")


def compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    full_env.update(env)
    return subprocess.run(
        [docker_compose(), "-f", str(COMPOSE), *args], cwd=REPO, env=full_env, capture_output=True, text=True, timeout=60
    )


def mounts(service: dict) -> dict[str, str]:
    """target -> source of a service's volumes (docker-compose 1.29 prints the short form)."""
    found = {}
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target = volume.split(":")[:2]
        else:
            source, target = volume.get("source", ""), volume["target"]
        found[target] = source
    return found


@pytest.fixture(scope="module")
def resolved() -> dict:
    result = compose("config", env=SECRETS)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_docker_compose_config_accepts_the_file() -> None:
    result = compose("config", "-q", env=SECRETS)
    assert result.returncode == 0 and result.stderr == "", result.stderr


def test_missing_secrets_are_refused_with_their_names() -> None:
    result = compose("config", "-q", env={})
    assert result.returncode != 0 and "set INFLUX_TOKEN" in result.stderr


def test_the_stack_has_every_service(resolved: dict) -> None:
    assert set(resolved["services"]) == {
        "triton",
        "torchserve",
        "influxdb",
        "influxdb-dbrp",
        "grafana",
        "locust-master",
        "locust-worker",
        "collector",
        "bentoml",  # profile bentoml
        "kserve",  # profile kserve
    }


def test_bentoml_and_kserve_are_opt_in_profiles_on_the_same_model_files(resolved: dict) -> None:
    for name, service_file in (("bentoml", "bentoml_service.py"), ("kserve", "kserve_model.py")):
        service = resolved["services"][name]
        assert service["profiles"] == [name]
        assert Path(mounts(service)["/models"]) == REPO / "model_repository"
        source = Path(mounts(service)[f"/opt/inferload/service/{service_file}"])
        assert source == REPO / "inferload" / "local" / "servers" / service_file and source.is_file()
    binding = Path(mounts(resolved["services"]["kserve"])["/opt/inferload/service/kserve_bind.py"])
    assert binding == REPO / "inferload" / "local" / "servers" / "kserve_bind.py"  # kserve_model.py imports it
    published = [p for service in resolved["services"].values() for p in service.get("ports", [])]
    hosts = [str(p.get("published") if isinstance(p, dict) else str(p).split(":")[0]) for p in published]
    assert len(hosts) == len(set(hosts)), hosts  # no host port used twice


def test_triton_uses_the_libtorch_config_and_a_gpu(resolved: dict) -> None:
    triton = resolved["services"]["triton"]
    assert "--model-config-name=gpu_libtorch" in triton["command"]
    assert Path(mounts(triton)["/models"]) == REPO / "model_repository"
    for model in ("cnn", "tiny", "identity"):
        assert (REPO / "model_repository" / model / "configs" / "gpu_libtorch.pbtxt").exists()
    assert triton["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_influxdb_is_initialised_and_mapped_for_influxql(resolved: dict) -> None:
    env = resolved["services"]["influxdb"]["environment"]
    assert env["DOCKER_INFLUXDB_INIT_MODE"] == "setup" and env["DOCKER_INFLUXDB_INIT_BUCKET"] == "inferload"
    assert env["DOCKER_INFLUXDB_INIT_ADMIN_TOKEN"] == SECRETS["INFLUX_TOKEN"]
    assert "influx v1 dbrp create --db inferload --rp autogen" in resolved["services"]["influxdb-dbrp"]["command"][0]


def test_grafana_gets_provisioning_and_its_password_from_the_environment(resolved: dict) -> None:
    grafana = resolved["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == SECRETS["GRAFANA_ADMIN_PASSWORD"]
    targets = mounts(grafana)
    assert Path(targets["/etc/grafana/provisioning"]) == REPO / "grafana" / "provisioning"
    assert Path(targets["/var/lib/grafana/dashboards"]) == REPO / "grafana" / "dashboards"


def test_locust_workers_can_scale_and_everything_streams_to_influxdb(resolved: dict) -> None:
    services = resolved["services"]
    worker = services["locust-worker"]
    assert "container_name" not in worker and "ports" not in worker  # --scale needs both absent
    assert "--worker" in worker["command"] and "--master-host=locust-master" in worker["command"]
    assert "--master" in services["locust-master"]["command"]
    for name in ("locust-master", "collector"):
        env = services[name]["environment"]
        assert env["INFLUX_URL"] == "http://influxdb:8086" and env["INFLUX_TOKEN"] == SECRETS["INFLUX_TOKEN"]
    for name in ("locust-master", "locust-worker"):  # the master refuses unsigned worker reports
        assert services[name]["environment"]["INFERLOAD_RUN_KEY"] == SECRETS["INFERLOAD_RUN_KEY"]
    collector = services["collector"]
    assert collector["command"][:4] == ["python", "-m", "collectors", "--config"]
    assert collector["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]
