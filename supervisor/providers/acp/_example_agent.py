#!/usr/bin/env python3
"""The built-in example ACP agent: keyless, deterministic, stdlib only.

``subagents run "say hello"`` supervises this script when no other agent is configured. It speaks ACP
protocol version 1 (NDJSON JSON-RPC 2.0 on stdin/stdout), has no model behind it and needs no key. It
is run as a plain file (``python _example_agent.py``), never imported through the ``supervisor``
package, and imports nothing outside the standard library, so ``initialize`` is answered within a few
tens of milliseconds of spawn.

Methods:

- ``initialize``: protocol version 1, no optional capabilities, no auth methods, agent info
  ``subagent-supervisor-example``.
- ``session/new``: mints a session id and remembers the ``cwd`` (a non-absolute ``cwd`` is answered
  with JSON-RPC error -32602).
- ``session/prompt``: streams a deterministic answer as ``agent_message_chunk`` text updates, then
  answers ``{"stopReason": "end_turn"}``. ``say hello`` gets a greeting, anything else an echo. A
  session remembers what it was asked, so a conversation (several prompts on one session) can
  ask for it back with ``@recall``.
- ``session/cancel``: the pending prompt stops streaming and answers ``cancelled``.
- ``session/resume`` and ``session/load`` (only with a sessions directory, below): continue a
  session an earlier process of this agent kept.  ``session/resume`` answers ``{}`` at once;
  ``session/load`` first replays the session's history as ``session/update`` notifications
  (each earlier task as a ``user_message_chunk``, each answer as an ``agent_message_chunk``,
  and the cumulative cost as a ``usage_update`` when ``@usage`` counted any), then answers
  ``{}``.  An unknown session id is answered with JSON-RPC error -32002 (resource not found).
- stdin EOF: the agent exits 0 at once.

Sessions directory: with ``SUBAGENT_EXAMPLE_SESSIONS=DIR`` (or ``--sessions DIR``; an absolute
path to an existing directory) the agent keeps each session in ``DIR/<session id>.json``
(its cwd, what it was asked and answered, its token count), written after every turn, and
advertises ``loadSession`` and ``sessionCapabilities.resume`` in ``initialize``.
``SUBAGENT_EXAMPLE_OFFER`` (a comma-separated subset of ``resume,load``; default both) narrows
what it advertises and answers, so a client's fallback (``load``) or refusal (empty) can be
shown.  Without a directory it advertises neither and answers both with -32601.

Directives: a line of the task text that is exactly one of these is obeyed and left out of the echo
(any other line, ``@`` or not, is plain task text):

- ``@permission KIND``: before answering, ask ``session/request_permission`` for a tool call of ACP
  kind KIND (sent verbatim, so an out-of-vocabulary kind can be tried) that would write
  ``subagent-example.txt`` into the session cwd, offering ``allow-once`` (allow_once),
  ``allow-always`` (allow_always) and ``reject-once`` (reject_once). The answer is reported as text
  after the reply; an allow option writes the file; a ``cancelled`` outcome (what a client's reject
  policy sends) ends the turn ``cancelled``.
- ``@slow MS``: wait MS milliseconds between streamed chunks (a cancel interrupts the wait).
- ``@stop REASON``: end the turn with stop reason REASON, verbatim (e.g. ``max_tokens``,
  ``refusal``, ``max_turn_requests``, or an out-of-vocabulary value).
- ``@fail``: after streaming, answer the prompt with a JSON-RPC error (-32603) instead of a result.
- ``@exit CODE``: after streaming, exit with status CODE (0-255) without answering the prompt.
- ``@recall``: answer with what was asked earlier in this session instead of an echo.
- ``@tools KIND[*N][,KIND[*N]...]``: before answering, "work": send a ``plan`` with one entry per
  tool call, then for each call a ``tool_call`` (``pending``) and two ``tool_call_update``
  notifications (``in_progress``, then ``completed``), each followed by the plan with that
  entry's status (no plan for more than 50 calls); KIND is an ACP ``ToolKind``, sent
  verbatim; ``*N`` repeats it N times (at most 100,000 calls in all); ``@slow`` waits before
  each call too.  Nothing is run: it
  shows a client's progress display at work.
- ``@usage``: report usage: the prompt response carries ``usage`` (input tokens: the task's words;
  output tokens: the answer's words) and a ``usage_update`` notification before it carries the
  session's cumulative cost in USD (0.0001 per token).

The same behaviours can be preset through the environment (a directive in the task wins):
``SUBAGENT_EXAMPLE_PERMISSION=KIND``, ``SUBAGENT_EXAMPLE_SLOW_MS=MS``, ``SUBAGENT_EXAMPLE_STOP=REASON``,
``SUBAGENT_EXAMPLE_FAIL=1``, ``SUBAGENT_EXAMPLE_EXIT=CODE``, ``SUBAGENT_EXAMPLE_RECALL=1``,
``SUBAGENT_EXAMPLE_USAGE=1``, ``SUBAGENT_EXAMPLE_TOOLS=KIND[*N],...``. Malformed values are ignored.
Precedence
at the end of a turn: cancel, then exit, then fail, then stop.
"""

