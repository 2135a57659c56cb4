"""`MockModelServer`: a scriptable OpenAI Responses + Anthropic Messages mock on 127.0.0.1."""

from __future__ import annotations

import collections
import contextlib
import gzip
import itertools
import json
import logging
import select
import socket
import socketserver
import threading
import time
import traceback
import zlib
from collections.abc import Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from . import messages_api, responses_api
from .turns import Api, RecordedRequest, ScriptEntry, Text, Turn
from .wire import HangOutcome

log = logging.getLogger("tests.mockmodel")

_POLL_S = 0.05


class MockServerError(AssertionError):
    """The mock itself failed while answering a request (a bug in the mock or the script)."""


class MockModelServer:
    """A scriptable mock model server, started on construction, stopped by `close()`.

    ```
    with MockModelServer() as srv:
        srv.script(Shell("touch f", escalated=True), Text("done"))
        ... point a peer at srv.base_url ...
        assert srv.model_requests[0].api == "responses"
    ```

    Every `POST .../responses` (OpenAI Responses API) and `POST .../messages` (Anthropic
    Messages API) takes the next scripted entry, or `default` when the script is empty.
    Other paths (count_tokens, models, HEAD probes) get harmless answers and take no entry.
    All requests are recorded.
    """

    def __init__(
        self,
        *script: ScriptEntry,
        default: Turn | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        handler_timeout_s: float = 60.0,
    ) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._queue: collections.deque[ScriptEntry] = collections.deque(script)
        self._default: Turn = default if default is not None else Text("ok")
        self._requests: list[RecordedRequest] = []
        self._errors: list[str] = []
        self._ids = itertools.count(1)
        self._release_gen = 0
        self._closing = threading.Event()
        self._closed = False
        self._active: set[socket.socket] = set()
        self.handler_timeout_s = handler_timeout_s
        self._t0 = time.monotonic()
        self._httpd = _HttpServer((host, port), self)
        self.host: str = host
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": _POLL_S},
            name=f"mockmodel-{self.port}",
            daemon=True,
        )
        self._thread.start()

    # ---- addresses -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT` (no trailing slash, no `/v1`)."""
        return f"http://{self.host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """What codex's `[model_providers.X] base_url` wants: `http://127.0.0.1:PORT/v1`."""
        return f"{self.base_url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """What `ANTHROPIC_BASE_URL` wants: `http://127.0.0.1:PORT` (the client adds `/v1`)."""
        return self.base_url

    # ---- scripting -------------------------------------------------------------------------
    def script(self, *entries: ScriptEntry) -> None:
        """Append turns (or `RecordedRequest -> Turn` callables) to the queue."""
        with self._lock:
            self._queue.extend(entries)

    def clear_script(self) -> None:
        with self._lock:
            self._queue.clear()

    @property
    def pending(self) -> int:
        """Scripted entries not consumed yet."""
        with self._lock:
            return len(self._queue)

    @property
    def default(self) -> Turn:
        with self._lock:
            return self._default

    @default.setter
    def default(self, turn: Turn) -> None:
        with self._lock:
            self._default = turn

    def release(self) -> None:
        """Let every `Hang` turn in progress finish normally."""
        with self._changed:
            self._release_gen += 1
            self._changed.notify_all()

    # ---- inspection ------------------------------------------------------------------------
    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def model_requests(self) -> list[RecordedRequest]:
        """Only the requests that consumed a turn (`/responses`, `/messages`)."""
        with self._lock:
            return [r for r in self._requests if r.api != "other"]

    def wait_for_requests(
        self, count: int = 1, *, timeout_s: float = 10.0, model_only: bool = True
    ) -> list[RecordedRequest]:
        """Block until at least `count` (model) requests arrived; TimeoutError otherwise."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                got = [r for r in self._requests if not model_only or r.api != "other"]
                if len(got) >= count:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"mock model server saw {len(got)} of {count} requests")
                self._changed.wait(min(left, 1.0))

    @property
    def errors(self) -> list[str]:
        """Tracebacks of failures inside the mock (never the peers' fault)."""
        with self._lock:
            return list(self._errors)

    def check(self) -> None:
        """Raise `MockServerError` when the mock itself failed on some request."""
        errors = self.errors
        if errors:
            raise MockServerError("mock model server failed:\n" + "\n".join(errors))

    @property
    def active_connections(self) -> int:
        with self._lock:
            return len(self._active)

    # ---- lifetime --------------------------------------------------------------------------
    def close(self) -> None:
        """Stop serving, abort in-flight streams, close every socket and join every thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._closing.set()
        self.release()
        self._httpd.shutdown()
        with self._lock:
            active = list(self._active)
        for sock in active:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()  # closes the listener and joins the handler threads
        self._thread.join()

    def __enter__(self) -> MockModelServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        if exc_type is None:
            self.check()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "serving"
        return f"<MockModelServer {self.base_url} {state} pending={self.pending}>"

    # ---- internals used by the handler -----------------------------------------------------
    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_mock_{next(self._ids)}"

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            if add:
                self._active.add(sock)
            else:
                self._active.discard(sock)

    def _record_error(self, what: str) -> None:
        log.error("mock model server failure: %s", what)
        with self._lock:
            self._errors.append(what)

    def _admit(
        self,
        method: str,
        path: str,
        query: str,
        headers: Mapping[str, str],
        raw: bytes,
        body: dict[str, Any] | None,
        api: Api,
    ) -> tuple[RecordedRequest, Turn | None]:
        with self._changed:
            record = RecordedRequest(
                index=len(self._requests),
                method=method,
                path=path,
                query=query,
                headers=dict(headers),
                raw_body=raw,
                body=body,
                api=api,
                t=time.monotonic() - self._t0,
            )
            turn: Turn | None = None
            if api != "other":
                entry = self._queue.popleft() if self._queue else self._default
                turn = entry(record) if callable(entry) else entry
                record = replace(record, served=type(turn).__name__)
            self._requests.append(record)
            self._changed.notify_all()
            return record, turn

    def _hang(self, wire: _Wire, timeout_s: float | None) -> HangOutcome:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            gen = self._release_gen
        while True:
            if self._closing.is_set() or wire.client_gone():
                return "gone"
            with self._changed:
                if self._release_gen != gen:
                    return "released"
                if deadline is not None and time.monotonic() >= deadline:
                    return "timeout"
                self._changed.wait(_POLL_S)


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: MockModelServer) -> None:
        self.owner = owner
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind would call socket.getfqdn() (a resolver lookup); skip it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, socket.socket):
            self.owner._track(request, True)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        if isinstance(request, socket.socket):
            self.owner._track(request, False)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.owner._record_error(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.owner.handler_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def _read_body(self) -> bytes:
        if self.headers.get("transfer-encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                parts.append(self.rfile.read(size))
                self.rfile.readline(65537)
            raw = b"".join(parts)
        else:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length > 0 else b""
        encoding = self.headers.get("content-encoding", "").lower()
        if encoding == "gzip":
            raw = gzip.decompress(raw)
        elif encoding == "deflate":
            raw = zlib.decompress(raw)
        return raw

    def _dispatch(self) -> None:
        owner = self.server.owner
        self.close_connection = True
        wire = _Wire(self, owner)
        try:
            raw = self._read_body()
            split = urlsplit(self.path)
            path = split.path
            body: dict[str, Any] | None = None
            if raw:
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict):
                    body = parsed
            api: Api = "other"
            if self.command == "POST" and path.endswith("/responses"):
                api = "responses"
            elif self.command == "POST" and path.endswith("/messages"):
                api = "messages"
            record, turn = owner._admit(
                self.command,
                path,
                split.query,
                {k.lower(): v for k, v in self.headers.items()},
                raw,
                body,
                api,
            )
            if turn is None:
                self._other(wire, record)
            elif api == "responses":
                responses_api.render(turn, record, wire, owner._new_id)
            else:
                messages_api.render(turn, record, wire, owner._new_id)
            wire.finish()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except OSError:
            if not owner._closing.is_set() and not wire.gone:
                owner._record_error(traceback.format_exc())
        except Exception:  # a bug in the mock or the script: make it visible to the test
            owner._record_error(traceback.format_exc())
            if not wire.headers_sent:
                with contextlib.suppress(OSError):
                    wire.send_json(
                        500, {"error": {"message": "mock model server failure", "type": "mock_failure"}}
                    )

    def _other(self, wire: _Wire, record: RecordedRequest) -> None:
        if self.command == "HEAD":
            wire.send_empty(200)
        elif record.path.endswith("/count_tokens"):
            wire.send_json(200, {"input_tokens": max(1, len(record.raw_body) // 4)})
        elif self.command == "GET" and record.path.endswith("/models"):
            wire.send_json(
                200,
                {
                    "object": "list",
                    "data": [],
                    "models": [],
                    "has_more": False,
                    "first_id": None,
                    "last_id": None,
                },
            )
        else:
            wire.send_json(
                404,
                {
                    "type": "error",
                    "error": {"type": "not_found_error", "message": f"mock: no handler for {record.path}"},
                },
            )


class _Wire:
    """`wire.Wire` over one `_Handler`: JSON answers and chunked SSE streams."""

    def __init__(self, handler: _Handler, owner: MockModelServer) -> None:
        self.handler = handler
        self.owner = owner
        self.headers_sent = False
        self.gone = False
        self.chunked = False
        self.was_cut = False

    @property
    def alive(self) -> bool:
        return not self.gone and not self.owner._closing.is_set()

    def _write(self, data: bytes) -> None:
        if self.gone:
            return
        try:
            self.handler.wfile.write(data)
            self.handler.wfile.flush()
        except OSError:
            self.gone = True

    def send_empty(self, status: int) -> None:
        h = self.handler
        h.send_response(status)
        h.send_header("content-length", "0")
        h.send_header("connection", "close")
        h.end_headers()
        self.headers_sent = True
        self._write(b"")

    def send_json(
        self, status: int, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        h = self.handler
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.send_header("connection", "close")
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        self.headers_sent = True
        self._write(data)

    def start_sse(self) -> None:
        h = self.handler
        h.send_response(200)
        h.send_header("content-type", "text/event-stream; charset=utf-8")
        h.send_header("cache-control", "no-cache")
        h.send_header("transfer-encoding", "chunked")
        h.send_header("connection", "close")
        h.end_headers()
        self.headers_sent = True
        self.chunked = True
        self._write(b"")

    def event(self, name: str, data: Mapping[str, Any]) -> None:
        payload = f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
        self._write(b"%x\r\n%s\r\n" % (len(payload), payload))

    def sleep(self, seconds: float) -> bool:
        if self.owner._closing.wait(seconds):
            return False
        if self.client_gone():
            self.gone = True
        return self.alive

    def hang(self, timeout_s: float | None) -> HangOutcome:
        outcome = self.owner._hang(self, timeout_s)
        if outcome == "gone":
            self.gone = True
        return outcome

    def cut(self) -> None:
        self.was_cut = True
        try:
            self.handler.wfile.flush()
            self.handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.gone = True

    def finish(self) -> None:
        if self.chunked and not self.was_cut and self.alive:
            self._write(b"0\r\n\r\n")

    def client_gone(self) -> bool:
        """True when the peer closed its end (checked without consuming anything)."""
        if self.gone:
            return True
        sock: socket.socket = self.handler.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except (OSError, ValueError):
            return True
