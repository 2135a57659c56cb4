"""A fake DSH SDK runtime: NDJSON JSON-RPC on stdio, scripted by ``FAKE_DSH_*`` variables.

Stdlib only; run it as ``python fake_dsh_runtime.py``.  It answers ``initialize``,
``session/prompt`` and ``shutdown`` the way the DSH runtimes speak them,
and by default emits a whole turn *before* the prompt's response (the original fake
does the same): the inbox receipt ``agent/inbox/spliced`` naming ``fake-user-<n>``,
``session.status running``, ``turn/start``, two ``text-delta`` chunks (plus a
``reasoning-delta`` that must not count as output), an ``assistant/message``,
``turn/end``, ``session.status idle``, then ``{messageId}``.  Any other method is
answered ``-32603 unknown method: <m>``.  stdin EOF ends the process (exit 0).

Environment vocabulary (all optional; a flag is on when set to anything but "" or "0"):

Startup and process behaviour
  FAKE_DSH_EXIT_BEFORE_INIT=<code>  exit with <code> (non-integer: 3) before reading anything.
  FAKE_DSH_STDERR=<text>       write <text> (and, with a secret, a line carrying it) to stderr
                               at startup.
  FAKE_DSH_STDERR_AT=<stage>   write FAKE_DSH_STDERR there instead (initialize, prompt or
                               shutdown: when that request arrives), before anything else.
  FAKE_DSH_STDERR_NO_NEWLINE   leave the last stderr line unterminated.
  FAKE_DSH_IGNORE_EOF          on stdin EOF keep running (sleep until signalled).
  FAKE_DSH_TRAP_TERM           ignore SIGTERM; with FAKE_DSH_SIGTERM_FILE=<path>, append
                               "TERM\\n" to <path> at each one.
  FAKE_DSH_CLOSE_STDIN         after reading initialize, close stdin, then answer it and keep
                               running (the client's next write hits a broken pipe).
  FAKE_DSH_RECORD=<path>       append every received line (raw, one per line) to <path>.

initialize
  FAKE_DSH_HANG_INIT           never answer initialize (keep reading stdin).
  FAKE_DSH_INIT_ERROR          answer with JSON-RPC error code 7 whose message and data carry
                               the secret.
  FAKE_DSH_INIT_MALFORMED      answer {"serverInfo": {"name": ...}} without a version.
  FAKE_DSH_SERVER_NAME=<name>  server identity (default deepseek-harness-sdk-runtime).
  FAKE_DSH_SERVER_VERSION=<v>  server version (default 0.0.1).

session/prompt
  FAKE_DSH_READY_FILE=<path>   open <path> for writing and write "ready" when a prompt
                               arrives, before anything else (a FIFO works: it blocks
                               until the test reads it).
  FAKE_DSH_PROMPT_ERROR        answer the prompt with a JSON-RPC error carrying the secret.
  FAKE_DSH_MALFORMED_PROMPT    answer {"message": ...} instead of {"messageId": ...}.
  FAKE_DSH_HANG_PROMPT=silent  never answer and emit nothing.
  FAKE_DSH_HANG_PROMPT=partial answer first, emit the receipt, "running" and the text
                               deltas, then never finish the turn.
  FAKE_DSH_ORDER=before|after  whole turn before the response (default) or the response
                               first, then the turn.
  FAKE_DSH_STALE               before the receipt, emit a stale turn on the same session
                               (a receipt for another message id, an assistant message
                               "stale answer", turn/end completed, idle) that must be skipped.
  FAKE_DSH_TEXT=<text>         final assistant text (default "fake answer").
  FAKE_DSH_DELTAS=<text>       streamed text (default: FAKE_DSH_TEXT), sent as two chunks.
  FAKE_DSH_MESSAGE=normal|empty|none|textless|malformed
                               assistant/message content: the text as two text blocks
                               (default); [] (usage-only step); no message at all; one
                               non-text block (a tool-call: FAKE_DSH_TOOL_CALL_ID, default
                               call-1, FAKE_DSH_TOOL_NAME, default noop); a non-array
                               carrying the secret.
  FAKE_DSH_SPLIT_UTF8          write the assistant/message line in two writes split inside
                               a multibyte UTF-8 sequence (use a non-ASCII FAKE_DSH_TEXT).
  FAKE_DSH_REASON=<kind>[:<cause>]
                               turn end: completed (default), max-tokens, aborted,
                               aborted:<cause> (disposed, user, parent, hook, legacy),
                               blocked, error, interrupted, none (no turn/end at all),
                               malformed (reason is not an object), or any other string
                               sent verbatim as an unknown kind.  error and aborted:hook
                               payloads and unknown kinds carry the secret.
  FAKE_DSH_FIRST_REASON=<kind>[:<cause>]
                               emit an earlier turn (turn/end with this reason) first; the
                               client must report the last one.
  FAKE_DSH_MALFORMED_FRAMES    interleave junk in the turn: non-JSON (with the secret),
                               invalid UTF-8, JSON that is no object, an object that is
                               neither request, response nor notification, notifications
                               with wrong params, an unknown notification, an unmatched
                               response, an unterminated array, a bad root chunk, and a
                               server-to-client request (id "srv-1") the client must answer
                               with -32601.
  FAKE_DSH_DEEP_FRAME=<n>      after turn/start, one line: an array nested <n> deep.
  FAKE_DSH_MALFORMED_EVENT     after the receipt, a root session.event whose event is not an
                               envelope.
  FAKE_DSH_SUBAGENT            emit a session tree: subagent.started root->child, a child
                               assistant message "child answer", subagent.started
                               child->grandchild, a grandchild event, subagent.finished, and
                               an unrelated session's message and idle status.
  FAKE_DSH_OVERSIZE=<bytes>    emit one notification line of about <bytes> bytes mid-turn.
  FAKE_DSH_EXIT_MID_TURN=<code>  after the text deltas, exit with <code> (no idle; with the
                               default order, no response either).

Faults at a stage (<stage> = initialize, prompt or shutdown: when that request arrives)
  FAKE_DSH_CRASH_AT=<stage>    die there: FAKE_DSH_CRASH=<code> (default 1) exits with that
                               status, FAKE_DSH_CRASH=SIG<NAME> kills itself with the signal.
  FAKE_DSH_GARBAGE_AT=<stage>  first write junk lines (not JSON, carrying the secret; invalid
                               UTF-8; a JSON array; a number; {}), then go on as scripted.
  FAKE_DSH_PARTIAL_AT=<stage>  the first frame written from then on goes out only up to its
                               middle, with no newline; then FAKE_DSH_PARTIAL_THEN = exit
                               (default: exit 1), hang (write nothing more; stdin EOF still
                               ends the process) or finish (the rest in a second write).
  FAKE_DSH_HUGE_AT=<stage>     first write one line of FAKE_DSH_HUGE_BYTES bytes (default
                               67108864, i.e. 64 MiB), then go on as scripted.
  FAKE_DSH_CLOSE_STDOUT_AT=<stage>
                               close stdout and write nothing more (the request is not
                               answered); stdin EOF still ends the process.
  FAKE_DSH_FLOOD_AT=<stage>    write FAKE_DSH_FLOOD (default 100000) server-to-client
                               requests without reading, then keep running without reading
                               (a signal ends it).
  FAKE_DSH_CLOSE_STDIN_AT=<stage>
                               close stdin, handle the request as scripted, then keep
                               running without reading (a signal ends it): the client's
                               next write finds a broken pipe.

shutdown
  FAKE_DSH_SHUTDOWN=ok|hang|error|stay
                               answer {} and exit 0 (default); never answer; answer with a
                               JSON-RPC error carrying the secret; answer {} and keep
                               running until EOF.

Per prompt (a conversation's later turns)
  A line ``@<NAME> <value>`` (or ``@<NAME>`` for a flag) in a prompt's text sets
  FAKE_DSH_<NAME> for that prompt only, e.g. ``@TEXT second answer``, ``@REASON error``,
  ``@EXIT_MID_TURN 3``, ``@HANG_PROMPT partial``.
  FAKE_DSH_GATE=<path>         before the turn's assistant message, read one line from
                               <path> (a FIFO: the turn ends when the test writes it).

Secrets
  FAKE_DSH_SECRET=<text>       placed in error messages and data, turn-end payloads,
                               malformed frames and stderr, so sanitisation tests can prove
                               it never reaches a result or an error's text.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

SERVER_NAME = "deepseek-harness-sdk-runtime"


OVERRIDES: dict[str, str] = {}  # the current prompt's own settings


def env(name: str, default: str = "") -> str:
    if name in OVERRIDES:
        return OVERRIDES[name]
    return os.environ.get("FAKE_DSH_" + name, default)


def prompt_overrides(params: dict[str, Any]) -> dict[str, str]:
    """``@NAME value`` lines of a prompt's text blocks."""
    found: dict[str, str] = {}
    blocks = params.get("contentBlocks")
    for block in blocks if isinstance(blocks, list) else []:
        text = block.get("text") if isinstance(block, dict) else None
        for line in text.splitlines() if isinstance(text, str) else []:
            name, _, value = line.strip().partition(" ")
            if name.startswith("@") and name[1:].isupper():
                found[name[1:]] = value or "1"
    return found


