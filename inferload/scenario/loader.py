"""Scenario files: YAML → ``Scenario``, with every problem reported as one ``Problem`` line.

``load_scenario`` never raises anything but ``ScenarioError``: a missing file, bad YAML, duplicate
keys, unknown keys, wrong types and out-of-range values all become ``Problem(file, key_path,
message)`` entries, all of them collected, with key paths in YAML terms
(``targets[0].inputs[1].dtype``) and messages that say what was expected and what was found.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from inferload.errors import Problem, ScenarioError
from inferload.scenario.model import (
    CHECKS_ERROR,
    SHAPE_KINDS,
    BurstShape,
    ConstantRateShape,
    DataSpec,
    InputSpec,
    PoissonShape,
    RampingRateShape,
    RampShape,
    RateBurstsShape,
    Scenario,
    Slo,
    Stage,
    StagesShape,
    SteadyShape,
    Target,
    describe_value,
)

Loc = tuple[str | int, ...]

_DURATION_KEYS = frozenset({"duration", "warmup", "window", "timeout", "over", "burst_length", "period", "first_burst_at"})


# --- public API --------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raise ``ScenarioError`` listing every problem."""
    label = str(path)
    raw = read_scenario_yaml(Path(path), label)
    return scenario_from_dict(raw, source_path=Path(path), file_label=label)


def scenario_from_dict(data: object, *, source_path: Path | None = None, file_label: str | None = None) -> Scenario:
    """Validate a plain dict (as YAML would give) into a ``Scenario``, or raise ``ScenarioError``.

    Relative npy paths resolve against ``source_path``'s folder, and npy files are only checked
    when ``source_path`` is given.
    """
    label = file_label or (str(source_path) if source_path is not None else "<scenario>")
    if not isinstance(data, Mapping):
        raise ScenarioError(
            [Problem(label, "", f"expected a mapping of scenario keys at the top level; got {describe_value(data)}")]
        )
    problems: list[Problem] = []
    fields = dict(data)
    if "source_path" in fields:
        problems.append(Problem(label, "source_path", _unknown_key_message("source_path", Scenario)))
        del fields["source_path"]
    context = {"base_dir": source_path.parent} if source_path is not None else {}
    try:
        scenario = Scenario.model_validate({**fields, "source_path": source_path}, context=context)
    except ValidationError as error:
        problems.extend(problems_from_validation_error(error, label, fields))
        raise ScenarioError(problems) from None
    if problems:
        raise ScenarioError(problems)
    return scenario


def scenario_to_dict(scenario: Scenario) -> dict[str, Any]:
    """A plain dict that ``scenario_from_dict`` turns back into an equal scenario.

    Durations are float seconds; relative npy paths are made absolute when the scenario has a
    ``source_path``, so the dict stands on its own (for workers, for a generated file).
    """
    data = scenario.model_dump(mode="json", exclude_none=True)
    if scenario.source_path is not None:
        for target in data["targets"]:
            for spec in target["inputs"]:
                path = spec["data"].get("path")
                if path is not None and not Path(path).is_absolute():
                    spec["data"]["path"] = str((scenario.base_dir / path).resolve())
    return data


def scenario_to_yaml(scenario: Scenario) -> str:
    """The scenario as YAML text (keys in schema order)."""
    return yaml.safe_dump(scenario_to_dict(scenario), sort_keys=False, allow_unicode=True)


# --- reading the file --------------------------------------------------------------------------


