"""AIPerf (PyPI `aiperf`), a peer of `make bench` (item 10): in a venv of its own, with an offline tokenizer.

AIPerf's dependencies (transformers, datasets, pandas, protobuf 7 ...) conflict with inferload's, so it
gets its own venv under ``$INFERLOAD_VENVS``, made once (`inferload.local.servers.server_venv`),
every package pinned (aiperf 0.13.0 and what it resolved to on Python 3.11, installed with --no-deps).
It sends Triton's v2 JSON (its ``template`` endpoint: the body as a template, ``response_field``
naming what an answer must hold, else every request counts as failed), so its request is the HTTP
peers' tensor as JSON, not Triton's binary extension. Offline it cannot fetch its built-in
tokenizer: a one-word WordLevel tokenizer is saved next to the venv and passed with ``--tokenizer``
(docs/benchmarks.md; ../shared/field-notes.md has the method).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from inferload.local.servers.server_venv import VenvSpec, ensure_venv

#: aiperf 0.13.0 and everything it resolved to on Python 3.11 (pip freeze)
REQUIREMENTS: tuple[str, ...] = (
    "aiofiles==24.1.0",
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "aiosqlite==0.22.1",
    "aiperf==0.13.0",
    "alembic==1.20.1",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "blinker==1.9.0",
    "brotli==1.2.1",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "choreographer==1.4.0",
    "click==8.5.1",
    "colorlog==6.12.0",
    "contourpy==1.3.3",
    "crick==0.0.8",
    "cycler==0.12.1",
    "cyclopts==4.25.3",
    "dash==3.1.1",
    "dash-bootstrap-components==2.0.4",
    "datasets==5.2.0",
    "dill==0.4.1",
    "docstring_parser==0.18.0",
    "fastapi==0.165.0",
    "ffmpeg-python==0.2.0",
    "filelock==4.3.1",
    "Flask==3.1.3",
    "fonttools==4.68.0",
    "frozenlist==1.8.0",
    "fsspec==2026.9.0",
    "future==1.0.0",
    "h11==0.16.0",
    "hf-xet==1.8.0",
    "httpcore==1.0.9",
    "httptools==0.9.0",
    "httpx==0.28.1",
    "huggingface_hub==1.33.0",
    "idna==3.20",
    "importlib_metadata==10.2.0",
    "iniconfig==2.3.1",
    "iso8601==2.1.0",
    "itsdangerous==2.2.0",
    "Jinja2==3.1.6",
    "jmespath==1.0.1",
    "jsonpatch==1.48",
    "jsonpointer==3.12",
    "kaleido==1.2.0",
    "kiwisolver==1.5.1",
    "kopf==1.45.2",
    "kubernetes_asyncio==32.3.2",
    "lazy-importer==0.1.0",
    "linkify-it-py==2.2.0",
    "logistro==2.0.1",
    "Mako==1.4.3",
    "markdown-it-py==4.3.0",
    "MarkupSafe==3.0.4",
    "matplotlib==3.11.2",
    "mdit-py-plugins==0.7.0",
    "mdurl==0.1.2",
    "msgspec==0.23.0",
    "multidict==7.2.1",
    "multiprocess==0.70.19",
    "narwhals==2.29.0",
    "nest-asyncio==1.6.0",
    "numpy==2.4.6",
    "nvidia-ml-py==13.615.71",
    "opentelemetry-api==1.45.2",
    "optuna==5.0.0",
    "orjson==3.11.9",
    "packaging==26.4",
    "pandas==2.3.3",
    "pillow==12.3.0",
    "platformdirs==4.14.9",
    "plotly==6.4.0",
    "pluggy==1.7.0",
    "prometheus_client==0.23.1",
    "propcache==0.5.4",
    "protobuf==7.36.2",
    "psutil==7.0.0",
    "pyarrow==26.0.1",
    "pycparser==3.12",
    "pydantic==2.14.4",
    "pydantic-settings==2.16.3",
    "pydantic_core==2.50.5",
    "Pygments==2.21.0",
    "pyparsing==3.3.3",
    "pytest==9.2.0",
    "pytest-timeout==2.4.0",
    "python-dateutil==4.0.0",
    "python-dotenv==1.2.4",
    "python-json-logger==4.2.0",
    "python-multipart==0.0.34",
    "pytz==2026.6",
    "PyYAML==6.0.4",
    "pyzmq==26.4.0",
    "regex==2026.11.19",
    "requests==2.34.2",
    "retrying==1.4.2",
    "rich==14.1.0",
    "rich-rst==2.2.0",
    "ruamel.yaml==0.18.17",
    "ruamel.yaml.clib==0.2.15",
    "safetensors==0.8.0",
    "scipy==1.17.1",
    "seaborn==0.13.2",
    "sentencepiece==0.2.3",
    "setproctitle==1.3.8",
    "shellingham==1.5.4",
    "simplejson==4.3.0",
    "six==1.17.0",
    "soundfile==0.13.1",
    "SQLAlchemy==2.1.9",
    "starlette==1.10.0",
    "starlette-compress==2.0.0",
    "textual==5.3.0",
    "tiktoken==0.14.0",
    "tokenizers==0.23.3",
    "tqdm==4.70.1",
    "transformers==5.24.0",
    "typer==0.29.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "tzdata==2026.6",
    "urllib3==2.8.0",
    "uvicorn==0.54.0",
    "uvloop==0.23.0",
    "watchfiles==1.3.0",
    "websockets==17.4",
    "Werkzeug==3.1.9",
    "xxhash==4.1.0",
    "yarl==1.25.1",
    "zipp==4.1.2",
    "zstandard==0.25.0",
)
AIPERF_VENV = VenvSpec("aiperf", REQUIREMENTS, links=())
TOKENIZER_DIR = "offline-tokenizer"
#: how long AIPerf waits for answers after its duration ends (s)
GRACE_S = 5

_TOKENIZER_SCRIPT = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
words = Tokenizer(models.WordLevel({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
words.pre_tokenizer = pre_tokenizers.Whitespace()
PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]").save_pretrained(sys.argv[1])
"""


