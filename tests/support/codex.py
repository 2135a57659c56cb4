"""Shared pieces of the codex tests: a frame recorder, providers, the stand-in, mock turns."""

from __future__ import annotations

import json
import os
import stat
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from supervisor import Registry, Run, SubagentRequest, SubagentResult
from supervisor.process import RUN_TAG_VARIABLE
from supervisor.providers.codex import Config, Provider
from tests.conftest import CHILDREN, PYTHON
from tests.mockmodel import RecordedRequest, Text, Turn, TurnFactory, responses_api
from tests.support.codex_schema import Direction, Frame
from tests.support.peers import PeerLaunch

STANDIN = CHILDREN / "codex_standin.py"
MCP_SERVER = CHILDREN / "codex_mcp_server.py"
STANDIN_THREAD = "01a228c9-0000-7000-8000-00000000thrd"
STANDIN_TURN = "01a228c9-0000-7000-8000-00000000turn"
FAST = {"dispose_eof_grace_ms": 1000, "dispose_grace_ms": 1000}


class Transcript:
    """Records every JSON-RPC frame a provider sends or receives; tests wait on frames."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.by_run: dict[str, list[Frame]] = {}
        self._waiters: list[tuple[Callable[[Direction, Mapping[str, Any]], bool], anyio.Event]] = []

    def tap(self, run_id: str, direction: Direction, frame: Mapping[str, Any]) -> None:
        self.frames.append((direction, frame))
        self.by_run.setdefault(run_id, []).append((direction, frame))
        for predicate, event in self._waiters:
            if not event.is_set() and predicate(direction, frame):
                event.set()

    async def wait_for(
        self, predicate: Callable[[Direction, Mapping[str, Any]], bool], *, limit: float = 20
    ) -> None:
        event = anyio.Event()
        self._waiters.append((predicate, event))
        if any(predicate(d, f) for d, f in self.frames):
            event.set()
        with anyio.fail_after(limit):
            await event.wait()

    async def wait_method(self, method: str, direction: Direction = "recv", **params: Any) -> None:
        def match(d: Direction, f: Mapping[str, Any]) -> bool:
            if d != direction or f.get("method") != method:
                return False
            got = f.get("params") or {}
            return all(_dig(got, key) == value for key, value in params.items())

        await self.wait_for(match)

    def sent(self, method: str) -> list[Mapping[str, Any]]:
        return [f for d, f in self.frames if d == "send" and f.get("method") == method]

    def received(self, method: str) -> list[Mapping[str, Any]]:
        return [f for d, f in self.frames if d == "recv" and f.get("method") == method]

    def results(self, method: str) -> list[Any]:
        """The results the server gave to our ``method`` requests (every run), in order."""
        found = []
        for frames in self.by_run.values():
            ids = {f["id"] for d, f in frames if d == "send" and f.get("method") == method}
            found += [f["result"] for d, f in frames if d == "recv" and "result" in f and f.get("id") in ids]
        return found

    def answers(self) -> list[Mapping[str, Any]]:
        """Our responses to the server's requests, in order."""
        return [f for d, f in self.frames if d == "send" and "method" not in f]

    def server_requests(self) -> list[Mapping[str, Any]]:
        return [f for d, f in self.frames if d == "recv" and "method" in f and "id" in f]


def _dig(params: Mapping[str, Any], dotted: str) -> Any:
    value: Any = params
    for part in dotted.split("__"):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def provider(
    launch: PeerLaunch, transcript: Transcript | None = None, *, name: str | None = None, **keys: Any
) -> Provider:
    """A codex provider for the real app-server of ``launch``."""
    settings: dict[str, Any] = {**FAST, "stderr": "log", **keys}
    config = Config(codex_path=Path(launch.argv[0]), env=dict(launch.env), **settings)
    return Provider(config, name=name, tap=transcript.tap if transcript else None)


def standin_binary(tmp_path: Path) -> Path:
    """An executable that execs the stand-in (codex_path must name an executable file)."""
    path = tmp_path / "codex-standin"
    path.write_text(f'#!/bin/sh\nexec "{PYTHON}" "{STANDIN}" "$@"\n', encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def standin(
    tmp_path: Path,
    transcript: Transcript | None = None,
    *,
    script: list[dict[str, Any]] | None = None,
    startup: str = "ok",
    env: Mapping[str, str] | None = None,
    **keys: Any,
) -> Provider:
    """A codex provider whose "app-server" is the scripted stand-in."""
    child_env: dict[str, str | None] = {
        "CODEX_STANDIN_SCRIPT": json.dumps(script or []),
        "CODEX_STANDIN_STARTUP": startup,
        **(env or {}),
    }
    settings: dict[str, Any] = {**FAST, "stderr": "log", **keys}
    config = Config(codex_path=standin_binary(tmp_path), env=child_env, **settings)
    return Provider(config, tap=transcript.tap if transcript else None)


def request(cwd: Path, task: str = "say hello") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=cwd)