def read_scenario_yaml(path: Path, label: str) -> object:
    """The YAML document in ``path`` as plain Python values, or ``ScenarioError``."""
    text = _read_text(path, label)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        if node is None:
            raise ScenarioError([Problem(label, "", "the file is empty; expected a scenario (name, duration, targets, shape)")])
        duplicates = _duplicate_keys(node, label)
        if duplicates:
            raise ScenarioError(duplicates)
        return yaml.load(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as error:
        raise ScenarioError([Problem(label, "", _yaml_error_message(error))]) from None
    except yaml.YAMLError as error:
        raise ScenarioError([Problem(label, "", f"invalid YAML: {error}")]) from None
    except RecursionError:
        raise ScenarioError([Problem(label, "", "invalid YAML: nested too deeply")]) from None


def _read_text(path: Path, label: str) -> str:
    try:
        if path.is_dir():
            raise ScenarioError([Problem(label, "", "is a directory; expected a scenario YAML file")])
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError([Problem(label, "", "no such file")]) from None
    except OSError as error:
        raise ScenarioError([Problem(label, "", f"cannot read the file: {error.strerror or error}")]) from None
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


# --- pydantic errors → problems ----------------------------------------------------------------


def format_key_path(loc: Loc) -> str:
    """``('targets', 0, 'inputs', 1, 'dtype')`` → ``targets[0].inputs[1].dtype``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def problems_from_validation_error(error: ValidationError, label: str, raw: Mapping[Any, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for item in error.errors(include_url=False):
        loc = _yaml_loc(tuple(item["loc"]))
        for where, message in _translate(item, loc, raw):
            problem = Problem(label, format_key_path(where), message)
            if problem not in problems:
                problems.append(problem)
    return problems


def _yaml_loc(loc: Loc) -> Loc:
    """Drop the discriminator tag pydantic puts after ``shape`` in its error locations."""
    if len(loc) > 1 and loc[0] == "shape" and loc[1] in SHAPE_KINDS:
        return (loc[0], *loc[2:])
    return loc


def _translate(item: Any, loc: Loc, raw: Mapping[Any, Any]) -> list[tuple[Loc, str]]:
    kind = item["type"]
    ctx = item.get("ctx") or {}
    value = item.get("input")
    got = f"got {describe_value(value)}"
    key = loc[-1] if loc else ""
    if kind == CHECKS_ERROR:
        return [((*loc, *path), message) for path, message in ctx["checks"]]
    if kind == "inferload":
        return [(loc, item["msg"])]
    if kind == "missing":
        return [(loc, "required key is missing")]
    if kind == "extra_forbidden":
        return [(loc, _unknown_key_message(str(key), _model_at(loc[:-1], raw)))]
    if kind == "invalid_key":
        return [(loc[:-1], f"keys must be strings; got {describe_value(key)}")]
    if kind == "union_tag_invalid":
        tag = value.get("kind") if isinstance(value, Mapping) else ctx.get("tag")
        return [((*loc, "kind"), f"expected one of {', '.join(SHAPE_KINDS)}; got {describe_value(tag)}")]
    if kind == "union_tag_not_found":
        return [((*loc, "kind"), f"required key is missing (one of {', '.join(SHAPE_KINDS)})")]
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return [(loc, f"expected one of {', '.join(expected)}; {got}")]
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return [(loc, f"expected an integer; {got}")]
    if kind in ("float_type", "float_parsing"):
        return [(loc, f"expected a number; {got}")]
    if kind == "finite_number":
        return [(loc, f"expected a finite number; {got}")]
    if kind in ("string_type", "string_unicode"):
        return [(loc, f"expected a string; {got}")]
    if kind in ("tuple_type", "list_type", "iterable_type"):
        if key == "shape":
            return [(loc, f"expected a list of positive integers like [3, 32, 32]; {got}")]
        return [(loc, f"expected a list; {got}")]
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return [(loc, f"expected a mapping; {got}")]
    if kind == "too_short":
        if isinstance(value, (list, tuple)) and len(value) >= ctx.get("min_length", 1):
            return []  # pydantic counts only the items that validated; those have their own problems
        return [(loc, "must not be empty")]
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return [(loc, _range_message(kind, ctx, value, str(key) in _DURATION_KEYS))]
    if kind == "recursion_loop":
        return [(loc, "the value refers to itself (a recursive YAML alias)")]
    message = str(item["msg"]).replace("Input should be", "expected")
    return [(loc, f"{message}; {got}")]


def _range_message(kind: str, ctx: Mapping[str, Any], value: object, is_duration: bool) -> str:
    words = {
        "greater_than": ("gt", "must be greater than {}"),
        "greater_than_equal": ("ge", "must be at least {}"),
        "less_than": ("lt", "must be less than {}"),
        "less_than_equal": ("le", "must be at most {}"),
    }
    ctx_key, template = words[kind]
    limit = ctx.get(ctx_key)
    if is_duration:
        if kind == "greater_than" and limit == 0:
            return f"must be longer than 0s; got {_number(value)}s"
        if kind == "greater_than_equal" and limit == 0:
            return f"must not be negative; got {_number(value)}s"
    return f"{template.format(_number(limit))}; got {_number(value)}"


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return describe_value(value)


def _model_at(loc: Loc, raw: Mapping[Any, Any]) -> type[BaseModel] | tuple[type[BaseModel], ...]:
    """The model (or, for a shape of unknown kind, every shape model) at ``loc``."""
    by_key: dict[str, type[BaseModel]] = {
        "targets": Target,
        "inputs": InputSpec,
        "data": DataSpec,
        "slo": Slo,
        "stages": Stage,
    }
    keys = [part for part in loc if isinstance(part, str)]
    if not keys:
        return Scenario
    if keys[-1] == "shape":
        shapes = {
            "steady": SteadyShape,
            "ramp": RampShape,
            "burst": BurstShape,
            "stages": StagesShape,
            "constant-rate": ConstantRateShape,
            "poisson": PoissonShape,
            "ramping-rate": RampingRateShape,
            "rate-bursts": RateBurstsShape,
        }
        shape = raw.get("shape")
        kind = shape.get("kind") if isinstance(shape, Mapping) else None
        return shapes[kind] if isinstance(kind, str) and kind in shapes else tuple(shapes.values())
    return by_key.get(keys[-1], Scenario)


def _unknown_key_message(key: str, model: type[BaseModel] | tuple[type[BaseModel], ...]) -> str:
    models = model if isinstance(model, tuple) else (model,)
    allowed: list[str] = []
    for each in models:
        allowed.extend(name for name in each.model_fields if name != "source_path" and name not in allowed)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    return f"unknown key {key!r}; expected one of {', '.join(allowed)}"