def flag(name: str) -> bool:
    return env(name) not in ("", "0")


SECRET = env("SECRET")
OUT = sys.stdout.buffer
STAGES = {"initialize": "initialize", "session/prompt": "prompt", "shutdown": "shutdown"}
DEFAULT_HUGE_BYTES = 64 * 1024 * 1024


class Wire:
    silent = False  # stdout closed, or a half-written frame that must stay half
    partial_armed = False


def write_raw(data: bytes) -> None:
    if Wire.silent:
        return
    OUT.write(data)
    OUT.flush()


def send(frame: dict[str, Any]) -> None:
    # surrogateescape: "\udcff" in a text (an environment value's raw byte) goes out as 0xff
    data = json.dumps(frame, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"
    if Wire.partial_armed:
        Wire.partial_armed = False
        write_half(data)
        return
    write_raw(data)


def write_half(data: bytes) -> None:
    """FAKE_DSH_PARTIAL_AT: half a frame without its newline, then FAKE_DSH_PARTIAL_THEN."""
    middle = len(data) // 2
    write_raw(data[:middle])
    then = env("PARTIAL_THEN", "exit")
    if then == "finish":
        time.sleep(0.02)  # let the first half reach the reader on its own
        write_raw(data[middle:])
    elif then == "hang":
        Wire.silent = True
    else:
        os._exit(1)


def crash() -> None:
    how = env("CRASH", "1")
    if how.startswith("SIG"):
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        sig = signal.Signals[how]
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(5)
    os._exit(int(how))


def fault(stage: str) -> bool:
    """The scripted faults of ``stage``; True when the request must not be handled."""
    if env("STDERR_AT") == stage:
        sys.stderr.write(env("STDERR") + "\n")
        sys.stderr.flush()
    if env("CRASH_AT") == stage:
        crash()
    if env("GARBAGE_AT") == stage:
        junk = [f"not json {SECRET}".encode(), b"\xff\xfe\x80 invalid", b"[1, 2]", b"42", b"{}"]
        write_raw(b"".join(line + b"\n" for line in junk))
    if env("HUGE_AT") == stage:
        write_raw(b"x" * int(env("HUGE_BYTES", str(DEFAULT_HUGE_BYTES))) + b"\n")
    if env("PARTIAL_AT") == stage:
        Wire.partial_armed = True
    if env("CLOSE_STDOUT_AT") == stage:
        Wire.silent = True
        OUT.close()  # sys.stdout's buffer does not own fd 1: close it too
        os.close(1)
        return True
    if env("FLOOD_AT") == stage:
        batch = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": f"flood-{n}", "method": "flood/ask", "params": {}}).encode()
            + b"\n"
            for n in range(int(env("FLOOD", "100000")))
        )
        write_raw(batch)
        while True:
            signal.pause()
    if env("CLOSE_STDIN_AT") == stage:
        os.close(0)
    return False