from __future__ import annotations

import copy
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterable, Mapping
from typing import Any, BinaryIO, NoReturn

JsonObject = dict[str, Any]

PROTOCOL_VERSION = 1
AGENT_NAME = "subagent-supervisor-example"
AGENT_VERSION = "0.1.0"
OUTPUT_FILE = "subagent-example.txt"
OPTIONS: list[JsonObject] = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]
ALLOW_OPTIONS = frozenset({"allow-once", "allow-always"})
GREETINGS = frozenset({"say hello", "say hi", "hello", "hi"})
_DIRECTIVE = re.compile(r"@(permission|slow|stop|fail|exit|recall|usage|tools)(?:[ \t]+(\S+))?")
_FLAGS = ("fail", "recall", "usage")
COST_PER_TOKEN = 0.0001
_CHUNK = re.compile(r"\s*\S+\s*")
_SESSION_ID = re.compile(r"example-[0-9a-f]{16}")
SESSION_METHODS = ("resume", "load")
_TOOL = re.compile(r"([a-z_]+)(?:\*([0-9]{1,6}))?")
MAX_TOOL_CALLS = 100_000
MAX_PLANNED = 50


def parse_tools(value: str) -> list[str] | None:
    """``KIND[*N],...`` as the list of kinds, one per call; None when malformed."""
    kinds: list[str] = []
    for item in value.split(","):
        match = _TOOL.fullmatch(item)
        if match is None:
            return None
        kinds.extend([match[1]] * int(match[2] or 1))
    return kinds if len(kinds) <= MAX_TOOL_CALLS else None


class Directives:
    """What a turn has been told to do besides answering."""

    def __init__(self) -> None:
        self.permission: str | None = None
        self.slow_ms = 0
        self.stop = "end_turn"
        self.fail = False
        self.recall = False
        self.usage = False
        self.exit_code: int | None = None
        self.tools: list[str] = []

    def apply(self, name: str, value: str | None) -> bool:
        """Apply one directive; False (and nothing changed) when its value is malformed."""
        number = int(value) if value is not None and value.isdigit() else None
        if name in _FLAGS and value in (None, "0", "1"):
            setattr(self, name, value != "0")
        elif name == "permission" and value:
            self.permission = value
        elif name == "stop" and value:
            self.stop = value
        elif name == "slow" and number is not None:
            self.slow_ms = number
        elif name == "exit" and number is not None and number <= 255:
            self.exit_code = number
        elif name == "tools" and value and (tools := parse_tools(value)) is not None:
            self.tools = tools
        else:
            return False
        return True

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Directives:
        directives = cls()
        for name in ("permission", "slow", "stop", "fail", "exit", "recall", "usage", "tools"):
            key = "SUBAGENT_EXAMPLE_" + ("SLOW_MS" if name == "slow" else name.upper())
            if value := env.get(key, "").strip():
                directives.apply(name, value)
        return directives