async def run_once(codex: Provider, cwd: Path, task: str = "say hello") -> tuple[SubagentResult, Run]:
    registry = Registry()
    registry.register(codex)
    async with registry.run(codex.name, request(cwd, task)) as run:
        result = await run.result()
    return result, run


# -- stand-in script steps -------------------------------------------------------------------


def notify(method: str, **params: Any) -> dict[str, Any]:
    return {"notify": method, "params": params}


def agent_message(text: str, phase: str | None = None, item_id: str = "msg_1") -> dict[str, Any]:
    item = {"type": "agentMessage", "id": item_id, "text": text, "phase": phase}
    return notify("item/completed", item=item, threadId="$THREAD", turnId="$TURN", completedAtMs=1)


def status_item(kind: str, status: str, item_id: str = "call_1") -> dict[str, Any]:
    item: dict[str, Any] = {"type": kind, "id": item_id, "status": status}
    if kind == "commandExecution":
        item.update(command="/bin/bash -lc true", commandActions=[], cwd="/")
    else:
        item.update(changes=[])
    return notify("item/completed", item=item, threadId="$THREAD", turnId="$TURN", completedAtMs=1)


def turn_completed(
    status: str = "completed", error: Any = None, turn_id: str = "$TURN", thread_id: str = "$THREAD"
) -> dict[str, Any]:
    turn = {"id": turn_id, "items": [], "itemsView": "notLoaded", "status": status, "error": error}
    return notify("turn/completed", threadId=thread_id, turn=turn)


def turn_error(info: Any, message: str = "SECRET upstream detail") -> dict[str, Any]:
    return {"message": message, "codexErrorInfo": info, "additionalDetails": None}


# -- mock model turns --------------------------------------------------------------------------


def is_guardian(request: RecordedRequest) -> bool:
    """Codex's automatic approval reviewer (``approvalsReviewer: auto_review``) asks the model too."""
    metadata = (request.body or {}).get("client_metadata") or {}
    return isinstance(metadata, dict) and metadata.get("x-openai-subagent") == "guardian"


def guarded(outcome: str, *turns: Turn | TurnFactory) -> list[TurnFactory]:
    """Script entries: the reviewer's requests get ``outcome`` (allow|deny); the agent's
    requests get ``turns`` in order (then ``Text("done")``); a turn that is a factory is
    called with the agent's request."""
    queue = deque(turns)

    def pick(request: RecordedRequest) -> Turn:
        if is_guardian(request):
            verdict = {
                "outcome": outcome,
                "risk_level": "low",
                "user_authorization": "high",
                "rationale": "test",
            }
            return Text(json.dumps(verdict))
        if not queue:
            return Text("done")
        turn = queue.popleft()
        return turn(request) if callable(turn) else turn

    return [pick] * (2 * len(turns) + 6)


@contextmanager
def namespaced_tool_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Let ``ToolCall("ns::tool", ...)`` emit a Responses API call with ``namespace: "ns"``.

    Codex 0.171 advertises MCP tools as a namespace (``mcp__<server>``) and only runs a
    call that names it; the mock's ``ToolCall`` has no namespace field yet.
    """
    original = responses_api._Response.function_call

    def function_call(self: Any, name: str, arguments: dict[str, Any]) -> None:
        if "::" not in name:
            original(self, name, arguments)
            return
        namespace, tool = name.split("::", 1)
        item = {
            "type": "function_call",
            "id": self.new_id("fc"),
            "call_id": self.new_id("call"),
            "name": tool,
            "namespace": namespace,
            "arguments": json.dumps(arguments),
            "status": "completed",
        }
        index = len(self.output)
        self.output.append(item)
        self.emit("response.output_item.done", output_index=index, item=item)

    monkeypatch.setattr(responses_api._Response, "function_call", function_call)
    yield


def mcp_server_overrides() -> list[str]:
    """``-c`` overrides that give the app-server the test MCP server (an ``ask`` tool)."""
    return [
        f"mcp_servers.elicit.command={json.dumps(PYTHON)}",
        f"mcp_servers.elicit.args=[{json.dumps(str(MCP_SERVER))}]",
    ]


# -- processes -----------------------------------------------------------------------------------


def tagged_processes(run_id: str) -> list[psutil.Process]:
    """Live processes carrying the run's tag (the app-server and every descendant)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(RUN_TAG_VARIABLE) == run_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def kill(pid: int, sig: int) -> None:
    os.kill(pid, sig)
