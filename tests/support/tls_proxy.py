"""A small TLS-terminating TCP proxy for tests, in threads of the test process.

Triton's own HTTP endpoint has no TLS; users who need HTTPS put a TLS-terminating proxy (nginx,
Envoy, a load balancer) in front of it. This stands in for that proxy, and only for it: it accepts
TLS on a loopback port with the given server certificate (optionally requiring a client
certificate) and relays the decrypted bytes to the plain upstream port, unchanged.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from pathlib import Path
from types import TracebackType


class TlsTerminatingProxy:
    def __init__(self, upstream: tuple[str, int], cert: Path, key: Path, client_ca: Path | None = None) -> None:
        self.upstream = upstream
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._context.load_cert_chain(str(cert), str(key))
        if client_ca is not None:
            self._context.verify_mode = ssl.CERT_REQUIRED
            self._context.load_verify_locations(str(client_ca))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="tls-proxy", daemon=True)

    def __enter__(self) -> TlsTerminatingProxy:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(10)
        try:
            secure = self._context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            client.close()  # a failed handshake (wrong CA on the client's side, plain text): nothing to relay
            return
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            secure.close()
            return
        secure.settimeout(None)
        upstream.settimeout(None)
        threading.Thread(target=_pump, args=(upstream, secure), daemon=True).start()
        _pump(secure, upstream)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until either side closes; then close both."""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for each in (source, sink):
            with contextlib.suppress(OSError):
                each.close()
