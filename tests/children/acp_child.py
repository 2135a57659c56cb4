#!/usr/bin/env python3
"""Scripted ACP child for the test-suite: ACP v1 over NDJSON stdio, stdlib only, driven by env vars.

It takes every path a real agent cannot be made to take on demand. Every variable is optional and
prefixed ``ACP_CHILD_``; "flag" means set to a non-empty value. Stages, used by the ``*_AT`` variables:
``start`` (before stdin is read), ``initialize``, ``authenticate``, ``new-session``, ``prompt`` and
``cancel`` (a ``session/cancel`` arrived). A request stage fires when its request arrives, except
``prompt``, which fires after the turn's text has been streamed and the ready file written, so a
failure there leaves partial output behind.

Turn content (``session/prompt``), in this order:

- ``GATE=path`` (a FIFO): before anything else, open it for reading and read it to its end, so
  the turn waits until a test has opened the FIFO for writing and closed it again.
- ``ECHO_CWD`` flag: text ``cwd=<process cwd>\\nsession_cwd=<cwd from session/new>\\n``.
- ``ECHO_ENV=NAME,NAME``: text ``NAME=<value>\\n`` per name, ``NAME unset\\n`` when absent.
- ``ECHO_PROMPT`` flag: text ``prompt=<text blocks of the prompt joined by \\n>\\n``.
- ``NON_TEXT_UPDATES`` flag: a thought chunk, a tool call, a plan, an image message chunk and a user
  message chunk, all of which a client must leave out of the answer.
- ``PERMISSION=KIND[,KIND...]``: one ``session/request_permission`` per kind, in order, for a tool
  call of that kind (verbatim; ``none`` omits the kind), offering ``PERMISSION_OPTIONS`` (a JSON list
  sent verbatim; default ``allow-once``/allow_once, ``allow-always``/allow_always,
  ``reject-once``/reject_once). Each answer is echoed as text: ``permission <KIND>: selected <optionId>``,
  ``permission <KIND>: cancelled``, ``permission <KIND>: error <code>`` or ``permission <KIND>: malformed``.
  Anything but an option of an allow kind is a denial: the turn then ends with
  ``PERMISSION_DENIED_STOP`` (default ``cancelled``) instead of ``STOP``.
- ``TEXT``: the answer, streamed word by word (default ``hello from acp_child``; set it empty for none).
- ``SLOW_MS=n``: wait n ms before each text chunk after the first (a cancel interrupts the wait).
- ``HUGE_LINE=n``: one stdout line of exactly n bytes before its newline: an ``agent_message_chunk``
  padded with ``x`` text, or n bytes of ``x`` when n is too small for the envelope (with ``HUGE_AT``
  the line goes out at that stage instead).
- ``READY_FILE=path``: written (atomically, holding the pid) once the above is on stdout.
- ``GATE_FIFO=path``: after that, before the turn ends, open the FIFO at path and read it to its
  end (the turn ends only once the test has opened the FIFO for writing and closed it).

Appetites (the limit tests), at the prompt, before its text and writing nothing meanwhile:

- ``SPIN_MS=n``: use n ms of CPU time (a busy loop on ``time.process_time``). ``SPIN_PROCS=k``
  (default 1): k processes spin n ms each at once (the child and k - 1 grandchildren).
- ``ALLOC_MB=n``: allocate n MiB in 8 MiB chunks, touching every page, and hold it (at most 1024:
  a broken limit cannot hurt the machine). ``ALLOC_IN=grandchild``: a grandchild allocates (and
  then sleeps) while the child waits for it; its death does not end the child.
  ``ALLOC_HOLD=dir:N``: N children allocate at the same time: each writes ``dir/<pid>.start`` and
  waits for N of them before allocating, then writes ``dir/<pid>.done`` and holds its memory until
  every other one is done too or dead (30 s at most each).
- ``IDLE_ALLOC_MB=n``: once a turn has ended (its result sent), allocate n MiB the same way
  while idle, between turns (capped as ``ALLOC_MB``).
- ``SHM_MB=n``: write an n MiB file ``/dev/shm/subagents-test-<SHM_NAME>-<pid>`` (at most 1024) and
  leave it there: shared memory a run leaves behind when it exits.
- ``FORK_BOMB=n``: a grandchild forks sleeping processes until the kernel refuses a fork (or n
  exist), then sleeps itself; the child streams ``forks refused after K`` (or
  ``no fork refused``) as text.

Turn end:

- ``STOP``: the stop reason, verbatim, out-of-vocabulary values included (default ``end_turn``).
- ``PROMPT_RESULT=json``: the prompt's result, verbatim (overrides ``STOP``).
- ``HANG`` = ``1`` or ``prompt``: never answer the prompt until a ``session/cancel`` (then
  ``cancelled``). ``HANG`` = ``initialize``, ``authenticate`` or ``new-session``: never answer that
  request.
- ``IGNORE_CANCEL`` flag: ``session/cancel`` has no effect (with ``HANG``: the prompt never ends).
  Without it, a cancel stops the turn and it answers ``cancelled``.

Failures at a stage:

- ``EXIT_AT=stage``, ``EXIT_CODE=n`` (default 1): exit with status n.
- ``HOLD_STDOUT`` flag: at start, a ``sleep`` grandchild inherits stdout and keeps it open.
- ``SIGNAL_AT=stage``, ``SIGNAL=NAME`` (default ``SIGKILL``; ``SIGSEGV``, ``SEGV`` or a number):
  kill itself with that signal (core dumps disabled).
- ``ERROR_AT=stage`` (a request stage): answer with JSON-RPC error ``ERROR_CODE`` (default -32603),
  message ``ERROR_TEXT`` (default ``scripted failure``) and data ``{"details": ERROR_TEXT}``.
- ``MISSING_SESSION_ID`` flag: ``session/new`` answers ``{}``. ``NEW_SESSION_RESULT=json``: its
  result, verbatim.
- ``AUTH_METHOD=id``: ``initialize`` advertises that auth method and ``session/new`` fails with
  -32000 until ``authenticate`` with that id succeeded. ``AUTH_FAIL`` flag: ``authenticate`` answers
  error -32000.
- ``GARBAGE`` flag: a non-JSON line precedes every frame written to stdout.
- ``GARBAGE_AT=stage``: at that stage, before anything else, a burst of junk lines: text that is not
  JSON, invalid UTF-8, a JSON array, a JSON string, ``{}`` and a response to an id nobody sent.
- ``FRAMES_AT=stage`` and ``FRAMES=json``: at that stage, before anything else, each item of the
  JSON list ``FRAMES`` as one stdout line (an item that is a string goes out verbatim, anything else
  as compact JSON); then the stage carries on as scripted.  A string item is encoded with
  ``surrogateescape``, so ``\\udcff`` in it goes out as the raw byte 0xff (invalid UTF-8).
  ``FRAMES_FILE=path``: the list is read from that file instead (frames too big for the environment).
- ``FLOOD_AT=stage`` and ``FLOOD=n``: at that stage, write ``n`` ``fs/read_text_file`` requests
  (ids ``flood-0`` ...) without reading stdin meanwhile, then stay alive without reading
  (a signal ends it).
- ``HALF_AT=stage`` (a request stage): the stage's answer is written only up to its middle, with no
  newline; then ``HALF_THEN`` = ``exit`` (default: exit with ``EXIT_CODE``), ``hang`` (write nothing
  more; stdin EOF still ends the child) or ``finish`` (the rest of the line follows in a second write).
- ``HUGE_AT=stage``: at that stage, before its answer, one stdout line of ``HUGE_LINE`` bytes
  (default 67108864, i.e. 64 MiB); the child then carries on as scripted.
- ``CLOSE_STDOUT_AT=stage``: at that stage, close stdout and carry on without it (the stage is not
  answered, nothing more is written); stdin EOF still ends the child.
- ``CLOSE_STDIN_AT=stage``: when the stage's request arrives (at ``start``: before reading anything),
  close stdin, handle the request as scripted, then stay alive without reading (a signal ends it);
  the parent's next write finds a broken pipe (a request already in the pipe at ``start`` is simply
  never answered).
- ``SESSION_ID=text``: the session id ``session/new`` answers with (default
  ``acp-child-session-<pid>-<n>``).
- ``TOOL_TITLE=text`` and ``TOOL_RAW_INPUT=json``: the title (default ``<KIND> tool``) and the
  ``rawInput`` (default none) of the tool call of every permission request.
- ``QUIET_PERMISSION`` flag: the permission answers are not echoed as text.
- ``STRANGE_METHOD=text``: during the turn, before its text, one notification and one request
  (never waited for) whose method name is that text, verbatim.
- ``STDERR_TEXT=text`` (plus a newline) then ``STDERR_BYTES=n`` bytes of filler lines to stderr at
  ``STDERR_AT`` (default ``start``); a blocked stderr pipe blocks the child there.

Process behaviour:

- stdin EOF: exit 0. ``FLUSH_FILE=path``: first wait ``FLUSH_DELAY_MS`` (default 150), then write the
  file. ``IGNORE_EOF`` flag: then stay alive (until a signal).
- ``TRAP_TERM`` flag: SIGTERM is ignored (through a handler, so descendants do not inherit it).
  ``SIGTERM_FILE=path``: SIGTERM writes the file; without ``TRAP_TERM`` the child then dies by SIGTERM.
- ``GRANDCHILD`` flag: at start, spawn ``sleep 600`` in the child's process group. ``DAEMON`` flag:
  at start, double-fork a ``setsid`` daemon running ``sleep 600``. Both take comma-separated options
  instead of ``1``: ``keep-stdio`` (the descendant keeps the child's stdio pipes; default /dev/null),
  ``trap-term`` (the descendant ignores SIGTERM), ``non-dumpable`` (the descendant makes itself
  non-dumpable, as after a setuid exec, and sleeps without an ``exec`` that would undo it:
  a non-root supervisor cannot read its environment) and ``pid-namespace`` (the descendant is
  ``unshare --pid --fork sh``, a shell that is PID 1 of a new pid namespace with a ``sleep 600``
  of its own; the child goes on once both are running). ``GRANDCHILD_PID_FILE=path``: their pids
  are appended to it, one per line.
- ``LOG_FILE=path``: every frame read from stdin is appended to it as one line.
- ``SESSION_CLOSE`` = ``answer``: ``initialize`` advertises ``sessionCapabilities.close`` and
  ``session/close`` is answered ``{}``; ``hang``: advertised, never answered.  Unset: not
  advertised, and ``session/close`` is answered -32601 like any unknown method.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, NoReturn

JsonObject = dict[str, Any]

DEFAULT_OPTIONS: list[JsonObject] = [
    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
]
GARBAGE_LINE = b"acp_child: this line is not JSON-RPC\n"
GARBAGE_BURST = b"".join(
    line + b"\n"
    for line in (
        b"acp_child: not JSON at all",
        b"\xff\xfe\x80 invalid UTF-8",
        b"[1, 2, 3]",
        b'"a JSON string"',
        b"{}",
        b'{"jsonrpc":"2.0","id":987654,"result":{}}',
    )
)
DEFAULT_HUGE_LINE = 64 * 1024 * 1024
# The stage a request's arrival is (for CLOSE_STDIN_AT).
REQUEST_STAGES = {
    "initialize": "initialize",
    "authenticate": "authenticate",
    "session/new": "new-session",
    "session/prompt": "prompt",
    "session/cancel": "cancel",
}
_CHUNK = re.compile(r"\s*\S+\s*")


def env(name: str, default: str = "") -> str:
    return os.environ.get("ACP_CHILD_" + name, default)


def write_file(path: str, text: str) -> None:
    """Write atomically, so a test polling for the file never reads half of it."""
    with open(path + ".tmp", "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(path + ".tmp", path)


def read_file(path: str) -> str:
    with open(path, encoding="utf-8") as file:
        return file.read()


def scripted_signal() -> signal.Signals:
    name = env("SIGNAL", "SIGKILL")
    return signal.Signals(int(name)) if name.isdigit() else signal.Signals["SIG" + name.removeprefix("SIG")]


def prepare_signal() -> None:
    """At start, on the main thread (the only one allowed to): no core dump, default disposition."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if (sig := scripted_signal()) not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)


