"""deploy/kubernetes/: each kustomization rendered (tests/support/kustomize_render.py), every resource
validated strictly against a pinned Kubernetes version (kubernetes-validate), and checked against
the compose stack, inferload's real command-line parsers, the scenario loader and each other."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.support.kustomize_render import KustomizeRenderError, Resource, render
from tests.support.system_tools import REPO

#: the Kubernetes version the manifests are validated against (the oldest one they claim to support)
KUBERNETES_VERSION = "1.30.0"
DEPLOY = REPO / "deploy" / "kubernetes"
FOLDERS = ("stack", "headless", "distributed", "web-ui", "gpu-collector", "results-reader")
POD_KINDS = {
    "Deployment": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
}
#: the flags of the Locust command lines, checked with Locust's own parser and inferload's options
LOCUST_PARSE = """
import contextlib, io, json, sys
from locust.argument_parser import get_parser
from inferload.run.options import add_arguments
problems = {}
for args in json.load(sys.stdin):
    parser = get_parser(default_config_files=[])
    add_arguments(parser)
    parser.allow_abbrev = False  # a flag must be spelt out: --headles is not --headless
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser.parse_args(args)
    except SystemExit:
        problems[" ".join(args)] = err.getvalue().strip().splitlines()[-1:]
print(json.dumps(problems))
"""


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[Resource]]:
    return {folder: render(DEPLOY / folder) for folder in FOLDERS}


@pytest.fixture(scope="module")
def everything(rendered: dict[str, list[Resource]]) -> list[Resource]:
    return [resource for resources in rendered.values() for resource in resources]


def pod_specs(resources: list[Resource]) -> Iterator[tuple[Resource, dict[str, Any]]]:
    for resource in resources:
        if resource["kind"] == "Pod":
            yield resource, resource["spec"]
        elif resource["kind"] in POD_KINDS:
            spec: Any = resource
            for key in POD_KINDS[resource["kind"]]:
                spec = spec[key]
            yield resource, spec


def containers(resources: list[Resource]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(resource/container name, pod spec, container) for every container and init container."""
    for resource, spec in pod_specs(resources):
        for container in spec.get("initContainers", []) + spec["containers"]:
            yield f"{resource['kind']}/{resource['metadata']['name']}/{container['name']}", spec, container


def command_line(container: dict[str, Any]) -> list[str]:
    return [str(arg) for arg in container.get("command", []) + container.get("args", [])]


def by_kind(resources: list[Resource], kind: str) -> dict[str, Resource]:
    return {r["metadata"]["name"]: r for r in resources if r["kind"] == kind}


