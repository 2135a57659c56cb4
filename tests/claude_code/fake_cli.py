"""A scripted stand-in for the Claude Code CLI's stream-json stdio protocol (stdlib only).

It does what the SDK needs of the CLI (answers ``initialize``, reads the user message)
and then plays a script, so protocol edge cases run in milliseconds.  The script is a
JSON file named by ``FAKE_CLAUDE_SCRIPT``; what the fake saw (argv, env, the prompt,
answers to its control requests) is appended to ``FAKE_CLAUDE_LOG`` as JSON lines.

Script keys: ``startup_exit`` (exit with that code before reading anything),
``startup_raw`` (a raw line written at once), ``answer_initialize`` (default true),
``initialize_extra`` (fields added to the ``initialize`` answer), ``ready_fifo`` (write the pid there once started),
``on_initialize`` (steps run when the SDK's ``initialize`` request arrives, before it is
answered), ``steps`` (run after the user message), ``final_exit`` (exit code after stdin EOF).
``FAKE_CLAUDE_IGNORE_TERM`` in the env makes it outlive stdin EOF and ignore SIGTERM.
Steps: ``{"emit": message}``, ``{"raw": text}`` (``\\udcff`` in it is the raw byte 0xff),
``{"deep": n}`` (one line: an array nested ``n`` deep), ``{"request": request}`` (a control
request; waits for and logs its response), ``{"exit": code}``, ``{"signal": name}``,
``{"partial": text}`` (written with no newline), ``{"huge": n}`` (one line of ``n`` bytes),
``{"stderr": text}`` (one line on stderr), ``{"flood": {"count": n, "request": request}}`` (``n``
control requests at once, then stay alive without reading until a signal ends it),
``{"close_stdout": true}`` (close stdout, write nothing more, read stdin until EOF, then
exit with ``final_exit``), ``{"close_stdin": true}`` (close stdin; the script plays on, and
where it would read next it stays alive instead, until a signal ends it).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

LOG = os.environ.get("FAKE_CLAUDE_LOG", "")


def log(kind: str, value: Any) -> None:
    if LOG:
        with open(LOG, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"kind": kind, "value": value}) + "\n")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Stdin:
    closed = False


def read() -> dict[str, Any] | None:
    while Stdin.closed:  # close_stdin: never read again
        signal.pause()
    line = sys.stdin.readline()
    if not line:
        return None
    data: dict[str, Any] = json.loads(line)
    return data


def answer(request: dict[str, Any], response: dict[str, Any]) -> None:
    send(
        {
            "type": "control_response",
            "response": {"subtype": "success", "request_id": request["request_id"], "response": response},
        }
    )


def wait_for_response(request_id: str) -> None:
    while (message := read()) is not None:
        if message.get("type") == "control_response" and message["response"].get("request_id") == request_id:
            log("response", message["response"])
            return
        serve(message)


def serve(message: dict[str, Any]) -> None:
    """Control requests from the SDK after startup (an interrupt, say): acknowledged."""
    if message.get("type") == "control_request":
        log("sdk_request", message["request"])
        answer(message, {})


def write(text: str) -> None:
    """Text as UTF-8 with ``surrogateescape``: ``\\udcff`` in a raw step is the raw byte 0xff."""
    sys.stdout.flush()
    sys.stdout.buffer.write(text.encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.flush()


def run_steps(steps: list[dict[str, Any]], script: dict[str, Any]) -> int | None:
    """Play ``steps``; an exit code when one of them ends the process."""
    for number, step in enumerate(steps):
        if "emit" in step:
            send(step["emit"])
        elif "raw" in step:
            write(step["raw"] + "\n")
        elif "deep" in step:
            write("[" * step["deep"] + "]" * step["deep"] + "\n")
        elif "partial" in step:
            write(step["partial"])
        elif "stderr" in step:
            sys.stderr.write(step["stderr"] + "\n")
            sys.stderr.flush()
        elif "huge" in step:
            sys.stdout.flush()
            sys.stdout.buffer.write(b"x" * int(step["huge"]) + b"\n")
            sys.stdout.buffer.flush()
        elif "request" in step:
            request_id = f"fake_{number}"
            send({"type": "control_request", "request_id": request_id, "request": step["request"]})
            wait_for_response(request_id)
        elif "flood" in step:
            request = step["flood"]["request"]
            frames = (
                json.dumps({"type": "control_request", "request_id": f"flood_{n}", "request": request}) + "\n"
                for n in range(int(step["flood"]["count"]))
            )
            write("".join(frames))
            while True:
                signal.pause()
        elif "exit" in step:
            return int(step["exit"])
        elif "signal" in step:
            os.kill(os.getpid(), signal.Signals[step["signal"]])
        elif "close_stdout" in step:
            sys.stdout.close()
            os.close(1)  # sys.stdout does not own fd 1
            while sys.stdin.readline():
                pass
            return int(script.get("final_exit", 0))
        elif "close_stdin" in step:
            Stdin.closed = True
            os.close(0)
    return None


def main() -> int:
    with open(os.environ["FAKE_CLAUDE_SCRIPT"], encoding="utf-8") as handle:
        script: dict[str, Any] = json.load(handle)
    log("argv", sys.argv[1:])
    log("env", dict(os.environ))
    log("cwd", os.getcwd())
    if "startup_exit" in script:
        return int(script["startup_exit"])
    if "startup_raw" in script:
        sys.stdout.write(script["startup_raw"] + "\n")
        sys.stdout.flush()
    if "ready_fifo" in script:
        fd = os.open(script["ready_fifo"], os.O_WRONLY)
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
    while (message := read()) is not None:
        if message.get("type") == "control_request" and message["request"].get("subtype") == "initialize":
            code = run_steps(script.get("on_initialize", []), script)
            if code is not None:
                return code
            if script.get("answer_initialize", True):
                answer(message, {"commands": [], **script.get("initialize_extra", {})})
            continue
        if message.get("type") == "user":
            log("prompt", message["message"]["content"])
            break
        serve(message)
    else:
        return int(script.get("final_exit", 0))
    code = run_steps(script.get("steps", []), script)
    if code is not None:
        return code
    while (message := read()) is not None:
        serve(message)
    log("eof", True)
    if os.environ.get("FAKE_CLAUDE_IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            signal.pause()
    return int(script.get("final_exit", 0))


if __name__ == "__main__":
    sys.exit(main())