def die_by_signal() -> NoReturn:
    os.kill(os.getpid(), scripted_signal())
    time.sleep(5)
    os._exit(1)


def write_stderr() -> None:
    err = sys.stderr.buffer
    if text := env("STDERR_TEXT"):
        err.write(text.encode() + b"\n")
    remaining = int(env("STDERR_BYTES", "0"))
    filler = b"acp_child stderr filler " + b"." * 55 + b"\n"
    while remaining > 0:
        err.write(filler[:remaining])
        remaining -= len(filler)
    err.flush()


def spawn_descendants() -> None:
    """GRANDCHILD and DAEMON, at start (before any thread exists, so forking is safe)."""
    for kind in ("GRANDCHILD", "DAEMON"):
        if not (value := env(kind)):
            continue
        options = set(value.split(","))
        argv = ["sleep", "600"]
        if "trap-term" in options:
            argv = ["sh", "-c", "trap '' TERM; exec sleep 600"]
        ready_r, ready_w = -1, -1
        if "pid-namespace" in options:
            ready_r, ready_w = os.pipe()
            script = "sleep 600 & echo ready >&3; exec 3>&-; wait"
            argv = ["unshare", "--pid", "--fork", "sh", "-c", script]
        pid = os.fork()
        if pid == 0:  # the grandchild (GRANDCHILD) or the intermediate (DAEMON)
            try:
                if kind == "DAEMON":
                    os.setsid()
                    if daemon := os.fork():
                        record_descendant(daemon)
                        os._exit(0)
                if "keep-stdio" not in options:
                    devnull = os.open(os.devnull, os.O_RDWR)
                    for fd in (0, 1, 2):
                        os.dup2(devnull, fd)
                if ready_w >= 0:
                    os.dup2(ready_w, 3)  # inheritable: the shell in the new namespace writes it
                if "non-dumpable" in options:
                    import ctypes

                    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
                    while True:
                        time.sleep(3600)
                os.execvp(argv[0], argv)
            finally:
                os._exit(127)
        if ready_w >= 0:
            os.close(ready_w)
            with os.fdopen(ready_r, "rb") as ready_pipe:
                ready_pipe.readline()  # the shell and its sleep run in the new namespace
        if kind == "DAEMON":
            os.waitpid(pid, 0)
        else:
            record_descendant(pid)


