"""The flush at exit is bounded as a whole by the export timeout (an unreachable collector never
holds the host).

A real collector on 127.0.0.1 that accepts the export and then trickles its answer, one
byte every half second, for ever: each read of the HTTP client succeeds well within its
timeout, so only a bound on the whole flush ends it.  Before, the CLI waited for the
SDK's 30 s worker join.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CHILDREN, PYTHON
from tests.telemetry.test_otlp import subagents

ACP_ARGV = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]
# The CLI must be gone this long after the collector got the export.  The bound is the
# export timeout (3 s by default, 1 s below); the SDK's own wait was 30 s.
EXIT_WITHIN = 15.0


class TricklingCollector:
    """Reads a request, answers its status line and headers, then one byte at a time."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.received = threading.Event()
        self.received_at = 0.0
        self.stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def serve(self) -> None:
        self.listener.settimeout(0.2)
        while not self.stop.is_set():
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._trickle, args=(connection,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _trickle(self, connection: socket.socket) -> None:
        with connection:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = connection.recv(65536)
                if not chunk:
                    return
                data += chunk
            self.received_at = time.monotonic()
            self.received.set()
            try:
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n"
                )
                while not self.stop.wait(0.5):  # a byte now and then: no read ever times out
                    connection.sendall(b"\0")
            except OSError:  # the client gave up and closed
                return

    def close(self, server: threading.Thread) -> None:
        self.stop.set()
        server.join(timeout=5)  # it sees the stop within its accept timeout
        for thread in self._threads:
            thread.join(timeout=5)
        self.listener.close()


@pytest.fixture
def collector() -> Iterator[TricklingCollector]:
    collector = TricklingCollector()
    server = threading.Thread(target=collector.serve, daemon=True)
    server.start()
    try:
        yield collector
    finally:
        collector.close(server)


@pytest.mark.parametrize("timeout", [None, "1"], ids=["default-timeout", "OTEL_EXPORTER_OTLP_TIMEOUT=1"])
def test_a_collector_that_trickles_its_answer_delays_the_exit_by_at_most_the_export_timeout(
    collector: TricklingCollector, tmp_path: Path, timeout: str | None
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = collector.endpoint
    if timeout is not None:
        env["OTEL_EXPORTER_OTLP_TIMEOUT"] = timeout
    cli = subprocess.Popen(
        [*subagents(), "run", "--otel", "--json", "hello", "--", *ACP_ARGV],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert collector.received.wait(timeout=120), "the CLI never exported its span"
        remaining = EXIT_WITHIN - (time.monotonic() - collector.received_at)
        stdout, stderr = cli.communicate(timeout=max(remaining, 0.1))
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    assert cli.returncode == 0, stderr
    assert b'"stop_reason": "completed"' in stdout
    assert b"Traceback" not in stderr
