"""The Codex provider's lifecycle: ``codex app-server`` driven over JSON-RPC (JSONL).

Stages
------
``initialize``    spawn, ``initialize`` request, ``initialized`` notification;
``thread-start``  ``thread/start`` (cwd, ephemeral, approval policy and sandbox by mode);
                  the run is published once the thread exists;
``turn-start``    ``turn/start`` with the task, until its response names the turn;
``turn``          notifications until ``turn/completed`` for this thread and turn;
``process``       the app-server exited before a terminal result (its exit observed);
``teardown``      the whole tree is taken down (stdin EOF, SIGTERM, SIGKILL).

Every event is the protocol or process fact that caused it.  A terminal
``turn/completed`` settles the run whatever its status; failures without a finer fact
settle through the shared ``failed`` row, local cancellation through ``cancelled``.
"""

from __future__ import annotations

from machines._lifecycle import SETTLED, build_lifecycle, common_rows

STAGES = ("initialize", "thread-start", "turn-start", "turn", "process", "teardown")

CodexLifecycle = build_lifecycle(
    "CodexLifecycle",
    stages=STAGES,
    table=(
        ("initialized", "initialize", "thread-start"),
        ("thread_started", "thread-start", "turn-start"),
        ("turn_started", "turn-start", "turn"),
        ("turn_completed", "turn", SETTLED),
        ("app_server_exited", "initialize", "process"),
        ("app_server_exited", "thread-start", "process"),
        ("app_server_exited", "turn-start", "process"),
        ("app_server_exited", "turn", "process"),
        *common_rows(
            startup=("initialize", "thread-start", "process"),
            running=("turn-start", "turn", "process"),
            teardown="teardown",
        ),
    ),
    doc="The Codex provider's lifecycle (codex app-server over JSONL JSON-RPC).",
)

__all__ = ("STAGES", "CodexLifecycle")