def record_descendant(pid: int) -> None:
    if path := env("GRANDCHILD_PID_FILE"):
        with open(path, "a", encoding="utf-8") as file:
            file.write(f"{pid}\n")


def on_sigterm(signum: int, frame: object) -> None:
    if path := env("SIGTERM_FILE"):
        write_file(path, f"{os.getpid()}\n")
    if not env("TRAP_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


class Child:
    """One ACP connection: a reader loop on the main thread, one worker thread per prompt."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out
        self._out_lock = threading.Lock()
        self._cond = threading.Condition()
        self._sessions: dict[str, str] = {}
        self._cancelled: set[str] = set()
        self._waiting: set[int] = set()
        self._responses: dict[int, JsonObject] = {}
        self._next_id = 0
        self._authenticated = not env("AUTH_METHOD")
        self._silent = False  # stdout closed, or a half-written frame that must stay half

    # wire

    def send(self, message: JsonObject, stage: str | None = None) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
        if stage is not None and env("HALF_AT") == stage:
            self.send_half(data)
            return
        with self._out_lock:
            if self._silent:
                return
            try:
                if env("GARBAGE"):
                    self._out.write(GARBAGE_LINE)
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, ValueError):
                os._exit(0)

    def write_raw(self, data: bytes) -> None:
        with self._out_lock:
            if self._silent:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except (BrokenPipeError, ValueError):
                os._exit(0)

    def send_half(self, data: bytes) -> None:
        """HALF_AT: the first half of ``data`` without its newline, then HALF_THEN."""
        then = env("HALF_THEN", "exit")
        middle = len(data) // 2
        self.write_raw(data[:middle])
        if then == "finish":
            time.sleep(0.02)  # let the first half reach the reader on its own
            self.write_raw(data[middle:])
            return
        if then == "hang":
            with self._out_lock:
                self._silent = True
            return
        self.exit(int(env("EXIT_CODE", "1")))

    def close_stdout(self) -> None:
        with self._out_lock:
            self._silent = True
            fd = self._out.fileno()
            self._out.close()  # sys.stdout's buffer does not own fd 1: close it too
            os.close(fd)

    def result(self, rid: Any, result: Any, stage: str | None = None) -> None:
        self.send({"jsonrpc": "2.0", "id": rid, "result": result}, stage)

    def error(self, rid: Any, code: int, message: str, details: str | None = None) -> None:
        error: JsonObject = {"code": code, "message": message}
        if details is not None:
            error["data"] = {"details": details}
        self.send({"jsonrpc": "2.0", "id": rid, "error": error})

    def update(self, session_id: str, update: JsonObject) -> None:
        params = {"sessionId": session_id, "update": update}
        self.send({"jsonrpc": "2.0", "method": "session/update", "params": params})

    def exit(self, code: int) -> NoReturn:
        with self._out_lock:
            try:
                self._out.flush()
            finally:
                os._exit(code)

    # stages

    def stage(self, name: str, rid: Any = None) -> bool:
        """Run the stage's scripted failures; True when they answered the request."""
        if env("STDERR_AT", "start") == name:
            write_stderr()
        if env("GARBAGE_AT") == name:
            self.write_raw(GARBAGE_BURST)
        if env("FRAMES_AT") == name:
            listed = read_file(env("FRAMES_FILE")) if env("FRAMES_FILE") else env("FRAMES", "[]")
            for item in json.loads(listed):
                frame = item if isinstance(item, str) else json.dumps(item, separators=(",", ":"))
                self.write_raw(frame.encode("utf-8", "surrogateescape") + b"\n")
        if env("FLOOD_AT") == name:
            flood(self, int(env("FLOOD", "100000")))
        if env("HUGE_AT") == name:
            self.write_raw(huge_line("", int(env("HUGE_LINE", str(DEFAULT_HUGE_LINE)))) + b"\n")
        if env("CLOSE_STDOUT_AT") == name:
            self.close_stdout()
            return True
        if env("EXIT_AT") == name:
            self.exit(int(env("EXIT_CODE", "1")))
        if env("SIGNAL_AT") == name:
            with self._out_lock:
                self._out.flush()
                die_by_signal()
        if env("ERROR_AT") == name:
            text = env("ERROR_TEXT", "scripted failure")
            self.error(rid, int(env("ERROR_CODE", "-32603")), text, text)
            return True
        return False

    # main loop

    def serve(self, lines: BinaryIO) -> None:
        log_path = env("LOG_FILE")
        for raw in lines:
            if log_path:
                with open(log_path, "ab") as log:
                    log.write(raw.rstrip(b"\n") + b"\n")
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            if isinstance(message, dict):
                closing = REQUEST_STAGES.get(str(message.get("method"))) == env("CLOSE_STDIN_AT", "-")
                if closing:
                    os.close(0)  # before the answer, so the parent's next write surely breaks
                self.dispatch(message)
                if closing:
                    stay_alive()

    def on_eof(self) -> NoReturn:
        if path := env("FLUSH_FILE"):
            time.sleep(int(env("FLUSH_DELAY_MS", "150")) / 1000)
            write_file(path, f"{os.getpid()}\n")
        while env("IGNORE_EOF"):
            signal.pause()
        self.exit(0)

    def dispatch(self, message: JsonObject) -> None:
        method, rid = message.get("method"), message.get("id")
        params = message.get("params")
        params = params if isinstance(params, dict) else {}
        if method is None:
            with self._cond:
                if rid in self._waiting:
                    self._responses[rid] = message
                    self._cond.notify_all()
        elif "id" not in message:
            if method == "session/cancel":
                self.stage("cancel")
                if not env("IGNORE_CANCEL"):
                    with self._cond:
                        self._cancelled.add(str(params.get("sessionId")))
                        self._cond.notify_all()
        elif method == "initialize":
            self.initialize(rid)
        elif method == "authenticate":
            self.authenticate(rid, params)
        elif method == "session/new":
            self.new_session(rid, params)
        elif method == "session/prompt":
            threading.Thread(target=self.prompt, args=(rid, params), daemon=True).start()
        elif method == "session/close" and env("SESSION_CLOSE") in ("answer", "hang"):
            if env("SESSION_CLOSE") == "answer":
                self.result(rid, {}, "close")
        else:
            self.error(rid, -32601, "Method not found")

    # agent methods

    def initialize(self, rid: Any) -> None:
        if self.stage("initialize", rid) or env("HANG") == "initialize":
            return
        auth = env("AUTH_METHOD")
        methods = [{"id": auth, "name": f"Scripted {auth}"}] if auth else []
        info = {"name": "acp-child", "version": "0"}
        capabilities: JsonObject = {"sessionCapabilities": {"close": {}}} if env("SESSION_CLOSE") else {}
        result = {
            "protocolVersion": 1,
            "agentCapabilities": capabilities,
            "authMethods": methods,
            "agentInfo": info,
        }
        self.result(rid, result, "initialize")

    def authenticate(self, rid: Any, params: JsonObject) -> None:
        if self.stage("authenticate", rid) or env("HANG") == "authenticate":
            return
        if env("AUTH_FAIL"):
            self.error(rid, -32000, "Authentication failed", "scripted authentication failure")
        elif not env("AUTH_METHOD") or params.get("methodId") != env("AUTH_METHOD"):
            self.error(rid, -32602, "Invalid params", "unknown methodId")
        else:
            self._authenticated = True
            self.result(rid, {}, "authenticate")

    def new_session(self, rid: Any, params: JsonObject) -> None:
        if self.stage("new-session", rid) or env("HANG") == "new-session":
            return
        if not self._authenticated:
            self.error(rid, -32000, "Authentication required")
            return
        with self._cond:
            session_id = env("SESSION_ID") or f"acp-child-session-{os.getpid()}-{len(self._sessions)}"
            self._sessions[session_id] = str(params.get("cwd"))
        if raw := env("NEW_SESSION_RESULT"):
            self.result(rid, json.loads(raw), "new-session")
        else:
            self.result(rid, {} if env("MISSING_SESSION_ID") else {"sessionId": session_id}, "new-session")

    def prompt(self, rid: Any, params: JsonObject) -> None:
        session_id = str(params.get("sessionId"))
        with self._cond:
            cwd = self._sessions.get(session_id)
            self._cancelled.discard(session_id)
        if cwd is None:
            self.error(rid, -32602, "Invalid params", "unknown sessionId")
            return
        stop = self.turn(session_id, cwd, params)
        if stop is not None:
            write_ready_file()
            if self.stage("prompt", rid):
                return
            if env("HANG") in ("1", "prompt"):
                self.is_cancelled(session_id, wait=None)
            if gate := env("GATE_FIFO"):
                with open(gate, "rb") as fifo:  # blocks until the test opens it for writing
                    fifo.read()  # ... and closes it
            if not self.is_cancelled(session_id):
                raw = env("PROMPT_RESULT")
                self.result(rid, json.loads(raw) if raw else {"stopReason": stop}, "prompt")
                if idle := min(int(env("IDLE_ALLOC_MB", "0")), ALLOC_CAP_MB):
                    threading.Thread(target=allocate, args=(idle,), daemon=True).start()
                return
        self.result(rid, {"stopReason": "cancelled"}, "prompt")

    def turn(self, session_id: str, cwd: str, params: JsonObject) -> str | None:
        """Stream the turn's content; the stop reason, or None when cancelled."""
        if gate := env("GATE"):
            with open(gate, "rb") as fifo:
                fifo.read()
        lines: list[str] = []
        if env("ECHO_CWD"):
            lines += [f"cwd={os.getcwd()}", f"session_cwd={cwd}"]
        for name in filter(None, env("ECHO_ENV").split(",")):
            value = os.environ.get(name)
            lines.append(f"{name} unset" if value is None else f"{name}={value}")
        if env("ECHO_PROMPT"):
            blocks = params.get("prompt")
            texts = [b.get("text") for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
            lines.append("prompt=" + "\n".join(t for t in texts if isinstance(t, str)))
        if lines and not self.stream(session_id, "".join(line + "\n" for line in lines)):
            return None
        if env("NON_TEXT_UPDATES"):
            self.non_text_updates(session_id)
        if strange := env("STRANGE_METHOD"):
            self.send({"jsonrpc": "2.0", "method": strange, "params": {"sessionId": session_id}})
            self.send({"jsonrpc": "2.0", "id": 900001, "method": strange, "params": {}})
        stop = env("STOP", "end_turn")
        if (appetite := appetites()) and not self.stream(session_id, appetite):
            return None
        for kind in filter(None, env("PERMISSION").split(",")):
            decision, denied = self.ask_permission(session_id, kind)
            if decision is None:
                return None
            echo = "" if env("QUIET_PERMISSION") else f"permission {kind}: {decision}\n"
            if not self.stream(session_id, echo):
                return None
            if denied:
                stop = env("PERMISSION_DENIED_STOP", "cancelled")
        if not self.stream(session_id, env("TEXT", "hello from acp_child")):
            return None
        if not env("HUGE_AT") and (size := int(env("HUGE_LINE", "0"))):
            self.write_raw(huge_line(session_id, size) + b"\n")
        return stop

    # turn helpers

    def is_cancelled(self, session_id: str, wait: float | None = 0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: session_id in self._cancelled, timeout=wait)

    def stream(self, session_id: str, text: str) -> bool:
        """Send text word by word; False when the turn was cancelled first."""
        delay = int(env("SLOW_MS", "0")) / 1000
        for index, chunk in enumerate(_CHUNK.findall(text) or ([text] if text else [])):
            if self.is_cancelled(session_id, delay if index else 0):
                return False
            content = {"type": "text", "text": chunk}
            self.update(session_id, {"sessionUpdate": "agent_message_chunk", "content": content})
        return True

    def non_text_updates(self, session_id: str) -> None:
        tool_call = {"toolCallId": "noise-1", "title": "noise", "kind": "think", "status": "completed"}
        image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
        plan = [{"content": "noise", "priority": "low", "status": "pending"}]
        for update in (
            {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "thinking "}},
            {"sessionUpdate": "tool_call", **tool_call},
            {"sessionUpdate": "plan", "entries": plan},
            {"sessionUpdate": "agent_message_chunk", "content": image},
            {"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": "user words "}},
        ):
            self.update(session_id, update)

    def ask_permission(self, session_id: str, kind: str) -> tuple[str | None, bool]:
        """One permission request: the decision text (None when cancelled meanwhile) and whether denied."""
        options = json.loads(env("PERMISSION_OPTIONS")) if env("PERMISSION_OPTIONS") else DEFAULT_OPTIONS
        with self._cond:
            rid = self._next_id
            self._next_id += 1
            self._waiting.add(rid)
        title = env("TOOL_TITLE") or f"{kind} tool"
        tool_call: JsonObject = {"toolCallId": f"call-{rid}", "title": title, "status": "pending"}
        if kind != "none":
            tool_call["kind"] = kind
        if raw_input := env("TOOL_RAW_INPUT"):
            tool_call["rawInput"] = json.loads(raw_input)
        params = {"sessionId": session_id, "toolCall": tool_call, "options": options}
        self.send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": params})
        with self._cond:
            self._cond.wait_for(lambda: rid in self._responses or session_id in self._cancelled)
            self._waiting.discard(rid)
            response = self._responses.pop(rid, None)
        if response is None:
            return None, True
        if isinstance(response.get("error"), dict):
            return f"error {response['error'].get('code')}", True
        result = response.get("result")
        outcome = result.get("outcome") if isinstance(result, dict) else None
        if not isinstance(outcome, dict) or outcome.get("outcome") not in ("selected", "cancelled"):
            return "malformed", True
        if outcome["outcome"] == "cancelled":
            return "cancelled", True
        option_id = outcome.get("optionId")
        kinds = {o.get("optionId"): o.get("kind") for o in options if isinstance(o, dict)}
        return f"selected {option_id}", kinds.get(option_id) not in ("allow_once", "allow_always")


