"""asyncio's own log lines stay off a plain command's stderr (the host log's rule), and
reach it, marked as the host log's, with ``--verbose``.

The line forced here is the one asyncio prints when a child it watches exits after its
event loop was closed: a real child that outlives a closed loop, ended by the test once the
loop is gone, its reap waited for (the watcher thread joined), never timed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import asyncio, os, sys, threading
from supervisor.cli._usage import configure_logging

configure_logging(sys.argv[1] == "verbose")
read, write = os.pipe()

async def start():
    # a child that ends only at EOF on its stdin, which only this process can give
    return await asyncio.create_subprocess_exec(sys.executable, "-c", "import sys; sys.stdin.read()", stdin=read)

process = asyncio.run(start())  # the loop is closed: the child still runs
os.close(read)
os.close(write)  # now it ends, and asyncio's watcher thread reaps it
for thread in threading.enumerate():
    if thread.name.startswith("asyncio-waitpid"):
        thread.join()
print("reaped", flush=True)
"""


def _run(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=120, check=True
    )


def test_a_plain_command_keeps_asyncio_lines_off_stderr() -> None:
    proc = _run("plain")
    assert proc.stdout == "reaped\n"
    assert proc.stderr == ""


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the pidfd child watcher reports no closed loop")
def test_verbose_shows_asyncio_lines_as_the_host_log() -> None:
    proc = _run("verbose")
    assert proc.stdout == "reaped\n"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("subagents [WARNING] Loop <")
    assert lines[0].endswith("is closed")
