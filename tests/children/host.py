"""A supervising host for the host-death tests: one run through the public API, then wait.

Usage: ``host.py PID_FILE [subreaper-off] [cgroup|process-tree] [pid-namespace]``.  It starts an
``acp`` run of the scripted ACP child with a grandchild in the child's group (with
``pid-namespace``: an ``unshare --pid --fork`` tree instead) and a ``setsid`` daemon,
whose turn never ends.  Once the run is started it prints one JSON line on stdout:
``{"run_id", "host", "keeper", "child", "descendants"}`` and then waits for the turn
forever, so the test can kill it (and its keeper) mid-run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from supervisor import AbortSignal, StderrMode, SubagentRequest
from supervisor.process import keeper_pid, this_host
from supervisor.providers import acp

ACP_CHILD = Path(__file__).resolve().with_name("acp_child.py")


async def main(pid_file: Path, subreaper: bool, containment: str, grandchild: str) -> None:
    env: dict[str, str | None] = {
        "ACP_CHILD_GRANDCHILD": grandchild,
        "ACP_CHILD_DAEMON": "1",
        "ACP_CHILD_GRANDCHILD_PID_FILE": str(pid_file),
        "ACP_CHILD_HANG": "1",
    }
    config = acp.Config(
        command=sys.executable,
        args=["-I", str(ACP_CHILD)],
        env=env,
        stderr=StderrMode.DISCARD,
        subreaper=subreaper,
        containment=containment,  # type: ignore[arg-type]
        # ``unshare --pid`` needs CAP_SYS_ADMIN, which a root supervisor's child no longer has
        keep_capabilities=["sys_admin"] if grandchild == "pid-namespace" else [],
    )
    run = acp.Provider(config).create_run(SubagentRequest(task="wait", parent_cwd=Path.cwd()))
    async with anyio.create_task_group() as tg:
        await run.start(tg, AbortSignal())
        assert run.process is not None
        descendants = [int(line) for line in pid_file.read_text().split()]
        facts = {
            "run_id": run.id,
            "host": str(this_host()),
            "keeper": keeper_pid(),
            "child": run.process.pid,
            "descendants": descendants,
        }
        sys.stdout.write(json.dumps(facts) + "\n")
        sys.stdout.flush()
        await run.result()


if __name__ == "__main__":
    os.chdir(Path(sys.argv[1]).parent)
    modes = [arg for arg in sys.argv[2:] if arg in ("cgroup", "process-tree")]
    mode = modes[0] if modes else "auto"
    grandchild = "pid-namespace" if "pid-namespace" in sys.argv[2:] else "1"
    subreaper = "subreaper-off" not in sys.argv[2:]
    anyio.run(main, Path(sys.argv[1]), subreaper, mode, grandchild, backend="asyncio")
