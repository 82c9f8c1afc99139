"""inference-perf (PyPI `inference-perf`, kubernetes-sigs), a peer of item 12 (bench/streams.py): a venv of its own.

inference-perf 0.7.0 requires Python 3.12 or later (every release does), and inferload runs on 3.11,
so its venv is made by `inferload.local.servers.server_venv.ensure_venv` run under a 3.12+ interpreter
(`python_312()`: python3.13 / python3.12 on PATH, else pyenv's), under ``$INFERLOAD_VENVS`` as the
others, every package pinned (what 0.7.0 resolved to on Python 3.12, installed with --no-deps).
Offline it cannot fetch a tokenizer: the one-word WordLevel tokenizer of
`bench.aiperf.offline_tokenizer` is its ``tokenizer.pretrained_model_name_or_path`` (it counts each
streamed chunk's tokens with it: each of the reference server's events is one).

It reads one YAML file (`inference_perf_config`): the chat API streamed, the ``concurrent`` load type
(``num_requests`` at ``concurrency_level`` in flight: a request count, not a duration), a vLLM-type
OpenAI server, its mock prompts ("mock prompt N"), and the summary report written to a local folder
(``summary_lifecycle_metrics.json``, times in seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.aiperf import offline_tokenizer
from inferload.paths import REPO_ROOT

#: inference-perf 0.7.0 and everything it resolved to on Python 3.12 (pip freeze)
REQUIREMENTS: tuple[str, ...] = (
    "aiofiles==25.1.0",
    "aiohappyeyeballs==2.7.1",
    "aiohttp==3.14.5",
    "aiosignal==1.4.0",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anyio==4.16.0",
    "attrs==26.1.0",
    "av==19.0.2",
    "boto3==1.44.8",
    "botocore==1.44.8",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "cryptography==50.0.2",
    "datasets==5.2.0",
    "dill==0.4.1",
    "filelock==4.3.2",
    "frozenlist==1.8.0",
    "fsspec==2026.9.0",
    "google-api-core==2.44.0",
    "google-auth==2.63.0",
    "google-cloud-core==2.8.0",
    "google-cloud-storage==3.17.1",
    "google-crc32c==1.9.0",
    "google-resumable-media==2.11.0",
    "googleapis-common-protos==1.76.0",
    "h11==0.16.0",
    "hf-xet==1.8.0",
    "httpcore==1.0.9",
    "httpx==0.29.0",
    "huggingface_hub==1.33.0",
    "idna==3.20",
    "inference-perf==0.7.0",
    "Jinja2==3.1.6",
    "jmespath==1.1.0",
    "markdown-it-py==4.3.0",
    "MarkupSafe==3.0.4",
    "mdurl==0.1.2",
    "multidict==7.2.1",
    "multiprocess==0.70.19",
    "numpy==2.5.5",
    "opentelemetry-api==1.45.2",
    "packaging==26.4",
    "pandas==3.1.1",
    "pillow==13.0.0",
    "prometheus_client==0.26.0",
    "propcache==0.5.4",
    "proto-plus==1.29.0",
    "protobuf==7.36.2",
    "pyarrow==26.0.1",
    "pyasn1==0.6.5",
    "pyasn1_modules==0.4.2",
    "pycparser==3.12",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "Pygments==2.21.0",
    "python-dateutil==2.9.0.post0",
    "PyYAML==6.0.4",
    "regex==2026.11.19",
    "requests==2.34.2",
    "rich==15.0.0",
    "s3transfer==0.19.3",
    "safetensors==0.8.0",
    "shellingham==1.5.4",
    "six==1.17.0",
    "tiktoken==0.14.0",
    "tokenizers==0.22.2",
    "tqdm==4.70.1",
    "transformers==5.13.0",
    "typer==0.29.2",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "urllib3==2.8.0",
    "uvloop==0.23.0",
    "xxhash==4.1.0",
    "yarl==1.25.1",
)
VENV_NAME = "inference-perf"
#: the summary report inference-perf writes in its local storage folder
REPORT_NAME = "summary_lifecycle_metrics.json"
#: how long making the venv may take (ensure_venv's own install limit is 900 s)
INSTALL_TIMEOUT_S = 1200

_ENSURE_SCRIPT = """
import json, sys
from inferload.local.servers.server_venv import VenvSpec, ensure_venv
print(ensure_venv(VenvSpec(sys.argv[1], tuple(json.loads(sys.argv[2])), links=())))
"""


def python_312() -> Path:
    """An interpreter of Python 3.12 or later: python3.13 or python3.12 on PATH, else pyenv's newest
    3.12+; RuntimeError when there is none (a pyenv shim of a version not selected does not run)."""
    candidates = [found for name in ("python3.13", "python3.12") if (found := shutil.which(name))]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted((str(p / "bin" / "python3") for p in pyenv.glob("3.1[2-9]*")), reverse=True)
    for candidate in candidates:
        try:
            ran = subprocess.run(
                [candidate, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ran.returncode == 0 and ran.stdout.strip() == "True":
            return Path(candidate)
    raise RuntimeError("inference-perf needs Python 3.12 or later, and none was found (python3.12, python3.13, pyenv)")


def ensure_inference_perf() -> tuple[Path, Path]:
    """(the inference-perf command, the offline tokenizer's folder), the venv made on first use."""
    made = subprocess.run(
        [str(python_312()), "-c", _ENSURE_SCRIPT, VENV_NAME, json.dumps(REQUIREMENTS)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    if made.returncode != 0:
        raise RuntimeError(f"inference-perf's venv could not be made: {made.stderr.strip()[-1500:]}")
    venv = Path(made.stdout.strip().splitlines()[-1])
    return venv / "bin" / "inference-perf", offline_tokenizer(venv)


def inference_perf_config(
    tokenizer: Path, http_url: str, model: str, streams: int, requests: int, out_dir: Path
) -> dict[str, Any]:
    """The YAML (as a dict) of one run: ``requests`` streamed chat completions, ``streams`` at a time
    (closed loop); its summary is ``out_dir / REPORT_NAME``. The server decides the output's length
    (the reference server writes its scripted events whatever ``max_tokens`` says)."""
    return {
        "api": {"type": "chat", "streaming": True},
        "data": {"type": "mock"},  # "mock prompt N": its random generator serves the completions API only
        "load": {
            "type": "concurrent",
            "stages": [{"num_requests": requests, "concurrency_level": streams}],
            "request_timeout": 60,
        },
        "server": {"type": "vllm", "model_name": model, "base_url": http_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer)},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": False}},
        "storage": {"local_storage": {"path": str(out_dir)}},
    }


def inference_perf_command(inference_perf: Path, config_file: Path) -> list[str]:
    """`inference-perf --config_file FILE` (the YAML of `inference_perf_config`)."""
    return [str(inference_perf), "--config_file", str(config_file)]