def exact(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """`parser` (and its subcommands) refusing abbreviated flags: a manifest spells each flag out."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                exact(subparser)
    return parser


def inferload_args(container: dict[str, Any]) -> argparse.Namespace:
    """The container's `inferload ...` command line parsed by inferload's own parser (exit 2 on a bad flag)."""
    from inferload.cli import build_parser

    argv = command_line(container)
    assert argv[0] == "inferload", argv
    return exact(build_parser()).parse_args(argv[1:])


def compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def compose_images() -> set[str]:
    """Every image of docker-compose.yml, `${VAR:-default}` read as its default."""
    services = compose()["services"].values()
    return {re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", s["image"]) for s in services}


def test_every_kustomization_folder_is_checked() -> None:
    assert {p.parent.name for p in DEPLOY.glob("*/kustomization.yaml")} == set(FOLDERS)


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_resource_validates_strictly(folder: str, rendered: dict[str, list[Resource]]) -> None:
    assert rendered[folder]
    for resource in rendered[folder]:
        # SchemaNotFoundError (a kind or apiVersion Kubernetes does not know) fails the test too
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_strict_validation_catches_a_misspelt_field(everything: list[Resource]) -> None:
    job = json.loads(json.dumps(by_kind(everything, "Job")["inferload-run"]))
    job["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)


def test_images_are_the_compose_stacks(everything: list[Resource]) -> None:
    used = {container["image"] for _, _, container in containers(everything)}
    assert used == compose_images()


def test_settings_are_the_compose_stacks(everything: list[Resource]) -> None:
    settings = by_kind(everything, "ConfigMap")["inferload-settings"]["data"]
    environment = compose()["x-inferload"]["environment"]
    for key in ("INFLUX_URL", "INFLUX_API", "INFLUX_ORG", "INFLUX_DB"):
        assert settings[key] == environment[key], key


def test_inferload_and_collector_commands_parse_with_the_real_parsers(everything: list[Resource]) -> None:
    from inferload.observe.collector import build_parser as collector_parser

    checked = []
    for name, _, container in containers(everything):
        argv = command_line(container)
        if argv[:1] == ["inferload"]:
            checked.append((name, inferload_args(container).command))  # SystemExit (a failure) on a bad flag
        elif argv[:3] == ["python", "-m", "collectors"]:
            exact(collector_parser()).parse_args(argv[3:])
            checked.append((name, "collector"))
    assert ("Job/inferload-run/inferload", "run") in checked
    assert ("Job/inferload-run-master/inferload", "run") in checked
    assert ("Job/inferload-run-workers/worker", "worker") in checked
    assert sum(kind == "collector" for _, kind in checked) == 3  # two sidecars and the GPU DaemonSet


def test_the_headless_jobs_are_headless_runs_that_keep_their_results(everything: list[Resource]) -> None:
    for name in ("inferload-run", "inferload-run-master"):
        job = by_kind(everything, "Job")[name]
        spec = job["spec"]["template"]["spec"]
        args = inferload_args(spec["containers"][0])
        assert args.command == "run" and args.headless, name
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
        results_mount = next(path for path in mounts if str(args.out).startswith(path + "/"))
        assert claims[mounts[results_mount]] == "inferload-results", name
        # the pod's exit code is inferload's: one try, never restarted
        assert job["spec"]["backoffLimit"] == 0 and spec["restartPolicy"] == "Never", name


def test_locust_commands_parse_with_locusts_parser_and_inferloads_options(everything: list[Resource]) -> None:
    commands = [command_line(c)[1:] for _, _, c in containers(everything) if command_line(c)[:1] == ["locust"]]
    assert len(commands) == 2  # the web UI's master and workers
    bad = commands[0] + ["--no-such-flag"]
    result = subprocess.run(
        [sys.executable, "-c", LOCUST_PARSE], input=json.dumps([*commands, bad]), capture_output=True, text=True, check=True
    )
    problems = json.loads(result.stdout)
    assert list(problems) == [" ".join(bad)]  # the known-bad line proves the check can fail


def test_variable_references_name_the_containers_environment(everything: list[Resource]) -> None:
    config_maps = by_kind(everything, "ConfigMap")
    for name, _, container in containers(everything):
        defined = {e["name"] for e in container.get("env", [])}
        defined |= {key for ref in container.get("envFrom", []) for key in config_maps[ref["configMapRef"]["name"]]["data"]}
        for arg in command_line(container):
            for variable in re.findall(r"(?<!\$)\$\((\w+)\)", arg):
                assert variable in defined, f"{name}: $({variable}) is not in its environment"


def test_files_on_the_command_lines_exist(everything: list[Resource]) -> None:
    config_maps = by_kind(everything, "ConfigMap")
    copied = set(re.findall(r"^COPY (\S+) \./", (REPO / "collectors" / "Dockerfile").read_text(), re.MULTILINE))
    for name, spec, container in containers(everything):
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts", [])}
        for arg in command_line(container):
            path = arg.partition("=")[2] if arg.startswith("--") else arg
            if path.startswith("/opt/inferload/"):  # the image's WORKDIR: what the Dockerfile copies there
                relative = path.removeprefix("/opt/inferload/").rstrip(".").rstrip("/")
                assert relative.split("/")[0] in copied and (REPO / relative).exists(), f"{name}: {path}"
            elif path.startswith("/etc/inferload/"):  # a file of a mounted ConfigMap
                folder, _, key = path.rpartition("/")
                assert "configMap" in mounts[folder], f"{name}: {folder} is not a ConfigMap"
                assert key in config_maps[mounts[folder]["configMap"]["name"]]["data"], f"{name}: {path}"


def documented_secret_keys() -> set[str]:
    """The keys of the Secret `inferload` as docs/kubernetes.md creates it."""
    text = (REPO / "docs" / "kubernetes.md").read_text()
    command = re.search(r"kubectl create secret generic inferload .*?(?:\n\n|```)", text, re.DOTALL)
    assert command, "docs/kubernetes.md: no `kubectl create secret generic inferload` command"
    return set(re.findall(r"--from-literal=([\w-]+)=", command.group(0)))


def test_every_config_map_claim_and_secret_referenced_exists(everything: list[Resource]) -> None:
    config_maps, claims = by_kind(everything, "ConfigMap"), by_kind(everything, "PersistentVolumeClaim")
    assert not by_kind(everything, "Secret")  # secrets are created with kubectl, never kept here
    secret_keys = documented_secret_keys()
    for resource, spec in pod_specs(everything):
        where = f"{resource['kind']}/{resource['metadata']['name']}"
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                assert volume["configMap"]["name"] in config_maps, where
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims, where
        for container in spec.get("initContainers", []) + spec["containers"]:
            for ref in container.get("envFrom", []):
                assert ref["configMapRef"]["name"] in config_maps, where
            for env in container.get("env", []):
                secret = env.get("valueFrom", {}).get("secretKeyRef")
                if secret:
                    assert (secret["name"], secret["key"]) in {("inferload", k) for k in secret_keys}, f"{where}: {secret}"
                if re.search(r"RUN_KEY|TOKEN|PASSWORD", env["name"]):
                    assert secret, f"{where}: {env['name']} must come from the Secret, never a literal"


def test_services_select_pods_and_ports_that_exist(everything: list[Resource]) -> None:
    pods = [
        (spec, resource["spec"]["template"]["metadata"]["labels"])
        for resource, spec in pod_specs(everything)
        if "template" in resource["spec"]
    ]
    for service in by_kind(everything, "Service").values():
        selector = service["spec"]["selector"]
        selected = [spec for spec, labels in pods if selector.items() <= labels.items()]
        assert selected, f"Service {service['metadata']['name']} selects no pod"
        port_names = {p["name"] for spec in selected for c in spec["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"Service {service['metadata']['name']}: {port}"


def test_nothing_is_exposed_outside_the_cluster(everything: list[Resource]) -> None:
    assert {r["kind"] for r in everything}.isdisjoint({"Ingress", "Gateway", "HTTPRoute"})
    for service in by_kind(everything, "Service").values():
        assert service["spec"].get("type", "ClusterIP") == "ClusterIP", service["metadata"]["name"]
    for name, spec, container in containers(everything):
        assert not spec.get("hostNetwork") and not any("hostPort" in p for p in container.get("ports", [])), name


def test_pods_run_as_non_root_with_resources_and_probes(everything: list[Resource]) -> None:
    for name, spec, container in containers(everything):
        pod, own = spec["securityContext"], container["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert own.get("runAsUser", pod.get("runAsUser", 0)) > 0, name
        assert own["allowPrivilegeEscalation"] is False and own["capabilities"] == {"drop": ["ALL"]}, name
        assert {"cpu", "memory"} <= set(container["resources"]["requests"]), name
        assert "memory" in container["resources"]["limits"], name
        if container.get("ports") and not name.startswith("Job/"):
            assert "readinessProbe" in container and "livenessProbe" in container, name


def test_the_scenario_and_collector_configs_load_and_name_the_stacks_services(everything: list[Resource]) -> None:
    from inferload.observe.collector import load_collector_config
    from inferload.scenario.loader import load_scenario

    scenario = load_scenario(DEPLOY / "stack" / "scenario.yaml")
    services = by_kind(everything, "Service")
    for target in scenario.targets:
        host, port = target.address.removeprefix("http://").rsplit(":", 1)
        assert int(port) in {p["port"] for p in services[host]["spec"]["ports"]}, target.name
    names = {target.name for target in scenario.targets}
    configs = [*(DEPLOY / "stack").glob("collector-*.yaml"), DEPLOY / "gpu-collector" / "collector-gpu.yaml"]
    sources = [source for path in configs for source in load_collector_config(path).sources]
    assert {s.target for s in sources if s.kind != "nvml"} == names
    assert [s.kind for s in sources].count("nvml") == 1


def test_grafana_is_provisioned_from_the_compose_stacks_own_files(everything: list[Resource]) -> None:
    config_maps = by_kind(everything, "ConfigMap")
    mounted = {
        "/etc/grafana/provisioning/datasources": REPO / "grafana" / "provisioning" / "datasources",
        "/etc/grafana/provisioning/dashboards": REPO / "grafana" / "provisioning" / "dashboards",
        "/var/lib/grafana/dashboards": REPO / "grafana" / "dashboards",
    }
    spec = by_kind(everything, "Deployment")["grafana"]["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in spec["containers"][0]["volumeMounts"]}
    for path, folder in mounted.items():
        data = config_maps[mounts[path]["configMap"]["name"]]["data"]
        assert data == {f.name: f.read_text() for f in folder.iterdir() if f.is_file()}, path  # every file, as it is


def test_the_distributed_master_waits_for_as_many_workers_as_the_workers_job_starts(everything: list[Resource]) -> None:
    jobs = by_kind(everything, "Job")
    master = inferload_args(jobs["inferload-run-master"]["spec"]["template"]["spec"]["containers"][0])
    worker = inferload_args(jobs["inferload-run-workers"]["spec"]["template"]["spec"]["containers"][0])
    workers = jobs["inferload-run-workers"]["spec"]
    assert master.remote_workers == workers["parallelism"] == workers["completions"] > 0
    assert worker.master_host in by_kind(everything, "Service") and worker.master_port == master.master_port


def test_the_docs_name_only_folders_that_exist() -> None:
    text = (REPO / "docs" / "kubernetes.md").read_text()
    named = set(re.findall(r"deploy/kubernetes/([\w-]+)", text))
    assert named == set(FOLDERS)  # each is walked through, and none is made up


def test_the_renderer_refuses_what_it_cannot_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\npatches: [{path: p.yaml}]\n")
    with pytest.raises(KustomizeRenderError, match="patches: not supported"):
        render(tmp_path)
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "kustomization.yaml").write_text(
        "generatorOptions: {disableNameSuffixHash: true}\nconfigMapGenerator: [{name: x, files: [../outside.txt]}]\n"
    )
    (tmp_path / "outside.txt").write_text("x")
    with pytest.raises(KustomizeRenderError, match="outside"):
        render(inner)
