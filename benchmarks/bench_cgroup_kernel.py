"""The kernel's part of a cgroup-mode start.  Run (as root, on a cgroup v2 mount):
``python -m benchmarks.bench_cgroup_kernel``.

1. Moving a process into a leaf (a write to ``cgroup.procs``, what the entry shim does): the first
   write waits for an RCU grace period; another one within that grace period does not.
2. Making a leaf (``mkdir``) with no migration in flight, and while a thread keeps migrating
   processes: the write holds ``cgroup_mutex`` through its grace period, and ``mkdir`` needs it.

Everything is made under ``<our cgroup>/bench-cgroup-kernel-<pid>/`` and removed afterwards.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

from supervisor.process import detect_containment

COUNT = int(os.environ.get("BENCH_COUNT", "40"))


def ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    median = statistics.median(values)
    return f"median {median * 1000:6.2f} ms, p95 {p95 * 1000:6.2f}, max {ordered[-1] * 1000:6.2f}"


def move(leaf: Path, pid: int) -> float:
    started = time.perf_counter()
    (leaf / "cgroup.procs").write_text(str(pid))
    return time.perf_counter() - started


def migrations(base: Path) -> None:
    first: list[float] = []
    second: list[float] = []
    for index in range(COUNT):
        leaf = base / f"move-{index}"
        leaf.mkdir()
        one, two = subprocess.Popen(["sleep", "60"]), subprocess.Popen(["sleep", "60"])
        try:
            time.sleep(0.05)  # let the last grace period pass: the next write is a first one
            first.append(move(leaf, one.pid))
            second.append(move(leaf, two.pid))
        finally:
            for proc in (one, two):
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError):
            leaf.rmdir()
    print(f"cgroup.procs write, the first:          {ms(first)}")
    print(f"cgroup.procs write, right after another: {ms(second)}")


def mkdirs(base: Path, busy: bool) -> list[float]:
    stop = threading.Event()

    def migrate() -> None:
        index = 0
        while not stop.is_set():
            leaf = base / f"busy-{index}"
            leaf.mkdir()
            proc = subprocess.Popen(["sleep", "60"])
            try:
                move(leaf, proc.pid)
            finally:
                proc.kill()
                proc.wait()
            time.sleep(0.02)
            with contextlib.suppress(OSError):
                leaf.rmdir()
            index += 1

    mover = threading.Thread(target=migrate)
    if busy:
        mover.start()
    taken = []
    try:
        for index in range(COUNT * 2):
            leaf = base / f"made-{int(busy)}-{index}"
            started = time.perf_counter()
            leaf.mkdir()
            taken.append(time.perf_counter() - started)
            leaf.rmdir()
            time.sleep(0.005)
    finally:
        stop.set()
        if busy:
            mover.join()
    return taken


def main() -> None:
    found = detect_containment()
    if found.cgroup_base is None:
        print(f"no cgroup v2 leaves here: {found.reason}")
        return
    base = found.cgroup_base / f"bench-cgroup-kernel-{os.getpid()}"
    base.mkdir()
    try:
        print("load average before: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        migrations(base)
        print(f"leaf mkdir, no migration in flight:     {ms(mkdirs(base, busy=False))}")
        print(f"leaf mkdir, migrations in flight:       {ms(mkdirs(base, busy=True))}")
        print("load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    finally:
        for child in base.iterdir():
            with contextlib.suppress(OSError):
                child.rmdir()
        base.rmdir()


if __name__ == "__main__":
    main()
