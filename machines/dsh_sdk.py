"""The lifecycle of one DSH SDK run (initialize, session-run, shutdown).

``initialize`` covers the cwd check, the spawn and the ``initialize`` request with its
server identity check; the run is published once the runtime answered it.
``session-run`` is the ``session/prompt`` exchange and the turn it starts: the inbox
receipt of the prompt (``agent/inbox/spliced`` naming its message id) is recorded as
it arrives, and the turn settles when the root session reports ``idle`` or the wire
fails (transport closed, a protocol violation, a JSON-RPC error answer).
``shutdown`` is the teardown: the bounded ``shutdown`` request, then the whole-tree
ladder (stdin EOF, SIGTERM, SIGKILL), recorded by the ladder's own chart.
"""

from __future__ import annotations

from machines._lifecycle import SETTLED, build_lifecycle, common_rows

DshSdkLifecycle = build_lifecycle(
    "DshSdkLifecycle",
    stages=("initialize", "session-run", "shutdown"),
    table=(
        ("initialize_answered", "initialize", "session-run"),
        ("prompt_spliced", "session-run", "session-run"),
        ("root_idle", "session-run", SETTLED),
        ("transport_closed", "session-run", SETTLED),
        ("protocol_violated", "session-run", SETTLED),
        ("error_answered", "session-run", SETTLED),
        ("shutdown_acknowledged", "shutdown", "shutdown"),
        *common_rows(
            startup=("initialize", "session-run"),
            running=("session-run",),
            teardown="shutdown",
        ),
    ),
    doc=__doc__ or "",
)

MACHINES = (DshSdkLifecycle,)
