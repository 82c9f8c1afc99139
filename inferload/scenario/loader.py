"""Scenario files: YAML → ``Scenario``, with every problem reported as one ``Problem`` line.

``load_scenario`` never raises anything but ``ScenarioError``: a missing file, bad YAML, duplicate
keys, unknown keys, wrong types and out-of-range values all become ``Problem(file, key_path,
message)`` entries, all of them collected, with key paths in YAML terms
(``targets[0].inputs[1].dtype``) and messages that say what was expected and what was found.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from inferload.errors import Problem, ScenarioError
from inferload.scenario.kinds import TARGET_KINDS
from inferload.scenario.limits import MAX_PROBLEMS
from inferload.scenario.messages import CHECKS_ERROR, CUSTOM_ERROR, Loc, describe_value, format_key_path, scientific_text_hint
from inferload.scenario.schema import CLOSED_LOOP_SHAPES, OPEN_LOOP_SHAPES, SHAPE_KINDS, Scenario, shape_kind
from inferload.scenario.targets import OLD_SPELLINGS, TARGET_CLASSES, Slo, Target
from inferload.scenario.yaml_file import read_scenario_yaml

_DURATION_KEYS = frozenset(
    {"duration", "warmup", "window", "timeout", "over", "burst_length", "period", "first_burst_at", "start"}
)


# --- public API --------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raise ``ScenarioError`` listing every problem.

    At most ``MAX_PROBLEMS`` problems are listed; a last line counts the rest.
    """
    label = str(path)
    try:
        raw = read_scenario_yaml(Path(path), label)
    except ScenarioError as error:
        raise ScenarioError(capped(error.problems, label)) from None
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
        raise ScenarioError(capped(problems, label)) from None
    if problems:
        raise ScenarioError(problems)
    return scenario


def target_from_dict(data: Mapping[str, Any], *, file_label: str, key_path: str, base_dir: Path | None = None) -> Target:
    """Validate a mapping of target keys (as one ``targets:`` entry of a scenario is written) into a
    ``Target``, or raise ``ScenarioError`` whose key paths start at ``key_path`` (``Tiny.target``).

    npy files are only checked when ``base_dir`` is given (relative paths resolve against it)."""
    context = {"base_dir": base_dir} if base_dir is not None else {}
    try:
        return Target.model_validate(dict(data), context=context)
    except ValidationError as error:
        # translated as a scenario's first target, so that unknown keys are named against Target's keys
        problems = problems_from_validation_error(error, file_label, {"targets": [dict(data)]}, prefix=("targets", 0))
        under = [Problem(p.file, key_path + p.key_path.removeprefix("targets[0]"), p.message) for p in problems]
        raise ScenarioError(capped(under, file_label)) from None


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


# --- pydantic errors → problems ----------------------------------------------------------------


def capped(problems: list[Problem], label: str) -> list[Problem]:
    """The first ``MAX_PROBLEMS`` problems, and a last line that counts the rest."""
    if len(problems) <= MAX_PROBLEMS:
        return problems
    return [*problems[:MAX_PROBLEMS], Problem(label, "", f"... and {len(problems) - MAX_PROBLEMS:,} more problems")]


def problems_from_validation_error(error: ValidationError, label: str, raw: Mapping[Any, Any], prefix: Loc = ()) -> list[Problem]:
    """Every problem pydantic found, in its order, each once (``prefix``: where the validated part sits in ``raw``)."""
    problems: dict[Problem, None] = {}
    for item in error.errors(include_url=False):
        loc = _yaml_loc((*prefix, *item["loc"]))
        for where, message in _translate(item, loc, raw):
            problems.setdefault(Problem(label, format_key_path(where), message))
    return list(problems)


def _yaml_loc(loc: Loc) -> Loc:
    """Drop the discriminator tag pydantic puts after ``shape`` and after a target in its error locations."""
    if len(loc) > 1 and loc[0] == "shape" and loc[1] in SHAPE_KINDS:
        return (loc[0], *loc[2:])
    if len(loc) > 2 and loc[0] == "targets" and isinstance(loc[1], int) and loc[2] in TARGET_CLASSES:
        return (*loc[:2], *loc[3:])
    return loc


