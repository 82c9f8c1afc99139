"""Issue 36's goals for the seam between Python and the engine, counted from the source tree.

``.venv/bin/python -m tests.support.seam_goals`` prints each count beside its goal;
``tests/unit/test_seam_goals.py`` holds every count at or below the ceiling it has reached, so a
count can only fall. What each count looks for (the rules are textual, on purpose: anyone can repeat
them with grep or ast):

- ``kind literals``: a target kind written as a string literal (``"triton-grpc"``, comments and
  docstrings not counted) in ``inferload/`` outside ``scenario/kinds.py``, where the kinds and their
  rules are defined.
- ``class variables written late``: an assignment (or ``setattr``) to an attribute of a class object
  (``cls``, ``user_class``, ``type(self)``) in ``inferload/``, outside what runs while the class is
  made (``__init_subclass__`` and the functions only it calls).
- ``transport branches``: a test of which transport a user has (``engine``, ``slot`` or
  ``native_slot`` against None) in ``inferload/`` outside the transports (``users/engine.py``).
- ``engine lines``: the lines of ``native/src/engine/*.rs`` (the goal: 2,000 fewer than the 7,770
  the issue counted), and ``pyjson.rs`` present or not (its goal: gone).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from inferload.scenario.kinds import TARGET_KINDS

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "inferload"
ENGINE = REPO / "native" / "src" / "engine"
#: where the kinds are defined: literals there are the definitions
KIND_DEFINITIONS = PACKAGE / "scenario" / "kinds.py"
#: the transports: branching on the transport is their business
TRANSPORTS = (PACKAGE / "users" / "engine.py",)
#: functions that run while a user class is made (``__init_subclass__`` and what only it calls)
AT_CLASS_CREATION = frozenset({"__init_subclass__", "_set_target", "_drop_inherited_default_task"})
#: names that hold a class object in the package's code
CLASS_NAMES = frozenset({"cls", "user_class", "klass"})
_TRANSPORT_TEST = re.compile(r"\b(?:engine|_slot|slot|native_slot)\s+is\s+(?:not\s+)?None\b")


@dataclass(frozen=True)
class Count:
    name: str
    value: int
    goal: str
    where: tuple[str, ...]


def _python_files(root: Path = PACKAGE) -> list[Path]:
    return sorted(path for path in root.rglob("*.py") if "__pycache__" not in path.parts)


def _code_strings(source: str) -> list[tuple[int, str]]:
    """(line, value) of every string literal that is not a docstring or a comment."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def kind_literals(files: list[Path] | None = None) -> Count:
    kinds = set(TARGET_KINDS)
    found = [
        f"{path.relative_to(REPO)}:{line}: {value}"
        for path in files or _python_files()
        if path != KIND_DEFINITIONS
        for line, value in _code_strings(path.read_text())
        if value in kinds
    ]
    return Count("kind literals outside scenario/kinds.py", len(found), "<= 15", tuple(found))


def _is_class_object(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id in CLASS_NAMES
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" and len(node.args) == 1


def late_class_writes(files: list[Path] | None = None) -> Count:
    found: list[str] = []
    for path in files or _python_files():
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) or function.name in AT_CLASS_CREATION:
                continue
            for node in ast.walk(function):
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = [t for target in node.targets for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
                elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
                    targets = [node.target]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
                    if node.args and _is_class_object(node.args[0]):
                        found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id}(...)")
                    continue
                for target in targets:
                    if isinstance(target, ast.Attribute) and _is_class_object(target.value):
                        found.append(f"{path.relative_to(REPO)}:{target.lineno}: .{target.attr} = ...")
    # an assignment nested in two functions is seen from both: count each place once
    unique = tuple(dict.fromkeys(found))
    return Count("class variables written after a user class is made", len(unique), "0", unique)


def transport_branches(files: list[Path] | None = None) -> Count:
    found = []
    for path in files or _python_files():
        if path in TRANSPORTS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _TRANSPORT_TEST.search(code):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return Count("transport branches outside the transports", len(found), "0", tuple(found))


def engine_lines() -> Count:
    files = sorted(ENGINE.glob("*.rs"))
    lines = sum(len(path.read_text().splitlines()) for path in files)
    return Count("native/src/engine/*.rs lines", lines, "<= 5,770 (7,770 - 2,000)", tuple(p.name for p in files))


def pyjson_present() -> Count:
    present = (ENGINE / "pyjson.rs").exists()
    return Count("pyjson.rs (the engine's imitation of Python's JSON errors)", int(present), "0 (gone)", ())


def counts() -> list[Count]:
    return [kind_literals(), late_class_writes(), transport_branches(), engine_lines(), pyjson_present()]


def main() -> None:
    for count in counts():
        print(f"{count.value:>7,}  {count.name} (goal {count.goal})")
        for place in count.where if not count.name.endswith(".rs lines") else ():
            print(f"           {place}")


if __name__ == "__main__":
    main()
