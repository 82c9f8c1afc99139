"""llama.cpp's real server (the ``xllamacpp`` wheel) serving the built-in LLM (random weights, written
with ``gguf``), a child process on a free loopback port for the block, stopped after it.

    with llamacpp_server(parallel=2) as url:
        ... url (http://127.0.0.1:PORT), model id LLM_NAME ...
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from inferload.local.models.llm import LLM_NAME, write_random_llama
from tests.support.ports import free_port
from tests.support.system_tools import REPO
from tests.support.waiting import wait_until

__all__ = ["LLM_NAME", "llamacpp_server"]


@contextmanager
def llamacpp_server(folder: Path, parallel: int = 2) -> Iterator[str]:
    """Its base URL; the model file and the server's log in ``folder``."""
    model = write_random_llama(folder / f"{LLM_NAME}.gguf")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "inferload.local.servers.llamacpp_serve", str(model), "--port", str(port)]
    command += ["--alias", LLM_NAME, "--parallel", str(parallel)]
    with (folder / "llamacpp.log").open("w") as log:
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: process.poll() is None and requests.get(f"{url}/health", timeout=2).status_code == 200,
            30,
            f"llama.cpp at {url} to be healthy (log: {folder / 'llamacpp.log'})",
            ignore=(requests.RequestException,),
        )
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
