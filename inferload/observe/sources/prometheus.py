"""Prometheus text: fetch it, and parse it with prometheus_client's parser into plain samples.

Pitfall handled here: the parser reports counter samples with a `_total` suffix even when the
endpoint writes none (Triton's `nv_inference_count` is read back as `nv_inference_count_total`;
TorchServe's `InferloadItems` as `InferloadItems_total`). Samples are keyed by the names the
parser gives, which the tests pin on captures of the real endpoints.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families

from inferload.observe.sources.base import SourceError


@dataclass(frozen=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: float


def parse_samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition; SourceError when it does not parse."""
    try:
        return [
            Sample(sample.name, dict(sample.labels), float(sample.value))
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        ]
    except ValueError as exc:
        raise SourceError(f"not Prometheus text: {exc}") from None


def fetch_text(session: requests.Session, url: str, timeout_s: float) -> str:
    try:
        response = session.get(url, timeout=timeout_s)
    except requests.RequestException as exc:
        raise SourceError(f"cannot read {url}: {exc}") from None
    if response.status_code != 200:
        raise SourceError(f"{url} answered HTTP {response.status_code}")
    return response.text


def sum_by(samples: list[Sample], name: str, label: str, value: str) -> float | None:
    """The sum of the samples called `name` whose `label` equals `value` (None when there is none)."""
    matching = [s.value for s in samples if s.name == name and s.labels.get(label) == value]
    return sum(matching) if matching else None
