"""The one writer and the one reader of summary.json.

`write_summary` turns a `RunSummary` into the file (2-space indented JSON and a newline, keys in
the model's order); `read_summary` turns a file back into a `RunSummary`, or raises
`ResultsError` naming the file and the one thing wrong with it, as ``key.path: what was
expected; what it got``. Written, read and written again, a summary is the same bytes.

Which problem is named when there are several: first the envelope (a JSON object with a
``targets`` object), then a value of the wrong type, then a missing key.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from inferload.errors import InferloadError
from inferload.files import write_atomically
from inferload.results.schema import Count, Number, RunSummary

SUMMARY_NAME = "summary.json"


class ResultsError(InferloadError):
    """A results file (summary.json) is missing or cannot be read."""


# -- writing ---------------------------------------------------------------------------------
def summary_json(summary: RunSummary) -> str:
    """The file's text: what `write_summary` writes."""
    return json.dumps(summary.model_dump(mode="python"), indent=2) + "\n"


def write_summary(results_dir: Path, summary: RunSummary) -> Path:
    """Write `results_dir`/summary.json whole or not at all (the folder is made if needed); its path."""
    return write_atomically(results_dir / SUMMARY_NAME, summary_json(summary))


# -- reading ---------------------------------------------------------------------------------
def summary_file(path: Path) -> Path:
    """A results folder or a summary.json path -> the summary.json path (ResultsError if absent)."""
    if path.is_dir():
        candidate = path / SUMMARY_NAME
        if not candidate.is_file():
            raise ResultsError(f"{path}: no {SUMMARY_NAME} in this folder (is it a results folder?)")
        return candidate
    if not path.exists():
        raise ResultsError(f"{path}: no such file or folder")
    return path


def read_summary(path: Path) -> RunSummary:
    """Load and check a summary.json (or the one in a results folder)."""
    file = summary_file(Path(path))
    try:
        data: Any = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{file}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{file}: cannot be read: {exc}") from exc
    return summary_from_data(data, str(file))


def summary_from_data(data: Any, source: str) -> RunSummary:
    """A loaded summary.json as a `RunSummary`; ResultsError('source: problem') when it is not one."""
    problem = envelope_problem(data)
    if problem is None:
        try:
            return RunSummary.model_validate(data)
        except ValidationError as exc:
            problem = first_problem(exc.errors())
    raise ResultsError(f"{source}: {problem}")


def envelope_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"expected a JSON object with a 'targets' key; got {_got(data)}"
    if not isinstance(data.get("targets"), dict):
        return f"targets: expected an object of target name -> figures; got {_got(data.get('targets'))}"
    return None


def first_problem(errors: list[ErrorDetails]) -> str:
    """The problem to name: a wrong value before a missing key, each in the file's order."""
    error = next((e for e in errors if e["type"] != "missing"), errors[0])
    path = key_path(error["loc"])
    annotation = annotation_at(error["loc"])
    expected = "a whole number" if error["type"] == "count" and isinstance(error["input"], float) else describe(annotation)
    if error["type"] == "missing":
        return f"{path}: missing; expected {expected}"
    return f"{path}: expected {expected}; got {_got(error['input'])}"


def key_path(loc: tuple[int | str, ...]) -> str:
    """('slo', 'checks', 0, 'value') -> 'slo.checks[0].value'."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _got(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


def annotation_at(loc: tuple[int | str, ...]) -> Any:
    """The declared type of the value at `loc` in a `RunSummary` (None when it cannot be told)."""
    current: Any = RunSummary
    for part in loc:
        current = _without_none(current)[0]
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.rebuild_annotation()
        elif get_origin(current) in (dict, list):
            current = get_args(current)[-1]
        else:
            return None
    return current


def _without_none(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether None was allowed)."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) < len(get_args(annotation)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007
    return annotation, False


def describe(annotation: Any) -> str:
    """What a value of this type looks like in JSON, for messages."""
    inner, nullable = _without_none(annotation)
    return _describe(inner) + (" or null" if nullable else "")


def _describe(annotation: Any) -> str:
    if annotation in (Number, Count, int, float):
        return "a number"
    if annotation is str:
        return "a string"
    if annotation is bool:
        return "true or false"
    if get_origin(annotation) is Annotated:
        return _describe(get_args(annotation)[0])
    if get_origin(annotation) is list:
        (item,) = get_args(annotation)
        if isinstance(item, type) and issubclass(item, BaseModel):
            required = [name for name, field in item.model_fields.items() if field.is_required()]
            return f"a list of objects ({', '.join(required)})"
        return f"a list of {_describe(item).removeprefix('a ').removeprefix('an ')}s"
    if get_origin(annotation) is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return "an object"
    return "a valid value"
