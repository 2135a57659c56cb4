"""Where the time of ``subagents run "say hello"`` goes (run: python -m benchmarks.bench_cli).

Wall time is measured around the real CLI process; the phases come from its own
``--json`` audit trail (``t`` is seconds since the run started).  ``startup`` is what
happens before the run starts: interpreter, imports, argument and config handling.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time


def one_run() -> dict[str, float]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", "--json", "say hello"],
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - started
    audit = {e["event"]: e["t"] for e in json.loads(proc.stdout)["audit"]}
    run_total = audit["tree_gone"]
    return {
        "wall": wall,
        "startup + exit (outside the run)": wall - run_total,
        "child start + initialize": audit["initialize_answered"],
        "session/new": audit["session_created"] - audit["initialize_answered"],
        "prompt": audit["stop_reason_received"] - audit["session_created"],
        "teardown": run_total - audit["dispose_requested"],
    }


def import_time() -> float:
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import supervisor.cli._main"], check=True)
        samples.append(time.perf_counter() - started)
    bare = []
    for _ in range(5):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - started)
    return statistics.median(samples) - statistics.median(bare)


def main() -> None:
    runs = [one_run() for _ in range(int(os.environ.get("BENCH_RUNS", "10")))]
    for key in runs[0]:
        print(f"{key:<40} median {statistics.median(r[key] for r in runs) * 1000:8.1f} ms")
    print(f"{'of which: import supervisor.cli._main':<40} median {import_time() * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
