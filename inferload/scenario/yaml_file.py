"""Reading a scenario file safely: a regular file of bounded size, UTF-8, one YAML document.

``read_scenario_yaml`` returns plain Python values or raises ``ScenarioError``. It refuses what
would hang or exhaust ``inferload validate`` before reading it: anything but a regular file (a FIFO
blocks, ``/dev/zero`` never ends), files over ``MAX_FILE_BYTES``, and documents whose aliases
expand to more than ``MAX_YAML_VALUES`` values. Duplicate keys are problems, not silently dropped.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import yaml

from inferload.errors import Problem, ScenarioError
from inferload.scenario.limits import MAX_FILE_BYTES, MAX_YAML_VALUES, mib
from inferload.scenario.messages import Loc, format_key_path

_FILE_KINDS = (
    (stat.S_ISDIR, "is a directory; expected a scenario YAML file"),
    (stat.S_ISFIFO, "is a named pipe (FIFO); expected a regular scenario YAML file"),
    (stat.S_ISCHR, "is a character device; expected a regular scenario YAML file"),
    (stat.S_ISBLK, "is a block device; expected a regular scenario YAML file"),
    (stat.S_ISSOCK, "is a socket; expected a regular scenario YAML file"),
)


def read_scenario_yaml(path: Path, label: str) -> object:
    """The YAML document in ``path`` as plain Python values, or ``ScenarioError``."""
    text = _read_text(path, label)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ScenarioError([Problem(label, "", "the file is empty; expected a scenario (name, duration, targets, shape)")])
        duplicates = _duplicate_keys(node, label)
        if duplicates:
            raise ScenarioError(duplicates)
        values = _expanded_values(node, MAX_YAML_VALUES)
        if values > MAX_YAML_VALUES:
            raise ScenarioError(
                [
                    Problem(
                        label,
                        "",
                        f"the document holds more than {MAX_YAML_VALUES:,} values (counting every use of an alias);"
                        " a scenario needs far fewer",
                    )
                ]
            )
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as error:
        raise ScenarioError([Problem(label, "", _yaml_error_message(error))]) from None
    except yaml.YAMLError as error:
        raise ScenarioError([Problem(label, "", f"invalid YAML: {error}")]) from None
    except RecursionError:
        raise ScenarioError([Problem(label, "", "invalid YAML: nested too deeply")]) from None
    finally:
        loader.dispose()


def _read_text(path: Path, label: str) -> str:
    try:
        mode = path.stat().st_mode
        for is_kind, message in _FILE_KINDS:
            if is_kind(mode):
                raise ScenarioError([Problem(label, "", message)])
        if not stat.S_ISREG(mode):
            raise ScenarioError([Problem(label, "", "is not a regular file; expected a scenario YAML file")])
        # O_NONBLOCK: should the path become a FIFO after the check, opening it does not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ScenarioError([Problem(label, "", "no such file")]) from None
    except OSError as error:
        raise ScenarioError([Problem(label, "", f"cannot read the file: {error.strerror or error}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ScenarioError(
            [Problem(label, "", f"the file is larger than {mib(MAX_FILE_BYTES)}; a scenario file is a few kilobytes of YAML")]
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ScenarioError(
            [Problem(label, "", f"not UTF-8 text (byte 0x{raw[error.start]:02x} at offset {error.start})")]
        ) from None


def _yaml_error_message(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    what = error.problem or error.context or "syntax error"
    if error.problem and error.context:
        what = f"{error.problem} ({error.context})"
    if mark is None:
        return f"invalid YAML: {what}"
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {what}"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _expanded_values(root: yaml.Node, limit: int) -> int:
    """How many values the document holds once every alias is expanded (at most ``limit + 1``).

    Each node is visited once (aliases share nodes); a node that contains itself counts once.
    """
    size: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            size[key] = min(limit + 1, 1 + sum(size.get(id(child), 1) for child in _children(node)))
        elif key not in size and key not in open_nodes:
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node))
    return size[id(root)]


def _duplicate_keys(root: yaml.Node, label: str) -> list[Problem]:
    problems: list[Problem] = []
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line: dict[str, int] = {}
            for key_node, value_node in node.value:
                key = str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else None
                if key is None or key == "<<":
                    continue
                line = key_node.start_mark.line + 1
                if key in first_line:
                    problems.append(
                        Problem(
                            label, format_key_path((*loc, key)), f"duplicate key (line {line}; first at line {first_line[key]})"
                        )
                    )
                else:
                    first_line[key] = line
                stack.append((value_node, (*loc, key)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*loc, index)) for index, item in enumerate(node.value))
    return sorted(problems, key=lambda problem: problem.message)
