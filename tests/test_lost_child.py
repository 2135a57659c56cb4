"""A start that loses its child says, in the host log, which fact it saw first; an exit by the
supervisor's own teardown signal is never reported as the child's doing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from anyio.abc import TaskGroup

from machines import AuditTrail, TeardownLadder
from supervisor import Registry, StartFailed, SubagentRequest
from supervisor.process import Containment, ManagedProcess
from supervisor.process._pipes import LOST_FACTS
from supervisor.providers.acp import Provider
from supervisor.providers.acp._lost import caused_by_teardown
from tests.acp.test_provider import child
from tests.test_process import spec_for

pytestmark = pytest.mark.anyio


async def test_a_start_whose_child_is_killed_names_the_facts_it_saw(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry()
    registry.register(Provider(child(SIGNAL_AT="initialize", SIGNAL="SIGTERM")))
    with caplog.at_level(logging.WARNING, logger="supervisor"), pytest.raises(StartFailed) as info:
        async with registry.run("acp", SubagentRequest(task="t", parent_cwd=tmp_path)):
            pytest.fail("must not publish")
    # someone else's SIGTERM (here the child's own): the cause, reported as such
    assert (
        str(info.value)
        == "Subagent failure (provider: ACP; stage: initialize; category: process-exit; signal: SIGTERM)"
    )
    lines = [r.getMessage() for r in caplog.records if "lost its child in initialize" in r.getMessage()]
    assert len(lines) == 1, lines
    first = lines[0].split("first saw ", 1)[1].split(" ", 1)[0]
    assert first in LOST_FACTS
    assert "the child: signal SIGTERM" in lines[0]
    assert "teardown's own" not in lines[0]


async def test_an_exit_by_the_teardowns_own_signal_is_known_as_such(
    tmp_path: Path, task_group: TaskGroup, containment: Containment
) -> None:
    proc = await ManagedProcess.spawn(
        spec_for("ignore-eof", cwd=tmp_path, containment=containment), task_group
    )
    assert (await proc.stdout.readline()).startswith(b"ready")
    assert not caused_by_teardown(proc, proc.exit_facts)
    report = await proc.teardown(
        TeardownLadder(listeners=[AuditTrail("test")]), eof_grace=0.2, term_grace=5.0, kill_wait=5.0
    )
    assert report.exit is not None
    assert report.exit.signal == "SIGTERM"
    assert caused_by_teardown(proc, report.exit)
    assert proc.lost_facts[0] == "eof-sent"
    assert "exited" in proc.lost_facts
