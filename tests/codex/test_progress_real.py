"""Progress from the real ``codex app-server``: its items, plan and token counts, closed values only."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor import progress_line
from supervisor.providers.codex import PermissionMode
from tests.mockmodel import MockModelServer, Shell, Text
from tests.support.codex import Transcript, provider, run_once
from tests.support.peers import PeerLaunch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]


async def test_a_command_is_counted_and_the_tokens_are_the_turns(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript, tmp_path: Path
) -> None:
    marker = tmp_path / "SECRET-MARKER.txt"
    mock.script(Shell(f"touch {marker}"), Text("written"))
    codex = provider(launch, transcript, permission_mode=PermissionMode.BYPASS)
    result, run = await run_once(codex, launch.cwd)
    assert result.output == "written"
    final = run.progress
    assert final.tool_calls == {"commandExecution": 1}
    assert final.tool_call_status == {"completed": 1}
    assert final.answer_bytes == len(b"written")
    assert final.usage == result.usage
    assert final.settled
    line = progress_line(final)
    assert line.startswith("teardown · turn 1 · ")  # read after the run was disposed
    assert "1 tool call (commandExecution 1) · 7 answer bytes" in line
    assert "SECRET" not in line
    assert "SECRET" not in repr(final)