def parse_task(text: str, defaults: Directives) -> tuple[str, Directives]:
    """Split the task text into the text to echo and the turn's directives."""
    directives = copy.copy(defaults)
    kept: list[str] = []
    for line in text.splitlines():
        match = _DIRECTIVE.fullmatch(line.strip())
        if match is None or not directives.apply(match[1], match[2]):
            kept.append(line)
    return "\n".join(kept).strip(), directives


def recall_answer(history: list[str]) -> str:
    """The answer to ``@recall``: what this session was asked before."""
    if not history:
        return "Nothing was asked earlier in this session."
    return "Earlier in this session you asked: " + "; ".join(history)


def words(text: str) -> int:
    return len(text.split())


def compose_answer(task: str) -> str:
    """The deterministic answer to a task."""
    if task.lower().rstrip("!. ") in GREETINGS:
        return (
            "Hello! I'm the subagent-supervisor example agent: no model, no key, just a fixed reply. "
            "Add `-- COMMAND ARGS...` to `subagents run` to supervise a real ACP agent."
        )
    if not task:
        return "Hello! You sent me directives but no task."
    return f"Hello! You asked: {task}"


class ExampleAgent:
    """One ACP connection: a reader loop on the main thread, one worker thread per prompt."""

    def __init__(
        self,
        out: BinaryIO,
        defaults: Directives,
        *,
        sessions_dir: str | None = None,
        offer: frozenset[str] = frozenset(SESSION_METHODS),
    ) -> None:
        self._out = out
        self._defaults = defaults
        self._sessions_dir = sessions_dir
        self._offer = offer if sessions_dir is not None else frozenset()
        self._out_lock = threading.Lock()
        self._cond = threading.Condition()
        self._sessions: dict[str, str] = {}
        self._history: dict[str, list[str]] = {}
        self._answers: dict[str, list[str]] = {}
        self._tokens: dict[str, int] = {}
        self._cancelled: set[str] = set()
        self._waiting: set[int] = set()
        self._responses: dict[int, JsonObject] = {}
        self._next_id = 0

    # wire

    def _send(self, message: JsonObject) -> None:
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        with self._out_lock:
            try:
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, ValueError):
                os._exit(0)  # the client is gone

    def _result(self, rid: Any, result: JsonObject) -> None:
        self._send({"jsonrpc": "2.0", "id": rid, "result": result})

    def _error(self, rid: Any, code: int, message: str, details: str | None = None) -> None:
        error: JsonObject = {"code": code, "message": message}
        if details is not None:
            error["data"] = {"details": details}
        self._send({"jsonrpc": "2.0", "id": rid, "error": error})

    def _update(self, session_id: str, update: JsonObject) -> None:
        params = {"sessionId": session_id, "update": update}
        self._send({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def serve(self, lines: Iterable[bytes]) -> None:
        """Handle frames until stdin EOF."""
        for raw in lines:
            if not raw.strip():
                continue
            try:
                message = json.loads(raw)
            except ValueError:
                self._error(None, -32700, "Parse error")
                continue
            if isinstance(message, dict):
                self._dispatch(message)
            else:
                self._error(None, -32600, "Invalid Request")

    def shutdown(self) -> NoReturn:
        with self._out_lock:
            try:
                self._out.flush()
            finally:
                os._exit(0)

    def _dispatch(self, message: JsonObject) -> None:
        method, rid = message.get("method"), message.get("id")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method is None:
            if isinstance(rid, int):
                with self._cond:
                    if rid in self._waiting:
                        self._responses[rid] = message
                        self._cond.notify_all()
        elif "id" not in message:
            if method == "session/cancel":
                with self._cond:
                    self._cancelled.add(str(params.get("sessionId")))
                    self._cond.notify_all()
        elif method == "initialize":
            self._initialize(rid, params)
        elif method == "session/new":
            self._new_session(rid, params)
        elif method in ("session/resume", "session/load") and method.removeprefix("session/") in self._offer:
            self._continue_session(rid, params, replay=method == "session/load")
        elif method == "session/prompt":
            threading.Thread(target=self._prompt, args=(rid, params), daemon=True).start()
        else:
            self._error(rid, -32601, "Method not found")

    # agent methods

    def _initialize(self, rid: Any, params: JsonObject) -> None:
        if not isinstance(params.get("protocolVersion"), int):
            self._error(rid, -32602, "Invalid params", "protocolVersion must be an integer")
            return
        self._result(
            rid,
            {
                "protocolVersion": PROTOCOL_VERSION,
                "agentCapabilities": {
                    "loadSession": "load" in self._offer,
                    "promptCapabilities": {"image": False, "audio": False, "embeddedContext": False},
                    "sessionCapabilities": {"resume": {}} if "resume" in self._offer else {},
                },
                "authMethods": [],
                "agentInfo": {"name": AGENT_NAME, "title": "Example agent", "version": AGENT_VERSION},
            },
        )

    def _new_session(self, rid: Any, params: JsonObject) -> None:
        cwd = params.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            self._error(rid, -32602, "Invalid params", "cwd must be an absolute path")
            return
        session_id = "example-" + os.urandom(8).hex()
        with self._cond:
            self._sessions[session_id] = cwd
            self._history[session_id] = []
            self._answers[session_id] = []
            self._tokens[session_id] = 0
        self._result(rid, {"sessionId": session_id})

    def _continue_session(self, rid: Any, params: JsonObject, *, replay: bool) -> None:
        """``session/resume`` (``replay`` false) or ``session/load``: a kept session, again."""
        cwd, session_id = params.get("cwd"), params.get("sessionId")
        if not isinstance(cwd, str) or not os.path.isabs(cwd):
            self._error(rid, -32602, "Invalid params", "cwd must be an absolute path")
            return
        kept = self._read_session(session_id)
        if kept is None or not isinstance(session_id, str):
            self._error(rid, -32002, "Resource not found", "no such session")
            return
        history, answers, tokens = kept
        with self._cond:
            self._sessions[session_id] = cwd
            self._history[session_id] = list(history)
            self._answers[session_id] = list(answers)
            self._tokens[session_id] = tokens
        if replay:
            for task, answer in zip(history, answers, strict=False):
                self._update(session_id, {"sessionUpdate": "user_message_chunk", "content": _text(task)})
                self._update(session_id, {"sessionUpdate": "agent_message_chunk", "content": _text(answer)})
            if tokens:
                self._update(session_id, self._usage_update(tokens))
        self._result(rid, {})

    # kept sessions

    def _session_path(self, session_id: object) -> str | None:
        if self._sessions_dir is None or not isinstance(session_id, str):
            return None
        if _SESSION_ID.fullmatch(session_id) is None:  # never a path of the client's choosing
            return None
        return os.path.join(self._sessions_dir, session_id + ".json")

    def _read_session(self, session_id: object) -> tuple[list[str], list[str], int] | None:
        path = self._session_path(session_id)
        if path is None:
            return None
        try:
            with open(path, encoding="utf-8") as file:
                kept = json.load(file)
        except (OSError, ValueError):
            return None
        history, answers, tokens = kept.get("history"), kept.get("answers"), kept.get("tokens")
        if not (isinstance(history, list) and isinstance(answers, list) and isinstance(tokens, int)):
            return None
        if not all(isinstance(item, str) for item in [*history, *answers]):
            return None
        return history, answers, tokens

    def _keep_session(self, session_id: str) -> None:
        """Write the session's state (atomically: a crash never leaves half a file)."""
        path = self._session_path(session_id)
        if path is None:
            return
        with self._cond:
            kept = {
                "cwd": self._sessions.get(session_id),
                "history": list(self._history.get(session_id, [])),
                "answers": list(self._answers.get(session_id, [])),
                "tokens": self._tokens.get(session_id, 0),
            }
        directory = os.path.dirname(path)
        try:
            fd, temporary = tempfile.mkstemp(dir=directory, prefix=".session-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(kept, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError:
            pass  # a session that cannot be kept is still served in this process

    def _prompt(self, rid: Any, params: JsonObject) -> None:
        session_id = params.get("sessionId")
        with self._cond:
            cwd = self._sessions.get(session_id) if isinstance(session_id, str) else None
            self._cancelled.discard(str(session_id))
        if cwd is None or not isinstance(session_id, str):
            self._error(rid, -32602, "Invalid params", "unknown sessionId")
            return
        blocks = params.get("prompt")
        texts = [
            block["text"]
            for block in (blocks if isinstance(blocks, list) else [])
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
        ]
        task, directives = parse_task("\n".join(texts), self._defaults)
        delay = directives.slow_ms / 1000
        with self._cond:
            history = self._history.setdefault(session_id, [])
            answer = recall_answer(list(history)) if directives.recall else compose_answer(task)
            if task:
                history.append(task)
                self._answers.setdefault(session_id, []).append(answer)
        finished = self._work(session_id, directives.tools, delay)
        finished = finished and self._stream(session_id, answer, delay)
        if finished and directives.permission is not None:
            report, finished = self._use_tool(session_id, cwd, directives.permission)
            finished = self._stream(session_id, "\n\n" + report, delay) and finished
        cancelled = not finished or self._is_cancelled(session_id)
        counted = directives.usage and not cancelled and directives.exit_code is None and not directives.fail
        usage = self._usage(session_id, task, answer) if counted else None
        self._keep_session(session_id)  # before the answer: a client may be killed once it has it
        if cancelled:
            self._result(rid, {"stopReason": "cancelled"})
        elif directives.exit_code is not None:
            with self._out_lock:
                self._out.flush()
                os._exit(directives.exit_code)
        elif directives.fail:
            self._error(rid, -32603, "Internal error", "the example agent was told to fail")
        elif usage is not None:
            self._result(rid, {"stopReason": directives.stop, "usage": usage})
        else:
            self._result(rid, {"stopReason": directives.stop})

    def _usage(self, session_id: str, task: str, answer: str) -> JsonObject:
        """This turn's token counts; the session's cumulative cost goes out as a ``usage_update``."""
        used_in, used_out = words(task), words(answer)
        with self._cond:
            self._tokens[session_id] = total = self._tokens.get(session_id, 0) + used_in + used_out
        self._update(session_id, self._usage_update(total))
        return {"inputTokens": used_in, "outputTokens": used_out, "totalTokens": used_in + used_out}

    @staticmethod
    def _usage_update(total: int) -> JsonObject:
        """The session's cumulative usage and cost (``total`` tokens so far)."""
        cost = {"amount": round(total * COST_PER_TOKEN, 6), "currency": "USD"}
        return {"sessionUpdate": "usage_update", "used": total, "size": 200000, "cost": cost}

    # turn helpers

    def _is_cancelled(self, session_id: str, wait: float = 0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: session_id in self._cancelled, timeout=wait)

    def _work(self, session_id: str, kinds: list[str], delay: float) -> bool:
        """Report a plan and its tool calls (nothing is run); False when cancelled first."""
        if not kinds:
            return True
        steps = [
            {"content": f"Step {n + 1}: {kind}", "priority": "medium", "status": "pending"}
            for n, kind in enumerate(kinds)
        ]
        planned = len(kinds) <= MAX_PLANNED
        if planned:
            self._update(session_id, {"sessionUpdate": "plan", "entries": steps})
        for n, kind in enumerate(kinds):
            if self._is_cancelled(session_id, delay):
                return False
            call = f"example-tool-{n}"
            title = f"Step {n + 1}: {kind}"
            self._update(
                session_id,
                {
                    "sessionUpdate": "tool_call",
                    "toolCallId": call,
                    "title": title,
                    "kind": kind,
                    "status": "pending",
                },
            )
            for status in ("in_progress", "completed"):
                self._update(
                    session_id, {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status}
                )
                steps[n]["status"] = status
                if planned:
                    self._update(session_id, {"sessionUpdate": "plan", "entries": steps})
        return True

    def _stream(self, session_id: str, text: str, delay: float) -> bool:
        """Send text word by word; False when the turn was cancelled first."""
        for index, chunk in enumerate(_CHUNK.findall(text) or [text]):
            if self._is_cancelled(session_id, delay if index else 0):
                return False
            content = {"type": "text", "text": chunk}
            self._update(session_id, {"sessionUpdate": "agent_message_chunk", "content": content})
        return True

    def _use_tool(self, session_id: str, cwd: str, kind: str) -> tuple[str, bool]:
        """Ask permission to write the example file: the text to report, and False if the turn ends."""
        with self._cond:
            rid = self._next_id
            self._next_id += 1
            self._waiting.add(rid)
        tool_call = {
            "toolCallId": f"example-call-{rid}",
            "title": f"Write {OUTPUT_FILE}",
            "kind": kind,
            "status": "pending",
            "rawInput": {"path": OUTPUT_FILE},
        }
        params = {"sessionId": session_id, "toolCall": tool_call, "options": OPTIONS}
        self._send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": params})
        with self._cond:
            self._cond.wait_for(lambda: rid in self._responses or session_id in self._cancelled)
            self._waiting.discard(rid)
            response = self._responses.pop(rid, None)
        if response is None:
            return "The turn was cancelled while I waited for permission; nothing was written.", False
        result = response.get("result")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if not isinstance(outcome, dict):
            return f"The permission request for {kind} failed; nothing was written.", True
        if outcome.get("outcome") == "cancelled":
            return f"The permission request for {kind} was cancelled; nothing was written.", False
        option = outcome.get("optionId")
        if outcome.get("outcome") != "selected" or not isinstance(option, str):
            return "I did not understand the permission answer; nothing was written.", True
        if option not in ALLOW_OPTIONS:
            return f"Permission for {kind} denied ({option}); nothing was written.", True
        try:
            with open(os.path.join(cwd, OUTPUT_FILE), "w", encoding="utf-8") as file:
                file.write(f"Written by the {AGENT_NAME} agent.\n")
        except OSError as exc:
            return f"Permission for {kind} granted ({option}), but writing failed: {exc.strerror}.", True
        return f"Permission for {kind} granted ({option}); wrote {OUTPUT_FILE} in the session cwd.", True


def _text(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def sessions_setup(argv: list[str], env: Mapping[str, str]) -> tuple[str | None, frozenset[str]]:
    """The sessions directory (``--sessions DIR``, else ``SUBAGENT_EXAMPLE_SESSIONS``; only an
    absolute path to an existing directory counts) and the session methods it offers."""
    directory = env.get("SUBAGENT_EXAMPLE_SESSIONS", "").strip() or None
    if "--sessions" in argv[:-1]:
        directory = argv[argv.index("--sessions") + 1]
    if directory is not None and not (os.path.isabs(directory) and os.path.isdir(directory)):
        directory = None
    offer = env.get("SUBAGENT_EXAMPLE_OFFER")
    if offer is None:
        return directory, frozenset(SESSION_METHODS)
    return directory, frozenset(part.strip() for part in offer.split(",")) & frozenset(SESSION_METHODS)


def main() -> NoReturn:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the protocol stream
    directory, offer = sessions_setup(sys.argv[1:], os.environ)
    agent = ExampleAgent(out, Directives.from_env(os.environ), sessions_dir=directory, offer=offer)
    agent.serve(sys.stdin.buffer)
    agent.shutdown()


if __name__ == "__main__":
    main()
