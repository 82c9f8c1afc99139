"""The frames between a Locust process and its gRPC call process (``INFERLOAD_GRPC_CALLS=process``).

Standard library only: both sides import it (the call process must not import gevent).
"""

from __future__ import annotations

import struct

#: parent -> call process: call id, length of the serialized request that follows
REQUEST = struct.Struct("<II")
#: call process -> parent: call id, gRPC status code (0: OK), send and receive monotonic_ns, length
#: of what follows (the serialized response, or the error details in UTF-8)
REPLY = struct.Struct("<IiQQI")
#: grpc.StatusCode.UNKNOWN: an error in the call process that is not a gRPC status
UNKNOWN_CODE = 2
