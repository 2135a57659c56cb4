"""A minimal line-protocol child for the seam tests (not a real agent protocol).

On start it prints ``hello``; then it reads one task line and answers ``answer: <task>``.
Each later line is the next turn of a conversation: ``answer: <line>``, unless the line
is ``do:<spec>``: ``do:wait`` prints ``partial: waiting`` and waits for a ``cancel``
line, then prints ``cancelled``; ``do:hang``, ``do:exit:N`` and ``do:signal:NAME`` print
``partial: working on <line>`` and act as below.

LINE_AGENT_START    ok (default) | hang | exit:N | signal:NAME  (what happens before hello)
LINE_AGENT_ANSWER   echo (default) | hang | exit:N | signal:NAME (after printing ``partial: ...``)
LINE_AGENT_STDERR   text written to stderr at start
LINE_AGENT_IGNORE_EOF  set: ignore stdin EOF (SIGTERM still ends it)
LINE_AGENT_READY_FILE  path written once the task line has been read
LINE_AGENT_RESUMED  set: a resumed conversation: no task line, every line is a later turn
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
    if env.get("LINE_AGENT_RESUMED"):
        while line := sys.stdin.readline():
            later_turn(line.strip())
        if env.get("LINE_AGENT_IGNORE_EOF"):
            act("hang")
        return
    task = sys.stdin.readline().strip()
    if env.get("LINE_AGENT_READY_FILE"):
        Path(env["LINE_AGENT_READY_FILE"]).write_text("ready")
    answer = env.get("LINE_AGENT_ANSWER", "echo")
    if answer == "echo":
        print(f"answer: {task}", flush=True)
    else:
        print(f"partial: working on {task}", flush=True)
        act(answer)
    while line := sys.stdin.readline():
        later_turn(line.strip())
    if env.get("LINE_AGENT_IGNORE_EOF"):
        act("hang")


def later_turn(task: str) -> None:
    if task == "cancel":  # a cancel that arrived after its turn ended
        return
    if not task.startswith("do:"):
        print(f"answer: {task}", flush=True)
        return
    spec = task.removeprefix("do:")
    if spec == "wait":
        print("partial: waiting", flush=True)
        while (line := sys.stdin.readline()) and line.strip() != "cancel":
            pass
        print("cancelled", flush=True)
        return
    print(f"partial: working on {task}", flush=True)
    act(spec)


if __name__ == "__main__":
    main()
