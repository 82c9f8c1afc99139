"""The loopback floor: what one request costs on this machine outside the server's own time.

A minimal client of our own, independent of inferload's transports (a blocking socket, one
request at a time, bytes built once), sends ``count`` requests with ids to the reference server
(law ``none``) and times each as the engine does: from the return of the write that carried the
request to the return of the read that brought its last bytes (``time.monotonic_ns``). The
server's records, joined by id, give each request's own time inside the server (answered −
received); the floor sample is the client's time minus that. It holds the kernel's loopback path
both ways, the server's framing before `received` and after `answered`, and the wake-ups of both
processes: what any client on this machine pays. Over gRPC the probe speaks just enough HTTP/2
(h2c, one stream at a time, literal HPACK headers, flow control opened wide); over HTTP, HTTP/1.1
keep-alive.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass

import numpy as np

from inferload.local.reference_server import ReferenceServerProcess

GRPC_PATH = "/inference.GRPCInferenceService/ModelInfer"
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_DATA, H2_HEADERS, H2_SETTINGS, H2_PING, H2_GOAWAY, H2_WINDOW_UPDATE = 0, 1, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
WIDEST_WINDOW = (1 << 31) - 1
PROBE_ID_PREFIX = "floor-"


@dataclass(frozen=True)
class FloorProbe:
    """One protocol's floor samples (ns), joined with the server's records by request id."""

    protocol: str  # "grpc" | "http"
    samples_ns: np.ndarray

    def summary(self) -> dict[str, float | int]:
        us = self.samples_ns / 1000.0
        return {
            "samples": int(us.size),
            "p50_us": round(float(np.percentile(us, 50)), 1),
            "p90_us": round(float(np.percentile(us, 90)), 1),
            "p99_us": round(float(np.percentile(us, 99)), 1),
        }


def _h2_frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def _hpack_literal(name: str, value: str) -> bytes:
    """A header as an HPACK literal without indexing, new name, no Huffman (RFC 7541 6.2.2)."""
    encoded_name, encoded_value = name.encode(), value.encode()
    if len(encoded_name) > 126 or len(encoded_value) > 126:
        raise ValueError(f"header {name} too long for the probe's one-byte lengths")
    return b"\x00" + bytes([len(encoded_name)]) + encoded_name + bytes([len(encoded_value)]) + encoded_value


def _model_infer_message(model: str, request_id: str, values: int) -> bytes:
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    tensor = request.inputs.add()
    tensor.name, tensor.datatype = "INPUT0", "FP32"
    tensor.shape.extend([values])
    request.raw_input_contents.append(bytes(4 * values))
    body = request.SerializeToString()
    return b"\x00" + struct.pack(">I", len(body)) + body


class _H2Probe:
    """One h2c connection: unary ModelInfer calls, one at a time."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.authority = f"{host}:{port}"
        self.buffer = b""
        self.next_stream = 1
        settings = struct.pack(">HI", 0x4, WIDEST_WINDOW)  # SETTINGS_INITIAL_WINDOW_SIZE
        self.sock.sendall(
            H2_PREFACE
            + _h2_frame(H2_SETTINGS, 0, 0, settings)
            + _h2_frame(H2_WINDOW_UPDATE, 0, 0, struct.pack(">I", WIDEST_WINDOW - 65535))
        )

    def call(self, message: bytes) -> tuple[int, int]:
        """(sent_ns, received_ns) of one call."""
        stream = self.next_stream
        self.next_stream += 2
        headers = b"".join(
            _hpack_literal(name, value)
            for name, value in (
                (":method", "POST"),
                (":scheme", "http"),
                (":path", GRPC_PATH),
                (":authority", self.authority),
                ("content-type", "application/grpc"),
                ("te", "trailers"),
            )
        )
        wire = _h2_frame(H2_HEADERS, END_HEADERS, stream, headers) + _h2_frame(H2_DATA, END_STREAM, stream, message)
        self.sock.sendall(wire)
        sent_ns = time.monotonic_ns()
        while True:
            received_ns = self._read_more()
            if self._ended(stream):
                return sent_ns, received_ns

    def _read_more(self) -> int:
        chunk = self.sock.recv(1 << 16)
        now = time.monotonic_ns()
        if not chunk:
            raise ConnectionError("the reference server closed the probe's HTTP/2 connection")
        self.buffer += chunk
        return now

    def _ended(self, stream: int) -> bool:
        """Consume whole frames; True once ``stream`` ended (a frame of it with END_STREAM)."""
        ended = False
        while len(self.buffer) >= 9:
            length = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + length:
                break
            kind, flags = self.buffer[3], self.buffer[4]
            frame_stream = int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            payload = self.buffer[9 : 9 + length]
            self.buffer = self.buffer[9 + length :]
            if kind == H2_SETTINGS and not flags & ACK:
                self.sock.sendall(_h2_frame(H2_SETTINGS, ACK, 0, b""))
            elif kind == H2_PING and not flags & ACK:
                self.sock.sendall(_h2_frame(H2_PING, ACK, 0, payload))
            elif kind == H2_GOAWAY:
                raise ConnectionError("the reference server sent GOAWAY to the probe")
            elif kind in (H2_HEADERS, H2_DATA) and frame_stream == stream and flags & END_STREAM:
                ended = True
        return ended

    def close(self) -> None:
        self.sock.close()


