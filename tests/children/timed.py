#!/usr/bin/env python3
"""Runs a child command with inherited stdio and logs its own start and end times.

``TIMED_LOG=path``: ``start <pid> <time>`` and ``end <pid> <time>`` lines are appended to
it (wall clock, shared by every process of the machine).  ``TIMED_BARRIER=n``: before
running the command, wait (at most 60 s) until ``n`` start lines are in the log, so the
first ``n`` runs are known to overlap.  Usage: ``timed.py COMMAND ARGS...``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def log(path: str, what: str) -> None:
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"{what} {os.getpid()} {time.time():.6f}\n")


def starts(path: str) -> int:
    with open(path, encoding="utf-8") as file:
        return sum(1 for line in file if line.startswith("start "))


def main() -> int:
    path = os.environ["TIMED_LOG"]
    log(path, "start")
    barrier = int(os.environ.get("TIMED_BARRIER", "0"))
    deadline = time.monotonic() + 60
    while barrier and starts(path) < barrier and time.monotonic() < deadline:
        time.sleep(0.02)
    code = subprocess.call(sys.argv[1:])
    log(path, "end")
    return code


if __name__ == "__main__":
    sys.exit(main())