def respond(request_id: object, result: object) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": result})


def respond_error(request_id: object, code: int, message: str, data: object = None) -> None:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    send({"jsonrpc": "2.0", "id": request_id, "error": error})


def notify(method: str, params: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "method": method, "params": params})


class Session:
    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.seq = 0

    def envelope(self, event_type: str, data: dict[str, Any]) -> dict[str, Any]:
        self.seq += 1
        return {"type": event_type, "seq": self.seq, "time": time.time(), "data": data}

    def event(self, event_type: str, data: dict[str, Any]) -> None:
        notify("session.event", {"sessionId": self.id, "event": self.envelope(event_type, data)})

    def status(self, status: str) -> None:
        notify("session.status", {"sessionId": self.id, "status": status})

    def message(self, content: object, turn: int) -> dict[str, Any]:
        return {
            "turn": turn,
            "step": 1,
            "message": {
                "id": f"assistant-{self.seq}",
                "role": "assistant",
                "content": content,
                "source": {"kind": "model", "provider": "fake", "model": "fake-model"},
            },
        }


def turn_end_reason(spec: str) -> object:
    kind, _, cause = spec.partition(":")
    if kind == "malformed":
        return "completed"
    if kind == "error":
        return {"kind": "error", "error": {"message": f"model failed: {SECRET}", "code": "UNKNOWN"}}
    if kind == "aborted":
        if not cause:
            return {"kind": "aborted"}
        nested: dict[str, Any] = {"kind": cause}
        if cause == "hook":
            nested["reason"] = f"hook said {SECRET}"
        return {"kind": "aborted", "reason": nested}
    if kind in ("completed", "max-tokens", "blocked", "interrupted"):
        return {"kind": kind}
    return {"kind": kind, "detail": SECRET}


def halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [part for part in (text[:middle], text[middle:]) if part]


def emit_malformed_frames(session: Session) -> None:
    junk: list[bytes] = [
        f"not json at all {SECRET}".encode(),
        b"",
        b"   \t ",
        b'\xff\xfe{"jsonrpc":"2.0"}',
        b"[1,2,3]",
        b"42",
        b'"a string"',
        b"null",
        b"{}",
        b'{"jsonrpc":"2.0","id":true,"result":{}}',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}',
        b'{"jsonrpc":"2.0","id":"req_unmatched","result":{}}',
        b'{"jsonrpc":"2.0","id":12345,"result":{}}',
        b'{"jsonrpc":"2.0","method":"session.event","params":"oops"}',
        b'{"jsonrpc":"2.0","method":"session.event","params":{"sessionId":5,"event":{}}}',
        json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "session.status",
                "params": {"sessionId": session.id, "status": "idle?"},
            }
        ).encode(),
        json.dumps(
            {"jsonrpc": "2.0", "method": "session.status", "params": {"sessionId": session.id}}
        ).encode(),
        json.dumps(
            {"jsonrpc": "2.0", "method": "subagent.started", "params": {"parentSessionId": session.id}}
        ).encode(),
        b'{"jsonrpc":"2.0","method":"mystery.notification","params":{"secret":"' + SECRET.encode() + b'"}}',
        b"[[[[[1",
        json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "session.event",
                "params": {
                    "sessionId": session.id,
                    "event": session.envelope("assistant/chunk", {"chunk": "nope"}),
                },
            }
        ).encode(),
        b'{"jsonrpc":"2.0","id":"srv-1","method":"client/ask","params":{}}',
    ]
    for line in junk:
        write_raw(line + b"\n")


