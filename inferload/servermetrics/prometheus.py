"""Prometheus text → samples by family name, with prometheus_client's parser and one ``_total`` rule.

The rule: a metric is looked up by its **family name, without ``_total``**, whatever the endpoint
writes. prometheus_client strips ``_total`` from counter family names and may add it to sample
names (Triton writes ``nv_inference_count``, TorchServe ``ts_inference_requests_total``; both come
back as families ``nv_inference_count`` and ``ts_inference_requests``). Of a family's samples only
the value samples are kept (``<family>`` or ``<family>_total``), never ``_created``, ``_bucket`` and
the like. The tests pin this on captures of the real endpoints (tests/captures/).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from inferload.errors import ScrapeError


@dataclass(frozen=True)
class Sample:
    labels: Mapping[str, str]
    value: float


Families = dict[str, list[Sample]]


def parse_families(text: str) -> Families:
    """Every family's value samples, by family name; ScrapeError when the text does not parse."""
    families: Families = {}
    try:
        for family in text_string_to_metric_families(text):
            names = (family.name, f"{family.name}_total")
            samples = families.setdefault(family.name, [])
            samples.extend(Sample(dict(s.labels), float(s.value)) for s in family.samples if s.name in names)
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from None
    return families


def total(families: Families, name: str, label: str, value: str) -> float | None:
    """The sum of family ``name``'s samples whose ``label`` is ``value``; None when there is none."""
    matching = [s.value for s in families.get(name, ()) if s.labels.get(label) == value]
    return sum(matching) if matching else None
