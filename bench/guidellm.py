"""GuideLLM (PyPI `guidellm`), a peer of item 12 (bench/streams.py): in a venv of its own, with an offline tokenizer.

GuideLLM's dependencies (transformers 5, datasets, sanic, numpy 2 ...) conflict with inferload's, so it
gets its own venv under ``$INFERLOAD_VENVS`` (`inferload.local.servers.server_venv`), every package
pinned (guidellm 0.8.1 and what it resolved to on Python 3.11, installed with --no-deps). It requires
torch (its data loader is torch's): the main environment's torch is linked in, as for KServe's venv,
not downloaded a second time (the CUDA build pip resolves to is several GB). Offline it cannot fetch a
tokenizer: the one-word WordLevel tokenizer of `bench.aiperf.offline_tokenizer` is passed as its
``--tokenizer kind=huggingface_auto,model=DIR``.

GuideLLM 0.8.1's `guidellm run` takes each option as ``kind=...,key=value`` (its pydantic argument
models, guidellm/schemas): the OpenAI HTTP backend (chat completions, streamed by default; the
``/health`` probe off: the reference server has no such route), the ``concurrent`` profile (N streams,
closed loop), a ``max_duration`` constraint, synthetic prompts of a few tokens and a JSON report.
"""

from __future__ import annotations

from pathlib import Path

from bench.aiperf import offline_tokenizer
from inferload.local.servers.server_venv import VenvSpec, ensure_venv

#: guidellm 0.8.1 and everything it resolved to on Python 3.11 (pip freeze), less torch and the CUDA
#: packages torch pulled in (torch is linked from the main environment)
REQUIREMENTS: tuple[str, ...] = (
    "aiofiles==25.1.0",
    "aiologic==0.17.1",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "certifi==2026.10.19.post1",
    "click==8.4.2",
    "culsans==0.10.0",
    "datasets==5.2.0",
    "dill==0.4.1",
    "eval_type_backport==0.4.0",
    "Faker==40.63.0",
    "filelock==4.3.2",
    "fsspec==2026.9.0",
    "ftfy==6.3.1",
    "guidellm==0.8.1",
    "h11==0.16.0",
    "h2==4.4.1",
    "hf-xet==1.8.0",
    "hpack==4.2.0",
    "html5tagger==2.0.0",
    "httpcore==1.0.9",
    "httpcore2==2.16.2",
    "httptools==0.9.0",
    "httpx==0.29.0",
    "httpx2==2.16.2",
    "huggingface_hub==2.4.0",
    "hyperframe==6.1.0",
    "idna==3.20",
    "Jinja2==3.1.6",
    "kernels==0.19.1",
    "loguru==0.7.3",
    "markdown-it-py==4.3.0",
    "MarkupSafe==3.0.4",
    "mdurl==0.1.2",
    "more-itertools==11.2.1",
    "mpmath==1.3.0",
    "msgpack==1.2.4",
    "multidict==6.9.1",
    "multiprocess==0.70.19",
    "networkx==3.6.1",
    "numpy==2.4.6",
    "packaging==26.4",
    "pandas==3.1.1",
    "protobuf==7.36.2",
    "pyarrow==26.0.1",
    "pydantic==2.14.4",
    "pydantic-settings==2.16.3",
    "pydantic_core==2.50.5",
    "Pygments==2.21.0",
    "python-dateutil==4.0.0",
    "python-dotenv==1.2.4",
    "PyYAML==6.0.4",
    "regex==2026.11.19",
    "rich==15.0.0",
    "safetensors==0.8.0",
    "sanic==25.12.1",
    "sanic-routing==23.12.0",
    "shellingham==1.5.4",
    "sniffio==1.3.1",
    "sympy==1.14.0",
    "tabulate==0.10.0",
    "tokenizers==0.23.3",
    "tomlkit==0.15.3",
    "tqdm==4.70.1",
    "tracerite==2.6.5",
    "transformers==5.25.0",
    "truststore==0.10.5",
    "typer==0.29.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
    "ujson==6.1.0",
    "uvloop==0.23.0",
    "wcwidth==0.9.4",
    "websockets==17.4",
    "wrapt==2.5.2",
    "xxhash==4.1.0",
)
GUIDELLM_VENV = VenvSpec("guidellm", REQUIREMENTS, links=("torch", "torchgen", "functorch", "nvidia", "triton"))
#: the report `guidellm_command` asks for, in its output folder
REPORT_NAME = "benchmarks.json"


def ensure_guidellm() -> tuple[Path, Path]:
    """(the guidellm command, the offline tokenizer's folder), made on first use."""
    venv = ensure_venv(GUIDELLM_VENV)
    return venv / "bin" / "guidellm", offline_tokenizer(venv)


def guidellm_command(
    guidellm: Path,
    tokenizer: Path,
    http_url: str,
    model: str,
    streams: int,
    seconds: float,
    output_tokens: int,
    out_dir: Path,
) -> list[str]:
    """One `guidellm run`: ``streams`` streamed chat completions at a time (closed loop) for ``seconds``,
    each asking ``output_tokens``; its JSON report is ``out_dir / REPORT_NAME``."""
    backend = f"kind=openai_http,target={http_url},model={model},request_format=/v1/chat/completions,validate_backend=false"
    return [
        str(guidellm), "run", "--backend", backend,
        "--profile", f"kind=concurrent,streams={streams}",
        "--constraint", f"kind=max_duration,seconds={seconds:g}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--data", f"kind=synthetic_text,prompt_tokens=8,output_tokens={output_tokens}",
        "--output", f"kind=json,path={out_dir / REPORT_NAME}",
        "--disable-console-interactive",
    ]  # fmt: skip
