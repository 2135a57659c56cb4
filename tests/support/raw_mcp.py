"""A raw MCP client over a real ``subagents mcp`` process: bytes in, bytes out.

The official client cannot send what a hostile client sends (its pydantic models refuse
to encode a lone surrogate), and it hides the server's bytes.  This one writes any JSON
text, reads every frame as bytes (strict UTF-8: a lone surrogate in the server's output
would fail here), and never waits for ever (a reader thread, a deadline per answer).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from tests.conftest import PYTHON

ANSWER_DEADLINE = 120.0


class RawMcp:
    """One server process; :meth:`call` a tool, :meth:`close` ends it (stdin EOF, exit 0)."""

    def __init__(self, *args: str, cwd: Path, stderr: Path, handshake: bool = True) -> None:
        """``handshake=False``: no ``initialize`` (a 2026-07-28 client: every request carries
        its own envelope in ``_meta``)."""
        self._stderr: IO[bytes] = stderr.open("ab")
        self.process = subprocess.Popen(
            [PYTHON, "-m", "supervisor.cli", "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            cwd=cwd,
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._next_id = 0
        self.frames: list[bytes] = []
        if not handshake:
            return
        answer = self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        )
        assert "result" in answer, answer
        self.send_text(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def send_text(self, text: str) -> None:
        """One frame, as given (``\\ud800`` escapes and all), encoded as UTF-8."""
        assert self.process.stdin is not None
        self.process.stdin.write(text.encode("utf-8") + b"\n")
        self.process.stdin.flush()

    def request(
        self, method: str, params: dict[str, Any], *, raw_params: str | None = None
    ) -> dict[str, Any]:
        """Send a request and return its answer (notifications in between are kept in ``frames``).

        ``raw_params`` replaces the encoded params verbatim (JSON text a model cannot hold).
        """
        self._next_id += 1
        request_id = self._next_id
        params_text = raw_params if raw_params is not None else json.dumps(params)
        self.send_text(
            f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "{method}", "params": {params_text}}}'
        )
        while True:
            line = self._lines.get(timeout=ANSWER_DEADLINE)
            assert line, "the server closed its stdout"
            self.frames.append(line)
            frame: dict[str, Any] = json.loads(line.decode("utf-8"))  # strict UTF-8
            if frame.get("id") == request_id:
                return frame

    def send(self, method: str, params: dict[str, Any]) -> int:
        """Send a request without waiting for its answer (a stream: ``subscriptions/listen``)."""
        self._next_id += 1
        self.send_text(
            json.dumps({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        )
        return self._next_id

    def until(self, wanted: Any) -> dict[str, Any]:
        """Read frames (kept in ``frames``) until one for which ``wanted(frame)`` is true."""
        while True:
            line = self._lines.get(timeout=ANSWER_DEADLINE)
            assert line, "the server closed its stdout"
            self.frames.append(line)
            frame: dict[str, Any] = json.loads(line.decode("utf-8"))
            if wanted(frame):
                return frame

    def call(self, tool: str, arguments_json: str) -> dict[str, Any]:
        """``tools/call`` with the arguments given as JSON text; the tool's result."""
        answer = self.request(
            "tools/call", {}, raw_params=f'{{"name": "{tool}", "arguments": {arguments_json}}}'
        )
        assert "result" in answer, answer  # a tool error is a result, never a protocol error
        result: dict[str, Any] = answer["result"]
        return result

    def close(self) -> int:
        """Close stdin (the client goes away) and wait for the server's exit status."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.close()
            return self.process.wait(timeout=ANSWER_DEADLINE)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(timeout=10)
            assert self.process.stdout is not None
            self.process.stdout.close()
            self._stderr.close()


RESULT_META_KEY = "subagent-supervisor/result"


def facts(result: dict[str, Any]) -> Any:
    """A raw tool result's machine-readable facts (its ``_meta``; never ``structuredContent``)."""
    assert "structuredContent" not in result  # a model would read it instead of the answer
    return result["_meta"][RESULT_META_KEY]
