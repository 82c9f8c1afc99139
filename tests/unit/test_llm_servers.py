"""The built-in LLM's servers beside llama.cpp's own, in the parts that need no server: Triton's model
repository for it, KServe's venv and command for it, the LLM demo's targets and its options."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferload.cli import main
from inferload.errors import ServerError
from inferload.local.demo_llm import LLM_SERVERS, LlmDemoSettings, llm_server, llm_target
from inferload.local.models.llm import LLM_NAME
from inferload.local.servers import kserve_local, triton_local
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts
from inferload.scenario.loader import scenario_from_dict
from inferload.scenario.targets import GenerativeTarget


def test_triton_s_repository_for_the_llm_holds_a_decoupled_generate_model_and_links_the_samples(tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    (samples / "tiny" / "1").mkdir(parents=True)
    folder = triton_local.llm_repository(tmp_path / "repository", samples, (LLM_NAME, "tiny"))
    config = (folder / LLM_NAME / "config.pbtxt").read_text()
    assert "model_transaction_policy { decoupled: true }" in config and 'backend: "python"' in config
    assert 'name: "text_input", data_type: TYPE_STRING' in config and 'name: "text_output", data_type: TYPE_STRING' in config
    assert f'name: "{LLM_NAME}"' in config and 'key: "gguf"' in config and "random-llama.gguf" in config
    version = folder / LLM_NAME / "1"
    assert (version / "model.py").read_text() == triton_local.LLM_MODEL_SOURCES[0].read_text()
    assert (version / "llamacpp_engine.py").read_text() == triton_local.LLM_MODEL_SOURCES[1].read_text()
    assert (folder / "tiny").resolve() == (samples / "tiny").resolve()


def test_kserve_serves_the_llm_alone_from_a_venv_of_its_own(tmp_path: Path) -> None:
    with pytest.raises(ServerError, match="KServe serves the built-in LLM 'random-llama' alone"):
        kserve_local.start_kserve(tmp_path, ServerPorts.free(), (LLM_NAME, "tiny"))
    venv = kserve_local.KSERVE_LLM_VENV
    assert "kserve==0.14.1" in venv.requirements and venv.links == ("xllamacpp",)
    assert venv.key() != kserve_local.KSERVE_VENV.key()
    command = kserve_local.kserve_command(tmp_path, ServerPorts(), (LLM_NAME,), "127.0.0.1")
    assert command[1].endswith("kserve_llm_model.py") and command[command.index("--name") + 1] == LLM_NAME
    LocalServers(tmp_path, models=(LLM_NAME,))  # the LLM is a model the servers can be asked for


def test_every_server_of_the_llm_demo_gets_the_same_requests_as_a_valid_target() -> None:
    settings = LlmDemoSettings()
    ports = ServerPorts()
    targets = [llm_target(server, f"{name}.steady", settings, ports) for name, server in LLM_SERVERS.items()]
    data = {"name": "demo", "duration": "5s", "targets": targets, "shape": {"kind": "steady", "users": 1}}
    loaded = {target.name: target for target in scenario_from_dict(data).targets}
    assert [loaded[f"{name}.steady"].kind for name in LLM_SERVERS] == [
        "openai-completions",
        "triton-generate",
        "openai-completions",
    ]
    generations = [target.generation for name in LLM_SERVERS if isinstance(target := loaded[f"{name}.steady"], GenerativeTarget)]
    assert len(generations) == len(LLM_SERVERS) and len({(g.prompt, g.max_tokens, g.tokenizer) for g in generations}) == 1
    assert [g.base_path for g in generations if g is not None] == ["/v1", "/v1", "/openai/v1"]
    with pytest.raises(ValueError, match="the LLM demo cannot serve the LLM on 'torchserve'"):
        llm_server("torchserve")


def test_each_demo_refuses_the_other_demo_s_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--llm", "--burst", "3", "--model", "tiny"]) == 2
    assert "--burst, --model: not an option of the LLM demo (--llm)" in capsys.readouterr().err
    assert main(["demo", "--ttft", "100"]) == 2
    assert "--ttft: not an option of the sample model's demo (without --llm)" in capsys.readouterr().err
    assert main(["demo", "--llm", "--servers", "llamacpp,torchserve"]) == 2
    assert "--servers: the LLM demo cannot serve the LLM on 'torchserve'" in capsys.readouterr().err
