"""llama.cpp's real server (the ``xllamacpp`` wheel) serving the built-in LLM (random weights, written
with ``gguf``), started as `inferload servers up --servers llamacpp` starts it, on free loopback ports,
for the block; stopped after it, with nothing left running.

    with llamacpp_server(folder) as url:
        ... url (http://127.0.0.1:PORT), model id LLM_NAME ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferload.local.models.llm import LLM_NAME
from inferload.local.servers.manager import LocalServers
from inferload.local.servers.ports import ServerPorts, is_port_open
from inferload.local.servers.procs import ProcessRecord, is_alive

__all__ = ["LLM_NAME", "llamacpp_server"]


@contextmanager
def llamacpp_server(folder: Path) -> Iterator[str]:
    """Its base URL; its state and log under ``folder``."""
    servers = LocalServers(folder / "servers", ServerPorts.free(), models=())
    up = servers.up(which=("llamacpp",), timeout_s=120)
    started = up["servers"]["llamacpp"]
    record = ProcessRecord.from_dict(started["process"])
    try:
        yield str(started["urls"]["http"])
    finally:
        servers.down()
        assert not is_alive(record.pid, record.start_ticks)
        assert not is_port_open(servers.ports.llamacpp_http)
