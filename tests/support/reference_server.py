"""The reference server for tests (docs/reference-server.md): a child process on free loopback
ports for the block, stopped after it, its process checked gone.

    with reference_server(delay={"law": "fixed", "ms": 5}, concurrency=2) as server:
        ... server.grpc_address, server.http_url, server.records(), server.reset() ...

Keys are the configuration's (``ReferenceConfig``); a whole ``ReferenceConfig`` may be given instead.
It needs the native extension (``make build``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from inferload.local.reference_server import ReferenceConfig, ReferenceServerProcess, reference_config_from_dict


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def reference_target(name: str, kind: str, address: str, **extra: Any) -> dict[str, Any]:
    """A scenario target of the reference server's model (``identity``: one FP32 input of 16 values)."""
    inputs = [{"name": "INPUT0", "shape": [16], "dtype": "FP32", "data": {"generator": "random", "seed": 0}}]
    return {"name": name, "kind": kind, "address": address, "model": "identity", "inputs": inputs, **extra}


@contextmanager
def reference_server(
    config: ReferenceConfig | None = None, *, ca_file: Path | None = None, **keys: Any
) -> Iterator[ReferenceServerProcess]:
    """``ca_file``: with ``tls``, the CA that signed its certificate (for its records and stats)."""
    if config is None:
        config = reference_config_from_dict(keys, "reference_server(...)")
    elif keys:
        raise TypeError("give a ReferenceConfig or its keys, not both")
    server = ReferenceServerProcess(config, ca_file=ca_file).start()
    pid = server.pid
    try:
        yield server
    finally:
        server.stop()
        assert pid is not None and _gone(pid), f"the reference server (pid {pid}) is still running after stop()"


def answered(server: ReferenceServerProcess) -> int:
    """The calls ``server`` has answered (not failed by its script) since it started or was reset."""
    stats = server.stats()
    return int(stats["recorded"]) + int(stats["dropped"]) - int(stats["failed"])
