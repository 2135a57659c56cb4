"""Both spawn shims, for the tests that must hold of each: the compiled one and the Python one.

``either_shim`` is a fixture parametrized over the two: ``"python"`` sets ``SUBAGENT_SHIM=python``
for the test (every ``shim_command`` and spawn of the test's process then runs the Python shim);
``"compiled"`` makes sure this process has the compiled one.  A machine without a C compiler
skips the compiled case, or fails it where real peers are required (CI: ``cc`` is a peer).
"""

from __future__ import annotations

import shutil

import pytest

from supervisor.process._cshim import COMPILER, FORCE_VARIABLE, default_shim
from tests.support import missing_peer

SHIMS = ("compiled", "python")


def require_compiled_shim() -> str:
    """This process's compiled shim, or the test is skipped (no compiler) / failed (CI, or unsafe)."""
    if shutil.which(COMPILER) is None:
        missing_peer(f"no C compiler ({COMPILER}): the compiled spawn shim cannot be built")
    path = default_shim().path()
    if path is None:
        pytest.fail(f"the compiled spawn shim is unavailable: {default_shim().reason}", pytrace=False)
    return path


@pytest.fixture(params=SHIMS)
def either_shim(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setenv(FORCE_VARIABLE, "python")
    else:
        monkeypatch.delenv(FORCE_VARIABLE, raising=False)
        require_compiled_shim()
    return str(request.param)
