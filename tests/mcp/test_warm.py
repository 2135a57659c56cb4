"""``subagents mcp --warm N``: warm children of the default provider in the first root.

Driven by the official MCP SDK's client over real stdio; the children are the built-in
example agent.  The server's host log (``--verbose``, on its stderr) says when a warm
child is ready, with its run id; the run the tool call answers with is that child's.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
from pathlib import Path

import anyio
import psutil
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import tagged
from tests.mcp.test_server import EXAMPLE_ANSWER_START, SERVER

pytestmark = pytest.mark.anyio


READY = re.compile(r"run ([0-9a-f-]{36}): a warm child of 'acp' is ready")


def ready_ids(log: Path) -> list[str]:
    return READY.findall(log.read_text(errors="replace")) if log.exists() else []


def warm_tags(cwd: Path) -> set[str]:
    """The run tags of the supervised children working in ``cwd``."""
    found = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            tag = proc.environ().get("SUBAGENT_SUPERVISOR_RUN")
            if tag and proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()) == cwd:
                found.add(tag)
    return found


async def test_a_tool_call_runs_on_a_warm_child_and_the_server_ends_the_rest(tmp_path: Path) -> None:
    root = tmp_path.resolve()
    log = tmp_path / "server.log"
    params = StdioServerParameters(
        command=SERVER[0],
        args=[*SERVER[1:], "--warm", "1", "--verbose", "--root", str(root)],
        cwd=str(tmp_path),
    )
    with log.open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            with anyio.fail_after(120):
                while not ready_ids(log):  # noqa: ASYNC110 - the server's log is the only signal
                    await anyio.sleep(0.02)
            (warm,) = ready_ids(log)
            result = await session.call_tool("run_subagent", {"task": "say hello"})
            assert not result.is_error
            assert result.meta is not None
            facts = result.meta["subagent-supervisor/result"]
            assert facts["run_id"] == warm
            assert facts["output"].startswith(EXAMPLE_ANSWER_START)
            with anyio.fail_after(120):  # refilled once the run's first turn settled
                while len(ready_ids(log)) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.02)
            refill = ready_ids(log)[1]
            assert tagged(refill)
    assert tagged(warm) == []
    assert tagged(refill) == []  # the server ended its warm child
    assert warm_tags(root) == set()


def test_a_bad_warm_count_is_a_usage_error_before_serving(tmp_path: Path) -> None:
    proc = subprocess.run([*SERVER, "--warm", "-1"], capture_output=True, text=True, cwd=tmp_path)
    assert (proc.returncode, proc.stderr) == (2, "subagents: argument --warm: must be a positive integer\n")