class _Http1Probe:
    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.host = f"{host}:{port}"

    def request_bytes(self, model: str, request_id: str, values: int) -> bytes:
        body = json.dumps(
            {"id": request_id, "inputs": [{"name": "INPUT0", "shape": [values], "datatype": "FP32", "data": [0.0] * values}]}
        ).encode()
        head = (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def call(self, request: bytes) -> tuple[int, int]:
        self.sock.sendall(request)
        sent_ns = time.monotonic_ns()
        buffer = b""
        while True:
            chunk = self.sock.recv(1 << 16)
            received_ns = time.monotonic_ns()
            if not chunk:
                raise ConnectionError("the reference server closed the probe's HTTP connection")
            buffer += chunk
            head_end = buffer.find(b"\r\n\r\n")
            if head_end < 0:
                continue
            length = 0
            for line in buffer[:head_end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            if len(buffer) >= head_end + 4 + length:
                return sent_ns, received_ns

    def close(self) -> None:
        self.sock.close()


def probe_floor(server: ReferenceServerProcess, protocol: str, count: int, model: str, values: int) -> FloorProbe:
    """``count`` probe requests over ``protocol`` to ``server`` (law none), joined with its records."""
    host, _, port = (server.grpc_address if protocol == "grpc" else server.http_address).rpartition(":")
    after = len(server.records())
    times: dict[str, tuple[int, int]] = {}
    if protocol == "grpc":
        h2 = _H2Probe(host, int(port))
        try:
            for k in range(count):
                request_id = f"{PROBE_ID_PREFIX}{protocol}-{k}"
                times[request_id] = h2.call(_model_infer_message(model, request_id, values))
        finally:
            h2.close()
    else:
        http = _Http1Probe(host, int(port))
        try:
            for k in range(count):
                request_id = f"{PROBE_ID_PREFIX}{protocol}-{k}"
                times[request_id] = http.call(http.request_bytes(model, request_id, values))
        finally:
            http.close()
    records = server.records(after=after)
    samples = []
    for index, request_id in enumerate(records.ids):
        if request_id in times and records.status[index] == 0:
            sent_ns, received_ns = times[request_id]
            inside_ns = int(records.answered_ns[index]) - int(records.received_ns[index])
            samples.append((received_ns - sent_ns) - inside_ns)
    if len(samples) < count // 2:
        raise RuntimeError(f"the {protocol} floor probe matched {len(samples)} of {count} requests with the server's records")
    return FloorProbe(protocol, np.asarray(samples, dtype=np.int64))