def _translate(item: Any, loc: Loc, raw: Mapping[Any, Any]) -> list[tuple[Loc, str]]:
    kind = item["type"]
    ctx = item.get("ctx") or {}
    value = item.get("input")
    got = f"got {describe_value(value)}"
    key = loc[-1] if loc else ""
    if kind == CHECKS_ERROR:
        return [((*loc, *path), message) for path, message in ctx["checks"]]
    if kind == CUSTOM_ERROR:
        return [(loc, item["msg"])]
    if kind == "missing":
        return [(loc, "required key is missing")]
    if kind == "extra_forbidden":
        return [(loc, _unknown_key_message(str(key), _model_at(loc[:-1], raw)))]
    if kind == "invalid_key":
        return [(loc[:-1], f"keys must be strings; got {describe_value(key)}")]
    if kind == "union_tag_invalid":
        tag = value.get("kind") if isinstance(value, Mapping) else ctx.get("tag")
        return [((*loc, "kind"), f"expected one of {', '.join(_tags_at(loc))}; got {describe_value(tag)}")]
    if kind == "union_tag_not_found":
        return [((*loc, "kind"), f"required key is missing (one of {', '.join(_tags_at(loc))})")]
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(ctx.get("expected", "")))
        return [(loc, f"expected one of {', '.join(expected)}; {got}")]
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return [(loc, scientific_text_hint(value, integer=True) or f"expected an integer; {got}")]
    if kind in ("float_type", "float_parsing"):
        return [(loc, scientific_text_hint(value) or f"expected a number; {got}")]
    if kind == "finite_number":
        return [(loc, f"expected a finite number; {got}")]
    if kind in ("string_type", "string_unicode"):
        return [(loc, f"expected a string; {got}")]
    if kind == "string_too_short":
        shortest = ctx.get("min_length", 1)
        return [
            (loc, f"expected a non-empty string; {got}" if shortest == 1 else f"must be at least {shortest} characters; {got}")
        ]
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


def _tags_at(loc: Loc) -> tuple[str, ...]:
    """The kinds a union at ``loc`` tells its members apart by: a target's, else a shape's."""
    return TARGET_KINDS if "targets" in loc else SHAPE_KINDS


def _raw_at(loc: Loc, raw: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """The mapping written at ``loc`` in the raw document (empty where there is none)."""
    found: Any = raw
    for part in loc:
        try:
            found = found[part]
        except (KeyError, IndexError, TypeError):
            return {}
    return found if isinstance(found, Mapping) else {}


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
        # a duration as written ('0s') is quoted as it is; a bare number is seconds
        given = describe_value(value) if isinstance(value, str) else f"{_number(value)}s"
        if kind == "greater_than" and limit == 0:
            return f"must be longer than 0s; got {given}"
        if kind == "greater_than_equal" and limit == 0:
            return f"must not be negative; got {given}"
    return f"{template.format(_number(limit))}; got {_number(value)}"


def _number(value: object) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return describe_value(value)


def _model_at(loc: Loc, raw: Mapping[Any, Any]) -> type[BaseModel] | tuple[type[BaseModel], ...]:
    """The model (or, for a shape of unknown kind, every shape model) at ``loc``: the scenario's
    fields followed key by key (list indices skipped)."""
    keys = [part for part in loc if isinstance(part, str)]
    if keys == ["targets"]:
        target = _raw_at(loc, raw)
        kind = target.get("kind")
        return TARGET_CLASSES[kind] if isinstance(kind, str) and kind in TARGET_CLASSES else Target
    if keys == ["shape"]:
        shapes: dict[str, type[BaseModel]] = {shape_kind(model): model for model in (*CLOSED_LOOP_SHAPES, *OPEN_LOOP_SHAPES)}
        shape = raw.get("shape")
        kind = shape.get("kind") if isinstance(shape, Mapping) else None
        return shapes[kind] if isinstance(kind, str) and kind in shapes else tuple(shapes.values())
    found: tuple[type[BaseModel], ...] = (Scenario,)
    if keys and keys[0] not in Scenario.model_fields and keys[0] in _PARTS_CHECKED_ALONE:
        found = (_PARTS_CHECKED_ALONE[keys[0]],)
        keys = keys[1:]
    for key in keys:
        inner = tuple(
            model for each in found if key in each.model_fields for model in _models_in(each.model_fields[key].annotation)
        )
        if not inner:
            break
        found = inner
    return found[0] if len(found) == 1 else found


#: what is validated apart from a scenario, under its own first key (``attach(slo=...)``: a request name's thresholds)
_PARTS_CHECKED_ALONE: dict[str, type[BaseModel]] = {"slo": Slo}


def _models_in(annotation: Any) -> tuple[type[BaseModel], ...]:
    """The pydantic models an annotation holds (``X | None``, ``tuple[X, ...]``, ``Annotated[X, ...]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return (annotation,)
    models: list[type[BaseModel]] = []
    for argument in typing.get_args(annotation):
        models.extend(model for model in _models_in(argument) if model not in models)
    return tuple(models)


def _unknown_key_message(key: str, model: type[BaseModel] | tuple[type[BaseModel], ...]) -> str:
    models = model if isinstance(model, tuple) else (model,)
    for each in models:
        hint = next(
            (OLD_SPELLINGS[base.__name__][key] for base in each.__mro__ if key in OLD_SPELLINGS.get(base.__name__, {})), None
        )
        if hint is not None:
            return f"unknown key {key!r}: {hint}"
    allowed: list[str] = []
    for each in models:
        allowed.extend(name for name in each.model_fields if name != "source_path" and name not in allowed)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?)"
    return f"unknown key {key!r}; expected one of {', '.join(allowed)}"
