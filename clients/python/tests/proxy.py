"""A small HTTP/1.1 reverse proxy (standard library only) that sits between a client and the
server and can lose answers: it forwards a request, lets the server act on it, throws the
server's answer away, and then answers 503 (``"503"``), closes the connection without an
answer (``"drop"``), or keeps the client waiting until told and then closes it (``"hold"``).
It streams answers through (the watch's server-sent events too), keeps connections alive,
and records every request and how many connections clients opened. ``cut_streams()`` ends the
streams going through (as an instance going away would), without an event."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional
from urllib.parse import urlsplit

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
}


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    #: What the server answered (also when the proxy threw it away).
    upstream_status: int = 0
    upstream_headers: dict[str, str] = field(default_factory=dict)
    upstream_body: bytes = b""
    #: What the proxy did: "forwarded", "503" or "drop".
    action: str = "forwarded"

    def json(self) -> dict[str, object]:
        return json.loads(self.upstream_body)  # type: ignore[no-any-return]


# fault(method, path) -> None (forward), "503", "drop" or "hold"
Fault = Callable[[str, str], Optional[str]]


class FaultyProxy:
    def __init__(self, upstream: str, fault: Optional[Fault] = None) -> None:
        parts = urlsplit(upstream)
        self.upstream_host = parts.hostname or "127.0.0.1"
        self.upstream_port = parts.port or 80
        self.fault: Fault = fault or (lambda method, path: None)
        self.exchanges: list[Exchange] = []
        self.connections = 0
        #: "hold": set when an answer is being held back; the answer is dropped once
        #: hold_until is set.
        self.holding = threading.Event()
        self.hold_until = threading.Event()
        self._lock = threading.Lock()
        self._streams: set[http.client.HTTPConnection] = set()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with proxy._lock:
                    proxy.connections += 1

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                proxy._forward(self)

            do_GET = do_POST = do_DELETE = do_PUT = _handle

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.hold_until.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut_streams(self) -> int:
        """Ends every stream going through now (the client sees it end without news)."""
        with self._lock:
            streams = list(self._streams)
        for upstream in streams:
            if upstream.sock is not None:
                try:
                    upstream.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        return len(streams)

    def requests(self, method: str, path_prefix: str) -> list[Exchange]:
        with self._lock:
            return [e for e in self.exchanges if e.method == method and e.path.startswith(path_prefix)]

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("content-length") or 0)
        body = handler.rfile.read(length) if length else None
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
        exchange = Exchange(handler.command, handler.path, {k.lower(): v for k, v in headers.items()})
        with self._lock:
            self.exchanges.append(exchange)
            action = self.fault(handler.command, handler.path)
        upstream = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=120)
        try:
            upstream.request(handler.command, handler.path, body=body, headers=headers)
            response = upstream.getresponse()
            exchange.upstream_status = response.status
            exchange.upstream_headers = {k.lower(): v for k, v in response.getheaders()}
            if action in ("503", "drop", "hold"):
                exchange.upstream_body = response.read()
                exchange.action = action
                if action == "hold":  # keep the client waiting, then drop the answer
                    self.holding.set()
                    self.hold_until.wait(30)
                    handler.close_connection = True
                    return
                if action == "drop":
                    handler.close_connection = True
                    return
                problem = json.dumps(
                    {
                        "type": "/problems/redis_unavailable",
                        "title": "Redis did not answer in time",
                        "status": 503,
                        "detail": "the proxy lost the server's answer",
                        "code": "redis_unavailable",
                    }
                ).encode()
                handler.send_response(503)
                handler.send_header("content-type", "application/problem+json")
                handler.send_header("content-length", str(len(problem)))
                handler.end_headers()
                handler.wfile.write(problem)
                return
            handler.send_response(response.status)
            for k, v in response.getheaders():
                if k.lower() not in HOP_BY_HOP:
                    handler.send_header(k, v)
            declared = response.getheader("content-length")
            if declared is not None:
                data = response.read()
                exchange.upstream_body = data
                handler.send_header("content-length", str(len(data)))
                handler.end_headers()
                handler.wfile.write(data)
                return
            # A stream (server-sent events): pass each piece on as it comes.
            handler.send_header("transfer-encoding", "chunked")
            handler.end_headers()
            with self._lock:
                self._streams.add(upstream)
            while True:
                try:
                    piece = response.read1(65536)
                except (OSError, ValueError):  # cut
                    piece = b""
                if not piece:
                    break
                handler.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
        except OSError:
            handler.close_connection = True
        finally:
            with self._lock:
                self._streams.discard(upstream)
            upstream.close()