def offline_tokenizer(venv: Path) -> Path:
    """The one-word WordLevel tokenizer saved in ``venv`` (made on first use with that venv's own
    transformers): every word but "a" is one unknown token, so each of the reference server's
    one-character content events counts as one token."""
    tokenizer = venv / TOKENIZER_DIR
    if not (tokenizer / "tokenizer.json").is_file():
        subprocess.run(
            [str(venv / "bin" / "python"), "-c", _TOKENIZER_SCRIPT, str(tokenizer)], check=True, capture_output=True, timeout=300
        )
    return tokenizer


def ensure_aiperf() -> tuple[Path, Path]:
    """(the aiperf command, the offline tokenizer's folder), made on first use."""
    venv = ensure_venv(AIPERF_VENV)
    return venv / "bin" / "aiperf", offline_tokenizer(venv)


def aiperf_command(
    aiperf: Path,
    tokenizer: Path,
    http_address: str,
    model: str,
    body: dict,
    seconds: float,
    rate: float | None,
    in_flight: int,
    artifacts: Path,
) -> list[str]:
    """One `aiperf profile` of ``seconds``: ``in_flight`` requests at a time, or ``rate`` req/s at constant gaps."""
    extra = {"payload_template": json.dumps(body), "response_field": "outputs[0].name"}
    load = ["--concurrency", str(in_flight)] if rate is None else ["--request-rate", f"{rate:g}", "--arrival-pattern", "constant"]
    return [
        str(aiperf), "profile", "--endpoint-type", "template", "--custom-endpoint", f"/v2/models/{model}/infer",
        "--extra-inputs", json.dumps(extra), "--url", f"http://{http_address}", "--model", model,
        "--benchmark-duration", f"{seconds:g}", "--benchmark-grace-period", str(GRACE_S), *load,
        "--ui-type", "none", "--tokenizer", str(tokenizer), "--artifact-dir", str(artifacts),
    ]  # fmt: skip


def aiperf_chat_stream_command(
    aiperf: Path,
    tokenizer: Path,
    http_url: str,
    model: str,
    in_flight: int,
    seconds: float,
    output_tokens: int,
    artifacts: Path,
) -> list[str]:
    """One `aiperf profile` of streamed chat completions (item 12): ``in_flight`` at a time (closed
    loop) for ``seconds``, synthetic prompts of 8 tokens asking ``output_tokens``; its summary is
    ``artifacts``' profile_export_aiperf.json (TTFT, ITL). Output tokens are the server's usage
    count (``--use-server-token-count``): the offline tokenizer reads a whole answer of one-character
    events as one word, one token, and AIPerf gives no ITL under two tokens."""
    return [
        str(aiperf), "profile", "--endpoint-type", "chat", "--streaming", "--url", http_url, "--model", model,
        "--concurrency", str(in_flight), "--benchmark-duration", f"{seconds:g}", "--benchmark-grace-period", str(GRACE_S),
        "--isl", "8", "--osl", str(output_tokens), "--use-server-token-count", "--ui-type", "none", "--tokenizer", str(tokenizer),
        "--artifact-dir", str(artifacts),
    ]  # fmt: skip