ALLOC_CAP_MB = 1024
ALLOC_CHUNK = 8 << 20
HOG = """
import os, sys, time
kind, n = sys.argv[1], int(sys.argv[2])
if kind == "spin":
    end = time.process_time() + n / 1000
    while time.process_time() < end:
        pass
    sys.exit(0)
if kind == "alloc":
    held = []
    for _ in range(0, n, 8):
        chunk = bytearray(8 << 20)
        chunk[::4096] = b"x" * len(chunk[::4096])
        held.append(chunk)
    print("allocated", flush=True)
else:
    made = 0
    while made < n:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            while True:
                time.sleep(3600)
        made += 1
    print(made if made < n else -1, flush=True)
while True:
    time.sleep(3600)
"""


def appetites() -> str:
    """SPIN_MS, ALLOC_MB and FORK_BOMB; the text they leave for the answer."""
    text = ""
    if spin := int(env("SPIN_MS", "0")):
        others = [
            subprocess.Popen([sys.executable, "-c", HOG, "spin", str(spin)])
            for _ in range(int(env("SPIN_PROCS", "1")) - 1)
        ]
        end = time.process_time() + spin / 1000
        while time.process_time() < end:
            pass
        for other in others:
            other.wait()
        text += f"spun {spin} ms\n"
    if megabytes := min(int(env("ALLOC_MB", "0")), ALLOC_CAP_MB):
        folder, _, count = env("ALLOC_HOLD").rpartition(":")
        if folder:
            write_file(os.path.join(folder, f"{os.getpid()}.start"), "")
            wait_for(lambda: len(marks(folder, ".start")) >= int(count))
        if env("ALLOC_IN") == "grandchild":
            hog = subprocess.Popen(
                [sys.executable, "-c", HOG, "alloc", str(megabytes)], stdout=subprocess.PIPE
            )
            assert hog.stdout is not None
            text += "grandchild " + (hog.stdout.readline().decode().strip() or "died") + "\n"
        else:
            held = []
            for _ in range(0, megabytes, 8):
                chunk = bytearray(ALLOC_CHUNK)
                chunk[::4096] = b"x" * len(chunk[::4096])
                held.append(chunk)
            HELD.append(held)
            text += f"allocated {megabytes} MiB\n"
        if folder:
            write_file(os.path.join(folder, f"{os.getpid()}.done"), "")
            done = marks(folder, ".done")
            wait_for(lambda: all(pid in done or not alive(pid) for pid in marks(folder, ".start")))
    if shm := min(int(env("SHM_MB", "0")), ALLOC_CAP_MB):
        with open(f"/dev/shm/subagents-test-{env('SHM_NAME')}-{os.getpid()}", "wb") as file:
            for _ in range(shm):
                file.write(b"x" * (1 << 20))
        text += f"wrote {shm} MiB to /dev/shm\n"
    if most := int(env("FORK_BOMB", "0")):
        bomb = subprocess.Popen([sys.executable, "-c", HOG, "fork", str(most)], stdout=subprocess.PIPE)
        assert bomb.stdout is not None
        made = int(bomb.stdout.readline() or b"-1")
        text += "no fork refused\n" if made < 0 else f"forks refused after {made}\n"
    return text


