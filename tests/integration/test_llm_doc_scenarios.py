"""docs/llm.md's scenarios as a new user takes them from the page alone: its first scenario, with only
what the page says to change (the server's address and one of the ids its `GET /v1/models` lists), runs
against the built-in LLM (llama.cpp's own server) on the first try; its generation fragments (lengths,
a conversation), put into that target as the page shows them, validate."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from inferload.local.models.llm import llm_model_path, tokenizer_path
from tests.support.cli import inferload
from tests.support.llamacpp import llamacpp_server
from tests.support.system_tools import REPO

PAGE = REPO / "docs" / "llm.md"


def yaml_blocks() -> list[Any]:
    return [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", PAGE.read_text(), re.S | re.M)]


def first_scenario() -> dict[str, Any]:
    scenario = yaml_blocks()[0]
    assert {"name", "targets", "shape"} <= set(scenario), scenario  # the page opens with a whole scenario
    return scenario


def test_the_pages_first_scenario_runs_against_the_built_in_llm_with_only_its_server_and_model_changed(tmp_path: Path):
    scenario = first_scenario()
    with llamacpp_server(tmp_path / "llama") as url:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as answer:
            model = json.loads(answer.read())["data"][0]["id"]
        scenario["targets"][0].update(address=url, model=model)
        scenario.update(duration="8s", warmup="2s")  # the page's minute, shortened for the test
        path = tmp_path / "chat.yaml"
        path.write_text(yaml.safe_dump(scenario, sort_keys=False))
        done = inferload("run", str(path), "--headless", "--out", str(tmp_path / "out"), timeout_s=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads((tmp_path / "out" / "summary.json").read_text())["targets"]["chat"]
    assert figures["requests"] > 0 and figures["failures"] == 0, figures
    assert figures["generation"]["output_tokens"] > 0 and figures["decoupled"]["first_response_ms"]["p50"] > 0


def test_the_pages_generation_fragments_validate_in_that_scenario(tmp_path: Path):
    """Each `generation:` block of the page, put into the first scenario's target (its paths are the
    checkout's: the tokenizer copied where the page names it)."""
    (tmp_path / "llm").mkdir()
    shutil.copy(tokenizer_path(llm_model_path()), tmp_path / "llm" / "random-llama.tokenizer.json")
    fragments = [block["generation"] for block in yaml_blocks() if isinstance(block, dict) and set(block) == {"generation"}]
    assert len(fragments) >= 2, fragments  # lengths, a conversation
    for index, generation in enumerate(fragments):
        scenario = first_scenario()
        scenario["targets"][0]["generation"] = generation
        path = tmp_path / f"fragment-{index}.yaml"
        path.write_text(yaml.safe_dump(scenario, sort_keys=False))
        done = inferload("validate", str(path))
        assert done.returncode == 0, (generation, done.stdout + done.stderr)
