"""A warm claude-agent-acp child's Claude Code CLI, compiled eagerly while it waits.

claude-agent-acp starts its Claude Code CLI (``node cli.js``, a 12 MB bundle) at
``session/new``.  Node compiles a function of that bundle the first time it runs, so
the session's first prompt pays for compiling the CLI's whole turn path (about
0.2-0.5 s here; a second prompt pays nothing of it).  V8's ``--no-lazy`` compiles the
whole bundle when the CLI starts instead: on a warm child that is while it waits, off
the run's path.  It costs the CLI a longer start (about 1.3 s more) and more memory
(about 165 MB more), so a cold run never gets it.

The flag goes where the adapter takes options for the CLI it spawns:
``_meta.claudeCode.options.executableArgs`` of ``session/new``, which its SDK puts
before the script on the node command line (it drops ``NODE_OPTIONS``, and node does
not take ``--no-lazy`` from there anyway).  Nothing of the session changes: the
model's requests are the ones a cold run sends.

Only when all of it is known to hold: the run has no ``memory_max`` (the extra memory
would count against it), the agent named itself claude-agent-acp, the
adapter runs on node (the command is ``node``: the adapter spawns its CLI with the
node that runs it), and its CLI is the bundled script, not a native executable (a
single-file adapter build, or ``CLAUDE_CODE_EXECUTABLE`` naming anything but a
script, would get the flag as a CLI argument).  Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

CLAUDE_AGENT_ACP = "@zed-industries/claude-agent-acp"
"""The name claude-agent-acp gives itself in its ``initialize`` answer (``agentInfo.name``)."""

EAGER_FLAGS = ("--no-lazy",)
"""V8 flags for a warm child's CLI: compile every function when the script loads."""

_NODE_NAMES = frozenset({"node", "nodejs"})
_SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs")
_SINGLE_FILE = "CLAUDE_AGENT_ACP_IS_SINGLE_FILE_BUN"  # the adapter's own single-file build
_CLI_OVERRIDE = "CLAUDE_CODE_EXECUTABLE"  # the adapter runs this as its CLI instead


def warm_session_meta(
    agent_name: str | None, command: str, env: Mapping[str, str], *, memory_max: int | None = None
) -> dict[str, Any]:
    """The ``_meta`` of a warm child's ``session/new``: the eager-compile flags for
    claude-agent-acp's CLI when it runs on node as a script, and the run has no memory
    ceiling of its own (``memory_max``) the flags' memory would count against; else nothing."""
    if memory_max is not None:
        return {}
    if agent_name != CLAUDE_AGENT_ACP or PurePath(command).name not in _NODE_NAMES:
        return {}
    if _SINGLE_FILE in env:
        return {}
    cli = env.get(_CLI_OVERRIDE)
    if cli and not cli.endswith(_SCRIPT_SUFFIXES):
        return {}
    return {"claudeCode": {"options": {"executableArgs": list(EAGER_FLAGS)}}}