def emit_turn_events(session: Session, turn: int, reason: str) -> None:
    text = env("TEXT", "fake answer")
    deltas = env("DELTAS", text)
    session.event("turn/start", {"turn": turn})
    if flag("MALFORMED_FRAMES"):
        emit_malformed_frames(session)
    if depth := int(env("DEEP_FRAME", "0") or "0"):
        write_raw(b"[" * depth + b"]" * depth + b"\n")
    if flag("MALFORMED_EVENT"):
        notify("session.event", {"sessionId": session.id, "event": ["not", "an", "envelope", SECRET]})
    session.event(
        "assistant/chunk", {"turn": turn, "step": 1, "chunk": {"type": "reasoning-delta", "text": "thinking"}}
    )
    for index, piece in enumerate(halves(deltas)):
        session.event(
            "assistant/chunk",
            {"turn": turn, "step": 1, "chunk": {"type": "text-delta", "index": index, "text": piece}},
        )
    oversize = env("OVERSIZE")
    if oversize:
        notify(
            "session.event",
            {"sessionId": "elsewhere", "event": {"type": "padding", "data": "x" * int(oversize)}},
        )
    exit_code = env("EXIT_MID_TURN")
    if exit_code:
        OUT.flush()
        os._exit(int(exit_code))
    if env("HANG_PROMPT") == "partial":
        return
    gate = env("GATE")
    if gate:
        with open(gate, encoding="utf-8") as handle:
            handle.readline()
    shape = env("MESSAGE", "normal")
    content: object
    if shape == "none":
        content = None
    elif shape == "empty":
        content = []
    elif shape == "textless":
        call, name = env("TOOL_CALL_ID", "call-1"), env("TOOL_NAME", "noop")
        content = [{"type": "tool-call", "id": call, "name": name, "input": {name: call}}]
    elif shape == "malformed":
        content = f"not an array {SECRET}"
    else:
        content = [{"type": "text", "text": part} for part in halves(text)]
    if content is not None:
        frame = {
            "jsonrpc": "2.0",
            "method": "session.event",
            "params": {
                "sessionId": session.id,
                "event": session.envelope("assistant/message", session.message(content, turn)),
            },
        }
        line = json.dumps(frame, ensure_ascii=False).encode("utf-8", "surrogateescape") + b"\n"
        if flag("SPLIT_UTF8"):
            cut = next((i for i, byte in enumerate(line) if byte & 0xC0 == 0x80), len(line) // 2)
            write_raw(line[:cut])
            time.sleep(0.05)
            write_raw(line[cut:])
        else:
            write_raw(line)
    if reason != "none":
        session.event("turn/end", {"turn": turn, "reason": turn_end_reason(reason)})


def emit_subagents(session: Session) -> None:
    child = Session(session.id + "-child")
    grandchild = Session(session.id + "-grandchild")
    other = Session("unrelated-session")
    notify("subagent.started", {"parentSessionId": session.id, "childSessionId": child.id})
    child.status("running")
    child.event("assistant/message", child.message([{"type": "text", "text": "child answer"}], 1))
    notify("subagent.started", {"parentSessionId": child.id, "childSessionId": grandchild.id})
    grandchild.event("turn/start", {"turn": 1})
    other.event("assistant/message", other.message([{"type": "text", "text": "unrelated answer"}], 1))
    other.status("idle")
    child.status("idle")
    notify(
        "subagent.finished",
        {
            "provider": "local",
            "agentId": "agent-1",
            "parentSessionId": session.id,
            "childSessionId": child.id,
            "status": "ok",
            "stopReason": "completed",
        },
    )


class Runtime:
    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.prompts = 0
        self.shut_down = False

    def session(self, session_id: str) -> Session:
        if session_id not in self.sessions:
            self.sessions[session_id] = Session(session_id)
        return self.sessions[session_id]

    def handle(self, frame: dict[str, Any]) -> None:
        method, request_id = frame.get("method"), frame.get("id")
        if not isinstance(method, str) or request_id is None:
            return  # a response (to srv-1) or a notification: nothing to do
        params = frame.get("params") if isinstance(frame.get("params"), dict) else {}
        assert isinstance(params, dict)
        stage = STAGES.get(method)
        if stage is not None and fault(stage):
            return
        if method == "initialize":
            self.initialize(request_id)
        elif method == "session/prompt":
            self.prompt(request_id, params)
        elif method == "shutdown":
            self.shutdown(request_id)
        else:
            respond_error(request_id, -32603, f"unknown method: {method}")

    def initialize(self, request_id: object) -> None:
        if flag("CLOSE_STDIN"):
            os.close(0)
        if flag("HANG_INIT"):
            return
        if flag("INIT_ERROR"):
            respond_error(request_id, 7, f"initialize failed: {SECRET}", {"secret": SECRET})
            return
        info: dict[str, Any] = {"name": env("SERVER_NAME", SERVER_NAME)}
        if not flag("INIT_MALFORMED"):
            info["version"] = env("SERVER_VERSION", "0.0.1")
        respond(request_id, {"serverInfo": info})
        if flag("CLOSE_STDIN"):
            sleep_forever()

    def prompt(self, request_id: object, params: dict[str, Any]) -> None:
        OVERRIDES.clear()
        OVERRIDES.update(prompt_overrides(params))
        try:
            self._prompt(request_id, params)
        finally:
            OVERRIDES.clear()

    def _prompt(self, request_id: object, params: dict[str, Any]) -> None:
        ready = env("READY_FILE")
        if ready:
            with open(ready, "w", encoding="utf-8") as handle:
                handle.write("ready")
        if flag("PROMPT_ERROR"):
            respond_error(request_id, -32000, f"prompt failed: {SECRET}", {"secret": SECRET})
            return
        hang = env("HANG_PROMPT")
        if hang == "silent":
            return
        session = self.session(str(params.get("sessionId")))
        self.prompts += 1
        message_id = f"fake-user-{self.prompts}"
        result = {"message": message_id} if flag("MALFORMED_PROMPT") else {"messageId": message_id}
        respond_first = hang == "partial" or env("ORDER", "before") == "after"
        if respond_first:
            respond(request_id, result)
        if flag("STALE"):
            session.event("agent/inbox/spliced", {"inserted": [{"id": "fake-user-stale", "role": "user"}]})
            session.status("running")
            session.event("assistant/message", session.message([{"type": "text", "text": "stale answer"}], 0))
            session.event("turn/end", {"turn": 0, "reason": {"kind": "completed"}})
            session.status("idle")
        session.event(
            "agent/inbox/spliced", {"inserted": [{"id": "other-message"}, {"id": message_id, "role": "user"}]}
        )
        session.status("running")
        turn = 1
        first = env("FIRST_REASON")
        if first:
            session.event("turn/start", {"turn": turn})
            session.event("turn/end", {"turn": turn, "reason": turn_end_reason(first)})
            turn += 1
        emit_turn_events(session, turn, env("REASON", "completed"))
        if hang == "partial":
            return
        if flag("SUBAGENT"):
            emit_subagents(session)
        session.status("idle")
        if not respond_first:
            respond(request_id, result)

    def shutdown(self, request_id: object) -> None:
        mode = env("SHUTDOWN", "ok")
        if mode == "hang":
            return
        if mode == "error":
            respond_error(request_id, -32000, f"shutdown failed: {SECRET}", {"secret": SECRET})
            return
        respond(request_id, {})
        if mode == "ok":
            sys.exit(0)


def sleep_forever() -> None:
    while True:
        signal.pause()


def on_term(signum: int, frame: object) -> None:
    path = env("SIGTERM_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("TERM\n")


def main() -> None:
    if flag("TRAP_TERM"):
        signal.signal(signal.SIGTERM, on_term)
    noise = "" if env("STDERR_AT") else env("STDERR")
    if noise or SECRET:
        lines = [noise] if noise else []
        if SECRET:
            lines.append(f"fake runtime stderr carries {SECRET}")
        text = "\n".join(lines)
        sys.stderr.write(text if flag("STDERR_NO_NEWLINE") else text + "\n")
        sys.stderr.flush()
    exit_before = env("EXIT_BEFORE_INIT")
    if exit_before not in ("", "0"):
        sys.exit(int(exit_before) if exit_before.isdigit() else 3)
    record = env("RECORD")
    runtime = Runtime()
    for raw in sys.stdin.buffer:
        if record:
            with open(record, "ab") as handle:
                handle.write(raw if raw.endswith(b"\n") else raw + b"\n")
        try:
            frame = json.loads(raw)
        except ValueError:
            continue
        if isinstance(frame, dict):
            runtime.handle(frame)
            if STAGES.get(str(frame.get("method"))) == env("CLOSE_STDIN_AT", "-"):
                sleep_forever()
    if flag("IGNORE_EOF"):
        sleep_forever()


if __name__ == "__main__":
    main()
