"""``subagents doctor``: what this machine and this install can do, one line per fact.

The lines: the containment available (and why cgroup mode is not), the kernel,
Python, the child subreaper, each provider kind's executable or extra, and a real
run of the built-in example agent.  The status is 0 when that run completed: the
base install works here.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

from supervisor._seam import StopReason, SubagentRequest
from supervisor._sequence import supervise
from supervisor._version import distribution_version
from supervisor.process import detect_containment

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
EXAMPLE_TIMEOUT_SECONDS = 60.0


def containment_line() -> str:
    found = detect_containment()
    if found.cgroup_base is not None:
        return f"containment: cgroup (run leaves under {found.cgroup_base})"
    return f"containment: process-tree (cgroup unavailable: {found.reason})"


def subreaper_line() -> str:
    """Whether ``PR_SET_CHILD_SUBREAPER`` takes (set, read back, restored)."""
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        before = ctypes.c_int(0)
        if prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0) != 0:
            return "subreaper: unavailable (prctl refused)"
        if prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            return "subreaper: unavailable (prctl refused)"
        after = ctypes.c_int(0)
        prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(after), 0, 0, 0)
        prctl(_PR_SET_CHILD_SUBREAPER, before.value, 0, 0, 0)
    except (OSError, AttributeError):
        return "subreaper: unavailable (no prctl)"
    return "subreaper: available" if after.value == 1 else "subreaper: unavailable (not kept)"


def provider_lines() -> list[str]:
    from supervisor.providers.acp import EXAMPLE_AGENT

    lines = []
    if EXAMPLE_AGENT.is_file() and importlib.util.find_spec("acp") is not None:
        lines.append(f"provider acp: found (built-in example agent {EXAMPLE_AGENT})")
    else:
        lines.append("provider acp: missing (the example agent or the acp SDK is not installed)")
    lines.append("provider dsh-sdk: found (base install; the runtime is the configured command)")
    if importlib.util.find_spec("claude_agent_sdk") is not None:
        sdk = distribution_version("claude-agent-sdk") or "unknown version"
        lines.append(f"provider claude-code: found (claude-agent-sdk {sdk})")
    else:
        lines.append("provider claude-code: missing (install the claude-code extra)")
    lines.append(_codex_line())
    return lines


def _codex_line() -> str:
    """The ``openai-codex-cli-bin`` wheel's binary, resolved as the codex provider does."""
    try:
        module = importlib.import_module("codex_cli_bin")
        path = Path(module.bundled_codex_path())
    except (ImportError, OSError, AttributeError, TypeError, ValueError):
        return "provider codex: missing (install the codex extra, or set codex_path)"
    if not path.is_file() or not os.access(path, os.X_OK):
        return f"provider codex: missing ({path} is not executable; set codex_path)"
    return f"provider codex: found ({path})"


async def _run_example() -> str | None:
    from supervisor.providers import acp

    config = acp.example_agent_config(stderr="discard")
    run = acp.Provider(config).create_run(SubagentRequest(task="doctor", parent_cwd=Path.cwd()))
    with anyio.move_on_after(EXAMPLE_TIMEOUT_SECONDS):
        return (await supervise(run)).stop_reason
    return None


def example_line() -> tuple[str, bool]:
    stop = anyio.run(_run_example, backend="asyncio")
    if stop == StopReason.COMPLETED:
        return "example agent: ran (completed)", True
    return f"example agent: did not complete ({stop or 'no result'})", False


def doctor(write: Callable[[str], object]) -> int:
    """Print the facts through ``write``; 0 when the example agent ran to completion."""
    write(containment_line())
    write(f"kernel: {platform.system()} {os.uname().release}")
    write(f"python: {platform.python_version()} ({sys.executable})")
    write(subreaper_line())
    for line in provider_lines():
        write(line)
    line, ok = example_line()
    write(line)
    return 0 if ok else 1