HELD: list[list[bytearray]] = []


def allocate(megabytes: int) -> None:
    held = []
    for _ in range(0, megabytes, 8):
        chunk = bytearray(ALLOC_CHUNK)
        chunk[::4096] = b"x" * len(chunk[::4096])
        held.append(chunk)
    HELD.append(held)


def marks(folder: str, suffix: str) -> set[int]:
    return {int(name.removesuffix(suffix)) for name in os.listdir(folder) if name.endswith(suffix)}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """Look again every 20 ms until ``condition`` holds (bounded: a child never hangs on it)."""
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.02)


def huge_line(session_id: str, size: int) -> bytes:
    update = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": ""}}
    params = {"sessionId": session_id, "update": update}
    message = {"jsonrpc": "2.0", "method": "session/update", "params": params}
    envelope = json.dumps(message, separators=(",", ":")).encode()
    if size < len(envelope):
        return b"x" * size
    head, tail = envelope.split(b'"text":""', 1)
    return head + b'"text":"' + b"x" * (size - len(envelope)) + b'"' + tail


def flood(child: Child, count: int) -> NoReturn:
    """FLOOD: client requests nobody reads the answers of, in big writes; then never read again."""
    params = {"sessionId": "flood", "path": "/flood"}
    batch: list[bytes] = []
    for n in range(count):
        request = {"jsonrpc": "2.0", "id": f"flood-{n}", "method": "fs/read_text_file", "params": params}
        batch.append(json.dumps(request, separators=(",", ":")).encode() + b"\n")
        if len(batch) == 256:
            child.write_raw(b"".join(batch))
            batch.clear()
    child.write_raw(b"".join(batch))
    stay_alive()


def stay_alive() -> NoReturn:
    """Never read again (a signal ends the child); threads carry on."""
    while True:
        signal.pause()


def write_ready_file() -> None:
    if path := env("READY_FILE"):
        write_file(path, f"{os.getpid()}\n")


def main() -> NoReturn:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must never corrupt the protocol stream
    if env("TRAP_TERM") or env("SIGTERM_FILE"):
        signal.signal(signal.SIGTERM, on_sigterm)
    if env("SIGNAL_AT"):
        prepare_signal()
    spawn_descendants()
    if env("HOLD_STDOUT"):  # a grandchild that keeps stdout open after this child exits
        subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    child = Child(out)
    child.stage("start")
    if env("CLOSE_STDIN_AT") == "start":
        os.close(0)
        stay_alive()
    child.serve(sys.stdin.buffer)
    child.on_eof()


if __name__ == "__main__":
    main()
