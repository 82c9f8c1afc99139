"""The package's dependencies point one way (docs/architecture.md, "Layers"): a module imports only
from its own concern or from concerns in lower layers, so there is no import cycle between concerns,
and no module takes part in an import circle inside its concern either (imports inside functions
count: a lazy import that closes a circle is still one; so do imports under ``if TYPE_CHECKING:``,
annotations only, since two modules that name each other's types are one role split in two). The
layers are held on the imports that run. The native engine's modules (native/src/engine/) hold the
same rule among their ``use super::`` paths.
"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "inferload"
ENGINE = Path(__file__).resolve().parents[2] / "native" / "src" / "engine"

#: lowest first; a concern may import from its own layer's other concerns only where listed in SAME_LAYER
LAYERS: list[set[str]] = [
    {"errors", "paths", "files", "_native"},  # _native: the Rust extension (native/), imported by users/engine.py
    {"scenario", "measure"},
    {"traffic"},
    {"users", "servermetrics"},
    {"results"},
    {"observe"},
    {"webui"},  # the web UI's Inference tab: imported by run/plugin.py only (test below)
    {"startchecks"},  # each target fitted to what its server serves, before any load
    {"run"},
    {"launch"},  # the command's processes: Locust as a child, the workers' locustfile
    {"tune"},
    {"local"},
    {"calibrate"},  # `inferload calibrate`: runs `inferload run` against the reference server (local/)
    {"cli", "locustfile", "inferload"},
]
LAYER_OF = {concern: index for index, layer in enumerate(LAYERS) for concern in layer}


def concern(module: str) -> str:
    parts = module.split(".")
    return "inferload" if len(parts) == 1 else parts[1]


def runtime_imports(tree: ast.Module, annotations: bool = False) -> list[str]:
    """Every `inferload...` module imported, outside `if TYPE_CHECKING:` blocks (inside them too with `annotations`)."""
    found: list[str] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if (
                not annotations
                and isinstance(node, ast.If)
                and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"
            ):
                visit(node.orelse)
                continue
            for child in ast.walk(node):
                if isinstance(child, ast.ImportFrom) and child.module and child.module.split(".")[0] == "inferload":
                    if child.module == "inferload":
                        found.extend(f"inferload.{alias.name}" for alias in child.names)
                    else:
                        found.append(child.module)
                elif isinstance(child, ast.Import):
                    found.extend(alias.name for alias in child.names if alias.name.split(".")[0] == "inferload")

    visit(tree.body)
    return found


def test_every_concern_has_a_layer() -> None:
    concerns = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if not p.name.startswith(("_", "."))}
    concerns.discard("py")
    assert concerns - {"__pycache__"} <= set(LAYER_OF), f"give these a layer: {concerns - set(LAYER_OF)}"


def test_imports_point_down_the_layers() -> None:
    wrong: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        source = concern(module)
        for imported in runtime_imports(ast.parse(path.read_text())):
            target = concern(imported)
            if target != source and LAYER_OF[target] >= LAYER_OF[source]:
                wrong.append(
                    f"{module} imports {imported} ({source} is layer {LAYER_OF[source]}, {target} is {LAYER_OF[target]})"
                )
    assert wrong == []


def test_only_the_run_plugin_imports_the_web_ui() -> None:
    importers = sorted(
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for path in PACKAGE.rglob("*.py")
        if concern(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)) != "webui"
        and any(concern(name) == "webui" for name in runtime_imports(ast.parse(path.read_text())))
    )
    assert importers == ["inferload.run.plugin"]


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")


def imported_modules(tree: ast.Module, known: set[str], annotations: bool = False) -> set[str]:
    """The package's modules a module imports (``from inferload.a import b`` imports module a.b when
    there is one; ``from inferload.a.b import name``: module a.b)."""
    found: set[str] = set()
    for name in runtime_imports(tree, annotations):
        while name not in known and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in known:
            found.add(name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "inferload":
            found.update(f"{node.module}.{alias.name}" for alias in node.names if f"{node.module}.{alias.name}" in known)
    return found


@pytest.mark.parametrize("annotations", [False, True], ids=["imports that run", "with annotations"])
def test_no_module_takes_part_in_an_import_circle(annotations: bool) -> None:
    paths = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
    graph: TopologicalSorter[str] = TopologicalSorter()
    for module, path in paths.items():
        parents = {module.rsplit(".", 1)[0]} if "." in module else set()  # a package's __init__ runs first: not a circle
        imported = imported_modules(ast.parse(path.read_text()), set(paths), annotations) - {module} - parents
        if annotations and path.name == "__init__.py":  # a package naming the public names of its own modules
            imported = {name for name in imported if not name.startswith(f"{module}.")}
        graph.add(module, *imported)
    try:
        graph.prepare()
    except CycleError as error:
        raise AssertionError(f"an import circle: {' -> '.join(error.args[1])}") from None


def engine_uses(source: str, modules: set[str]) -> set[str]:
    """The engine modules a module's own code names (``use super::x``, ``super::x::item``; its tests apart)."""
    own = source.split("#[cfg(test)]")[0]
    named = set(re.findall(r"\bsuper::(\w+)", own))
    for group in re.findall(r"\buse super::\{([^}]*)\}", own):
        named.update(re.findall(r"(?:^|,)\s*(\w+)", group))
    return named & modules


def test_no_engine_module_takes_part_in_a_use_circle() -> None:
    paths = {path.stem: path for path in sorted(ENGINE.glob("*.rs")) if path.stem != "mod"}
    assert {"call", "grpc", "http1", "stream", "outcome"} <= set(paths)
    graph: TopologicalSorter[str] = TopologicalSorter()
    for module, path in paths.items():
        graph.add(module, *(engine_uses(path.read_text(), set(paths)) - {module}))
    try:
        graph.prepare()
    except CycleError as error:
        raise AssertionError(f"a use circle in the engine: {' -> '.join(error.args[1])}") from None


def test_the_circle_rules_see_a_circle() -> None:
    """The readers above find what they look for: an annotation import, and both forms of an engine path."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from inferload.users.base import X\n")
    assert runtime_imports(tree) == [] and runtime_imports(tree, annotations=True) == ["inferload.users.base"]
    source = (
        "use super::{grpc, http1};\nuse super::outcome::Outcome;\nfn f() { super::clock::now(); }\n#[cfg(test)]\nuse super::net;"
    )
    assert engine_uses(source, {"grpc", "http1", "outcome", "clock", "net", "call"}) == {"grpc", "http1", "outcome", "clock"}


#: the pure layers: what a scenario holds, how traffic is drawn, what was measured, what is reported
LOCUST_FREE = ("scenario", "traffic", "measure", "results")


def test_the_pure_layers_import_neither_locust_nor_gevent() -> None:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = module_name(path)
        if concern(module) not in LOCUST_FREE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            found.extend(f"{module} imports {name}" for name in names if name.split(".")[0] in ("locust", "gevent"))
    assert found == []
