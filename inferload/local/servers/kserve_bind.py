"""KServe's REST (uvicorn) and gRPC servers bound to one address: KServe itself binds every address
(0.0.0.0 and [::]) and has no option for it. Imported, as a file beside them, by the scripts that run
KServe in its own venvs (``kserve_model.py``, ``kserve_llm_model.py``); imports kserve's dependencies only.
"""

from __future__ import annotations

from typing import Any

import uvicorn
from grpc import aio


def bind_to(host: str) -> None:
    """Make KServe's REST (uvicorn) and gRPC servers listen on ``host`` only: KServe itself binds
    every address (0.0.0.0 and [::]) and has no option for it."""
    rest_config = uvicorn.Config

    class HostConfig(rest_config):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["host"] = host
            super().__init__(*args, **kwargs)

    uvicorn.Config = HostConfig
    make_server = aio.server

    def host_server(*args: Any, **kwargs: Any) -> Any:
        server = make_server(*args, **kwargs)
        add_port = server.add_insecure_port
        server.add_insecure_port = lambda address: add_port(address.replace("[::]", host, 1))
        return server

    aio.server = host_server
