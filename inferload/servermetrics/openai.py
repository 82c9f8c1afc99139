"""OpenAI-compatible servers' metrics: none are read yet (vLLM's, llama.cpp's and SGLang's pages differ;
a generative target's ``metrics_url`` is refused where it is written)."""

from __future__ import annotations

from inferload.scenario.targets import Target


def metrics_page(target: Target) -> str | None:
    """None: no page is read for an OpenAI-compatible server."""
    return None
