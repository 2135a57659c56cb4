"""A scripted stand-in for ``codex app-server``: JSONL JSON-RPC on stdio, stdlib only.

It plays the app-server's side of the handshake with frames shaped like the real
0.171.0 server's (the codex tests validate them against the generated schema), then
runs a script once ``turn/start`` arrives.  It exists for what the real server cannot
be made to do offline: send every class of server request, phases, malformed values,
early notifications, exits at chosen moments.

Environment:

CODEX_STANDIN_STARTUP  ok (default) | exit:N | garbage | init-error | thread-error |
                       not-ephemeral | hang (what happens before the run is published)
CODEX_STANDIN_SCRIPT   JSON list of steps, run when ``turn/start`` arrives:
    {"respond": true}                  answer turn/start now; "error": answer it with a
                                       JSON-RPC error; "skip": do not answer.  Without
                                       any "respond" step it is answered before the first
    {"notify": METHOD, "params": {}}   send a notification
    {"request": METHOD, "params": {}}  send a server request and wait for its answer
    {"raw": TEXT}                      write TEXT and a newline verbatim (encoded with
                                       surrogateescape: "\\udcff" is the raw byte 0xff)
    {"deep": N}                        write one line: an array nested N deep
    {"exit": N}                        exit with status N
    {"signal": NAME}                   kill itself with a signal
    {"hang": true}                     stop here; answer turn/interrupt, exit on EOF
  Strings "$THREAD" and "$TURN" anywhere in params are replaced by the ids.
  ``turn/interrupt`` is always answered with ``{}`` followed by ``turn/completed``
  (status interrupted).
CODEX_STANDIN_RECORD   file to append every received frame to (one JSON per line)

The first argument line (argv) is reported in the initialize result's ``userAgent``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any

THREAD = "01a228c9-0000-7000-8000-00000000thrd"
TURN = "01a228c9-0000-7000-8000-00000000turn"
NOW = 1795980599

_record = os.environ.get("CODEX_STANDIN_RECORD")
_next_request_id = 0


def send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(frame) + "\n")
    sys.stdout.flush()


def receive() -> dict[str, Any] | None:
    line = sys.stdin.readline()
    if not line:
        return None
    frame: dict[str, Any] = json.loads(line)
    if _record:
        with open(_record, "a", encoding="utf-8") as out:
            out.write(line if line.endswith("\n") else line + "\n")
    return frame


def substitute(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("$THREAD", THREAD).replace("$TURN", TURN)
    if isinstance(value, list):
        return [substitute(v) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v) for k, v in value.items()}
    return value


def thread_object(cwd: str, *, ephemeral: bool) -> dict[str, Any]:
    return {
        "id": THREAD,
        "sessionId": THREAD,
        "preview": "",
        "ephemeral": ephemeral,
        "projectId": None,
        "modelProvider": "mock",
        "model": "mock-model",
        "createdAt": NOW,
        "updatedAt": NOW,
        "status": {"type": "idle"},
        "path": None,
        "cwd": cwd,
        "cliVersion": "0.171.0",
        "source": "vscode",
        "turns": [],
    }


def turn_object(status: str = "inProgress", error: Any = None) -> dict[str, Any]:
    return {"id": TURN, "items": [], "itemsView": "notLoaded", "status": status, "error": error}


def die(spec: str) -> None:
    kind, _, arg = spec.partition(":")
    if kind == "exit":
        sys.stdout.flush()
        os._exit(int(arg))
    if kind == "hang":
        while receive() is not None:
            pass
        os._exit(0)


def wait_for(method: str) -> dict[str, Any]:
    while True:
        frame = receive()
        if frame is None:
            os._exit(0)
        if frame.get("method") == method:
            return frame


def serve_rest() -> None:
    """After the script: answer interrupts; exit 0 on EOF (as the real server does)."""
    while True:
        frame = receive()
        if frame is None:
            os._exit(0)
        if frame.get("method") == "turn/interrupt":
            send({"id": frame["id"], "result": {}})
            send(
                {
                    "method": "turn/completed",
                    "params": {"threadId": THREAD, "turn": turn_object("interrupted")},
                }
            )


def request(method: str, params: dict[str, Any]) -> None:
    global _next_request_id
    request_id = _next_request_id
    _next_request_id += 1
    send({"id": request_id, "method": method, "params": params})
    while True:
        frame = receive()
        if frame is None:
            os._exit(0)
        if frame.get("id") == request_id and "method" not in frame:
            send(
                {"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": request_id}}
            )
            return


def main() -> None:
    startup = os.environ.get("CODEX_STANDIN_STARTUP", "ok")
    steps: list[dict[str, Any]] = json.loads(os.environ.get("CODEX_STANDIN_SCRIPT", "[]"))
    if startup.startswith(("exit:", "hang")):
        die(startup)
    init = wait_for("initialize")
    if startup == "garbage":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
        serve_rest()
    if startup == "init-error":
        send({"id": init["id"], "error": {"code": -32603, "message": "SECRET init failure detail"}})
        serve_rest()
    send(
        {
            "id": init["id"],
            "result": {
                "userAgent": json.dumps(sys.argv[1:]),
                "codexHome": "/nonexistent/codex-home",
                "platformFamily": "unix",
                "platformOs": "linux",
            },
        }
    )
    wait_for("initialized")
    start = wait_for("thread/start")
    if startup == "thread-error":
        send({"id": start["id"], "error": {"code": -32600, "message": "SECRET thread failure detail"}})
        serve_rest()
    cwd = start["params"]["cwd"]
    send(
        {
            "id": start["id"],
            "result": {
                "thread": thread_object(cwd, ephemeral=startup != "not-ephemeral"),
                "model": "mock-model",
                "modelProvider": "mock",
                "cwd": cwd,
                "approvalPolicy": start["params"].get("approvalPolicy", "never"),
                "approvalsReviewer": start["params"].get("approvalsReviewer", "user"),
                "sandbox": {"type": "readOnly", "networkAccess": False},
            },
        }
    )
    turn_start = wait_for("turn/start")
    responded = False

    def respond(how: object = True) -> None:
        nonlocal responded
        if responded or how == "skip":
            return
        responded = True
        if how == "error":
            send({"id": turn_start["id"], "error": {"code": -32603, "message": "SECRET turn failure detail"}})
        else:
            send({"id": turn_start["id"], "result": {"turn": turn_object()}})

    if not any("respond" in step for step in steps):
        respond()
    for step in steps:
        if "respond" in step:
            respond(step["respond"])
        elif "notify" in step:
            params = substitute(step.get("params", {}))
            send({"method": step["notify"], "params": params, "emittedAtMs": NOW * 1000})
        elif "request" in step:
            request(step["request"], substitute(step.get("params", {})))
        elif "raw" in step:
            sys.stdout.flush()  # bytes: "\udcff" in TEXT goes out as the raw byte 0xff
            sys.stdout.buffer.write((step["raw"] + "\n").encode("utf-8", "surrogateescape"))
            sys.stdout.buffer.flush()
        elif "deep" in step:
            sys.stdout.write("[" * step["deep"] + "]" * step["deep"] + "\n")
            sys.stdout.flush()
        elif "exit" in step:
            sys.stdout.flush()
            os._exit(int(step["exit"]))
        elif "signal" in step:
            sys.stdout.flush()
            os.kill(os.getpid(), getattr(signal, step["signal"]))
            time.sleep(3600)
        elif "hang" in step:
            break
    serve_rest()


if __name__ == "__main__":
    main()
