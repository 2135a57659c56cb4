"""The keeper never holds its host up: stopped, slow or dead, the host's runs go on.

The host is a real ``subagents batch`` process; its keeper is stopped with SIGSTOP and
its pipe shrunk to one page, so a host that wrote to it blocking would stall after a
few dozen runs.  Every wait is on an event (a FIFO opened, a process exiting) with a
generous bound for "eventually"; nothing here measures time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from supervisor.process._keeper_main import KEEPER_NAME
from tests.conftest import CHILDREN, PYTHON

# The keeper stopped and its pipe shrunk under a long batch: alone on the machine (see conftest).
pytestmark = pytest.mark.serial

ACP_CHILD = str(CHILDREN / "acp_child.py")
GONE_WITHIN = 300.0  # a bound for "eventually", never a claim about speed
ONE_PAGE = 4096


def acp_entry(name: str, env: dict[str, str]) -> str:
    pairs = ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items())
    return (
        f'[[provider]]\nkind = "acp"\nname = "{name}"\ncommand = {json.dumps(PYTHON)}\n'
        f'args = ["-I", {json.dumps(ACP_CHILD)}]\nenv = {{ {pairs} }}\n'
    )


def keeper_of(pid: int) -> psutil.Process:
    (keeper,) = [p for p in psutil.Process(pid).children() if p.name() == KEEPER_NAME]
    return keeper


def shrink_pipe(keeper: int) -> None:
    """Make the keeper's pipe hold one page (opening /proc/<pid>/fd/0 reaches the same pipe)."""
    fd = os.open(f"/proc/{keeper}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, ONE_PAGE)
        assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == ONE_PAGE
    finally:
        os.close(fd)


def test_a_stopped_keeper_never_stalls_a_batch(tmp_path: Path) -> None:
    """The first task waits at a gate until the keeper is stopped and its pipe holds one page;
    then 80 more runs announce and withdraw themselves (some 12 KiB for the pipe) and every
    record still comes out."""
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    config = tmp_path / "c.toml"
    config.write_text(acp_entry("gated", {"ACP_CHILD_GATE": str(gate)}) + "\n" + acp_entry("fast", {}))
    items = [{"id": "gated", "task": "t", "provider": "gated"}]
    items += [{"id": f"item-{n}", "task": "t", "provider": "fast"} for n in range(80)]
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(item) + "\n" for item in items))
    cli = subprocess.Popen(
        [sys.executable, "-m", "supervisor.cli", "batch", str(source), "--config", str(config)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    keeper: psutil.Process | None = None
    try:
        with open(gate, "wb"):  # returns once the gated child waits at its gate: a keeper runs
            keeper = keeper_of(cli.pid)
            keeper.suspend()
            shrink_pipe(keeper.pid)
        out, _ = cli.communicate(timeout=GONE_WITHIN)
        assert keeper.status() == psutil.STATUS_STOPPED  # stopped all along
        assert cli.returncode == 0
        records = [json.loads(line) for line in out.splitlines()]
        assert sorted(r["id"] for r in records) == sorted(item["id"] for item in items)
        assert all(r["quiescent"] for r in records)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
        if keeper is not None:
            with contextlib.suppress(psutil.Error):
                keeper.resume()  # it reads what the host left, finds the pipe closed and exits
                keeper.wait(GONE_WITHIN)


SEQUENTIAL_RUNS = """
import sys, anyio
from pathlib import Path
from supervisor import AbortSignal, SubagentRequest
from supervisor.providers import acp

async def main(count):
    provider = acp.Provider(acp.example_agent_config())
    for _ in range(count):
        run = provider.create_run(SubagentRequest(task="hi", parent_cwd=Path.cwd()))
        async with anyio.create_task_group() as tg:
            await run.start(tg, AbortSignal())
            await run.result()
            await run.dispose()

anyio.run(main, int(sys.argv[1]), backend="asyncio")
"""


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_run_costs_one_write_to_the_keeper(tmp_path: Path) -> None:
    """Each run's withdrawal travels with the next run's announcement: five runs in a row are
    five writes, plus one at exit for the last withdrawal (it was two writes per run)."""
    trace = tmp_path / "trace"
    host = subprocess.run(
        [
            "strace",
            "-f",
            "-qq",
            "-s",
            "4096",
            "-e",
            "trace=write",
            "-o",
            str(trace),
            PYTHON,
            "-c",
            SEQUENTIAL_RUNS,
            "5",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=GONE_WITHIN,
    )
    assert host.returncode == 0, host.stderr[-2000:]
    writes = [line for line in trace.read_text().splitlines() if re.search(r'write\(\d+, "[+-]run ', line)]
    assert sum(line.count("+run ") for line in writes) == 5
    assert sum(line.count("-run ") for line in writes) == 5
    assert len(writes) == 6, "\n".join(writes)
