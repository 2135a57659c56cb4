"""Cold start: what a harness feels first (no SDK is imported before it is needed).
Run: ``python -m benchmarks.bench_cold_start``.

Each command is a fresh process, measured against its reference in the same run,
interleaved, ``BENCH_ROUNDS`` times (default 15); the figures are medians of wall time:

- ``subagents --version`` and ``subagents --help``: goal <= 100 ms;
- ``python -c "import supervisor"`` (and which heavy modules it loaded: none of the front-ends,
  protocol SDKs or OpenTelemetry may be among them);
- ``subagents mcp`` until it answers ``initialize`` on stdout, against ``python -c`` importing
  what the server imports from the ``mcp`` SDK: goal <= that + 150 ms;
- ``subagents run "say hello"`` (the built-in example agent, to its exit) against
  ``python -c "import acp"``: goal <= that + 200 ms.  Both references end with ``os._exit(0)``
  once imported: their time is the import's, not the interpreter's teardown after it;
- ``python -c pass``: the interpreter alone, for scale; and the same run through ``main()`` with the
  interpreter's own exit, for what the executable's quick exit saves.

Bytecode: the package is compiled first (``compileall``), as an installed wheel would be; an
editable install in an environment with ``PYTHONDONTWRITEBYTECODE`` otherwise recompiles every
module at every start.  The machine's load average is printed before and after.
"""

from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "15"))
PYTHON = sys.executable
CLI = [PYTHON, "-m", "supervisor.cli"]
SUBAGENTS = Path(PYTHON).with_name("subagents")  # the console script, as a user runs it
# The references end with os._exit: an import's time, without the interpreter's teardown afterwards
# (hundreds of ms once the SDKs' pydantic models are loaded), which the measured commands skip too.
MCP_IMPORT = (
    "import mcp_types, os; from mcp.server import Server, ServerRequestContext; import mcp.server.stdio"
)
ACP_IMPORT = "import acp, os"
END = "; os._exit(0)"
# What the quick exit saves: the same run through main(), then the interpreter's own exit.
OWN_EXIT = "import sys; from supervisor.cli import main; sys.exit(main(['run', 'say hello']))"
HEAVY = (
    "supervisor.cli",
    "supervisor.batching",
    "supervisor.mcp",
    "acp",
    "mcp",
    "claude_agent_sdk",
    "opentelemetry",
)
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


def timed(argv: list[str], **kwargs: object) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    return time.perf_counter() - started


def mcp_initialize(cwd: Path) -> float:
    """Spawn ``subagents mcp``, send ``initialize``, return when its answer is read."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(SUBAGENTS), "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    proc.stdin.write(json.dumps(INITIALIZE).encode() + b"\n")
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("subagents mcp closed stdout before answering initialize")
        if json.loads(line).get("id") == 1:
            break
    elapsed = time.perf_counter() - started
    proc.stdin.close()
    proc.wait(timeout=60)
    return elapsed


def loaded_by_import() -> list[str]:
    code = "import sys, supervisor; print('\\n'.join(sys.modules))"
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True).stdout
    return sorted({m for m in out.split() if any(m == h or m.startswith(h + ".") for h in HEAVY)})


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    for package in ("supervisor", "machines"):
        compileall.compile_dir(root / package, quiet=1)
    print(f"load average before: {load()}; {ROUNDS} rounds, medians of wall time")
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        contenders: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: timed([PYTHON, "-c", "pass"]),
            "subagents --version": lambda: timed([str(SUBAGENTS), "--version"]),
            "subagents --help": lambda: timed([str(SUBAGENTS), "--help"]),
            "python -c 'import supervisor'": lambda: timed([PYTHON, "-c", "import supervisor"]),
            "mcp SDK import (what the server imports)": lambda: timed([PYTHON, "-c", MCP_IMPORT + END]),
            "subagents mcp: initialize answered": lambda: mcp_initialize(cwd),
            "python -c 'import acp'": lambda: timed([PYTHON, "-c", ACP_IMPORT + END]),
            'subagents run "say hello" (to exit)': lambda: timed(
                [str(SUBAGENTS), "run", "say hello"], cwd=cwd
            ),
            "the same, with the interpreter's own exit": lambda: timed([PYTHON, "-c", OWN_EXIT], cwd=cwd),
        }
        for measure in contenders.values():  # warm the page cache
            measure()
        samples: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(ROUNDS):
            for name, measure in contenders.items():
                samples[name].append(measure())
    median = {name: statistics.median(values) * 1000 for name, values in samples.items()}
    for name, value in median.items():
        print(f"  {name:<44} {value:8.1f} ms")
    mcp_gap = (
        median["subagents mcp: initialize answered"] - median["mcp SDK import (what the server imports)"]
    )
    run_gap = median['subagents run "say hello" (to exit)'] - median["python -c 'import acp'"]
    verdicts = [
        ("--version <= 100 ms", median["subagents --version"], 100.0),
        ("--help <= 100 ms", median["subagents --help"], 100.0),
        ("mcp initialize - mcp import <= 150 ms", mcp_gap, 150.0),
        ('run "say hello" - import acp <= 200 ms', run_gap, 200.0),
    ]
    print("goals:")
    for goal, value, limit in verdicts:
        print(f"  {goal:<44} {value:8.1f} ms  {'met' if value <= limit else 'NOT met'}")
    heavy = loaded_by_import()
    print(f"  import supervisor loads no front-end, SDK or OpenTelemetry: {heavy if heavy else 'met'}")
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
