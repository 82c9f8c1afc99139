"""CSV cells a spreadsheet shows as text, never runs as a formula.

Excel, LibreOffice and Google Sheets treat a cell that starts with `=`, `+`, `-` or `@` (and, in
some, a tab or carriage return before one) as a formula. Every text cell of requests.csv and
windows.csv that can come from outside (target names, worker ids, outcomes) goes through
`safe_cell`, which puts a `'` in front of such a cell (the OWASP "CSV injection" advice). Numbers
are left alone, so a negative residual stays a number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

T = TypeVar("T")


def safe_cell(value: T) -> T | str:
    """`value`, with a leading `'` when it is text a spreadsheet would read as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def safe_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A csv.DictWriter row with every text cell made safe."""
    return {name: safe_cell(value) for name, value in row.items()}


def safe_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [safe_row(row) for row in rows]
