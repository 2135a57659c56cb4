"""A minimal line-protocol child for the seam tests (not a real agent protocol).

On start it prints ``hello``; then it reads one task line and answers ``answer: <task>``.

LINE_AGENT_START    ok (default) | hang | exit:N | signal:NAME  (what happens before hello)
LINE_AGENT_ANSWER   echo (default) | hang | exit:N | signal:NAME (after printing ``partial: ...``)
LINE_AGENT_STDERR   text written to stderr at start
LINE_AGENT_IGNORE_EOF  set: ignore stdin EOF (SIGTERM still ends it)
LINE_AGENT_READY_FILE  path written once the task line has been read
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def act(spec: str) -> None:
    if spec == "hang":
        while True:
            time.sleep(3600)
    kind, _, arg = spec.partition(":")
    if kind == "exit":
        sys.stdout.flush()
        os._exit(int(arg))
    if kind == "signal":
        sys.stdout.flush()
        os.kill(os.getpid(), getattr(signal, arg))
        time.sleep(3600)


def main() -> None:
    env = os.environ
    if env.get("LINE_AGENT_STDERR"):
        sys.stderr.write(env["LINE_AGENT_STDERR"] + "\n")
        sys.stderr.flush()
    start = env.get("LINE_AGENT_START", "ok")
    if start != "ok":
        act(start)
    print("hello", flush=True)
    task = sys.stdin.readline().strip()
    if env.get("LINE_AGENT_READY_FILE"):
        Path(env["LINE_AGENT_READY_FILE"]).write_text("ready")
    answer = env.get("LINE_AGENT_ANSWER", "echo")
    if answer == "echo":
        print(f"answer: {task}", flush=True)
    else:
        print(f"partial: working on {task}", flush=True)
        act(answer)
    while sys.stdin.readline():
        pass
    if env.get("LINE_AGENT_IGNORE_EOF"):
        act("hang")


if __name__ == "__main__":
    main()
