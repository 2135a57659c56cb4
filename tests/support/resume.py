"""The first supervising process of a cold-resume test: a real host that runs turn 1 and dies.

:func:`killed_host` starts ``tests/children/resume_host.py`` with a spec (a kind, its config
keys, a workspace, a task), reads the facts it prints after each turn (the run id, the
agent's session id, the child's pid...), then SIGKILLs it, as a crash or an OOM kill would,
and waits (on pidfds, never on a clock) until its run's child and its keeper are gone: the
agent's session then lives only where the agent kept it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from tests.conftest import CHILDREN, PYTHON, tagged
from tests.support.pidfd import pidfds, wait_gone

RESUME_HOST = CHILDREN / "resume_host.py"
GONE_WITHIN = 60.0  # a bound for "eventually", never a claim about speed


def killed_host(
    spec: dict[str, Any], *, turns: int = 1, persisted: Callable[[], bool] | None = None
) -> list[dict[str, Any]]:
    """Run ``spec``'s conversation in a host of its own for ``turns`` turns, SIGKILL the host,
    and return the facts it printed after each turn (its whole tree is gone by then).

    ``persisted`` (when given) is waited for before the kill: an agent that answers before
    it has written the turn to its own session store (claude-agent-acp does) would
    otherwise lose the turn's answer, which is the agent's window, not the supervisor's."""
    with tempfile.TemporaryFile() as errors:  # the host's own stderr, to say why it stopped early
        facts = _run_and_kill(spec, turns, persisted, errors)
    assert tagged(facts[-1]["run_id"]) == []
    return facts


def _run_and_kill(
    spec: dict[str, Any], turns: int, persisted: Callable[[], bool] | None, errors: IO[bytes]
) -> list[dict[str, Any]]:
    proc = subprocess.Popen(
        [PYTHON, str(RESUME_HOST), json.dumps({**spec, "end": "hang"})],
        stdout=subprocess.PIPE,
        stderr=errors,
        text=True,
    )
    facts: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for _ in range(turns):
            line = proc.stdout.readline()
            if not line:
                errors.seek(0)
                raise AssertionError(f"the first host did not finish its turn: {errors.read()[-3000:]!r}")
            facts.append(json.loads(line))
        if persisted is not None:
            wait_for(persisted)
    finally:
        last = facts[-1] if facts else {}
        fds = pidfds([last.get("child") or 0, last.get("keeper") or 0])
        proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        assert wait_gone(fds, GONE_WITHIN) == []
        assert proc.stdout is not None
        proc.stdout.close()
    return facts


def exiting_host(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Run ``spec``'s conversation in a host of its own that disposes its run and exits 0."""
    done = subprocess.run(
        [PYTHON, str(RESUME_HOST), json.dumps({**spec, "end": "exit"})],
        capture_output=True,
        text=True,
        timeout=GONE_WITHIN * 5,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def wait_for(condition: Callable[[], bool], within: float = GONE_WITHIN) -> None:
    """Wait until ``condition()`` holds (an agent's own write, which sends no event to wait
    on: looked at every 50 ms, bounded by ``within`` for "eventually")."""
    end = time.monotonic() + within
    while not condition():
        assert time.monotonic() < end, "the agent never wrote its session"
        time.sleep(0.05)


def written_under(root: Path, text: str) -> Callable[[], bool]:
    """A ``persisted`` condition: some file under ``root`` holds ``text``."""

    def holds() -> bool:
        for path in root.rglob("*"):
            try:
                if path.is_file() and text in path.read_text(errors="replace"):
                    return True
            except OSError:
                continue
        return False

    return holds
