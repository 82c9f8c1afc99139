"""Render a kustomization in Python, for tests/unit/test_kubernetes_manifests.py (no kustomize here).

CI's machines have no kustomize binary, so the unit test renders deploy/kubernetes/*/ with this
module: exactly the part of kustomize that those kustomizations use, and nothing else.

- `resources`: YAML files (several documents each) and folders holding a kustomization.yaml
  (rendered recursively; a folder may lie outside the kustomization, as kustomize allows);
- `namespace`: set on every namespaced resource, as kustomize's namespace transformer does;
- `configMapGenerator` with `files` (`path` or `key=path`, inside the kustomization's folder, as
  kustomize's default load restrictor demands) and `literals` (`KEY=value`);
- `generatorOptions.disableNameSuffixHash: true` (required: name hashes are not implemented).

Any other key, a file outside the folder, a missing file or two resources with the same kind,
namespace and name is an error that names the kustomization file and key, so that a kustomization
using more of kustomize fails here instead of being rendered wrongly. To compare with the real
kustomize where `kubectl` is installed:

    python -m tests.support.kustomize_render deploy/kubernetes/stack   # exit 1 and a diff when they differ
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

KUSTOMIZATION = "kustomization.yaml"
SUPPORTED_KEYS = frozenset({"apiVersion", "kind", "namespace", "resources", "configMapGenerator", "generatorOptions"})
GENERATOR_KEYS = frozenset({"name", "files", "literals"})
#: kinds the namespace transformer leaves alone (the cluster-scoped ones a deployment might hold)
CLUSTER_SCOPED_KINDS = frozenset(
    {"Namespace", "PersistentVolume", "StorageClass", "RuntimeClass", "ClusterRole", "ClusterRoleBinding", "PriorityClass"}
)

Resource = dict[str, Any]


class KustomizeRenderError(Exception):
    """A kustomization this renderer cannot render faithfully; the message names file and key."""


def render(folder: Path) -> list[Resource]:
    """The resources `kubectl kustomize FOLDER` would print (as data; the order may differ)."""
    resources = _render(folder.resolve())
    seen: set[tuple[str, str, str]] = set()
    for resource in resources:
        key = resource_id(resource)
        if key in seen:
            raise KustomizeRenderError(f"{folder}: two resources {key[0]} {key[2]!r} in namespace {key[1]!r}")
        seen.add(key)
    return resources


def resource_id(resource: Resource) -> tuple[str, str, str]:
    metadata = resource.get("metadata") or {}
    return str(resource.get("kind")), str(metadata.get("namespace", "")), str(metadata.get("name"))


def _render(folder: Path) -> list[Resource]:
    path = folder / KUSTOMIZATION
    if not path.is_file():
        raise KustomizeRenderError(f"{folder}: no {KUSTOMIZATION}")
    spec = yaml.safe_load(path.read_text()) or {}
    unsupported = sorted(set(spec) - SUPPORTED_KEYS)
    if unsupported:
        raise KustomizeRenderError(f"{path}: {unsupported[0]}: not supported by tests/support/kustomize_render.py")
    resources: list[Resource] = []
    for index, entry in enumerate(spec.get("resources") or []):
        target = (folder / entry).resolve()
        if target.is_dir():
            resources += _render(target)
        elif target.is_file():
            resources += [doc for doc in yaml.safe_load_all(target.read_text()) if doc]
        else:
            raise KustomizeRenderError(f"{path}: resources[{index}]: {entry} does not exist")
    generators = spec.get("configMapGenerator") or []
    if generators and (spec.get("generatorOptions") or {}).get("disableNameSuffixHash") is not True:
        raise KustomizeRenderError(f"{path}: generatorOptions.disableNameSuffixHash: must be true (hashes are not rendered)")
    resources += [_config_map(path, index, generator) for index, generator in enumerate(generators)]
    namespace = spec.get("namespace")
    if namespace:
        for resource in resources:
            if resource.get("kind") not in CLUSTER_SCOPED_KINDS:
                resource.setdefault("metadata", {})["namespace"] = namespace
    return resources


def _config_map(path: Path, index: int, generator: dict[str, Any]) -> Resource:
    where = f"{path}: configMapGenerator[{index}]"
    unsupported = sorted(set(generator) - GENERATOR_KEYS)
    if unsupported:
        raise KustomizeRenderError(f"{where}.{unsupported[0]}: not supported by tests/support/kustomize_render.py")
    data: dict[str, str] = {}
    for entry in generator.get("files") or []:
        key, _, name = entry.rpartition("=")
        file = (path.parent / name).resolve()
        if not file.is_relative_to(path.parent):
            raise KustomizeRenderError(f"{where}.files: {name} is outside {path.parent} (kustomize refuses it)")
        if not file.is_file():
            raise KustomizeRenderError(f"{where}.files: {name} does not exist")
        data[key or file.name] = file.read_text()
    for literal in generator.get("literals") or []:
        key, sep, value = literal.partition("=")
        if not sep:
            raise KustomizeRenderError(f"{where}.literals: expected KEY=value; got {literal!r}")
        data[key] = value
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data}


def _by_id(resources: list[Resource]) -> dict[str, Resource]:
    return {"/".join(resource_id(r)): r for r in resources}


def main(argv: list[str]) -> int:
    """Compare `render(folder)` with `kubectl kustomize folder` for each folder given."""
    failed = False
    for folder in map(Path, argv):
        differ = False
        real = subprocess.run(["kubectl", "kustomize", str(folder)], capture_output=True, text=True, check=True).stdout
        ours, theirs = _by_id(render(folder)), _by_id([d for d in yaml.safe_load_all(real) if d])
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key) != theirs.get(key):
                differ = True
                print(
                    f"{folder}: {key} differs:\n  ours: {json.dumps(ours.get(key))[:300]}\n  kustomize: {json.dumps(theirs.get(key))[:300]}"
                )
        print(f"{folder}: {len(ours)} resources, {'different' if differ else 'the same as kubectl kustomize'}")
        failed = failed or differ
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
