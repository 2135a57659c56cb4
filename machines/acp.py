"""The lifecycle of one ACP run (initialize, new-session, prompt, process, teardown).

``initialize`` covers the cwd check, the spawn, the ACP ``initialize`` request and the
optional ``authenticate``; ``process`` is entered when the spawn fails or the child
exits before the prompt's terminal response.
"""

from __future__ import annotations

from machines._lifecycle import SETTLED, build_lifecycle, common_rows

AcpLifecycle = build_lifecycle(
    "AcpLifecycle",
    stages=("initialize", "new-session", "prompt", "process", "teardown"),
    table=(
        ("spawn_failed", "initialize", "process"),
        ("initialize_answered", "initialize", "new-session"),
        ("session_created", "new-session", "prompt"),
        ("stop_reason_received", "prompt", SETTLED),
        ("prompt_failed", "prompt", SETTLED),
        ("child_exited", "prompt", "process"),
        ("exit_observed", "process", SETTLED),
        *common_rows(
            startup=("initialize", "new-session", "process"),
            running=("prompt", "process"),
            teardown="teardown",
        ),
    ),
    doc=__doc__ or "",
)

MACHINES = (AcpLifecycle,)
