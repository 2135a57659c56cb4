"""A warm Codex app-server (spawned and handshaken before its task): the real binary, the mock model
on 127.0.0.1.

The warm child has done ``initialize`` and ``thread/start`` before any task exists; the
run that takes it sends ``turn/start`` on that thread straight away.
"""

from __future__ import annotations

import pytest

from supervisor import Registry, StopReason
from tests.conftest import tagged
from tests.mockmodel import MockModelServer, Text
from tests.support.codex import Transcript, provider, request
from tests.support.peers import PeerLaunch

pytestmark = [pytest.mark.anyio, pytest.mark.real_peer]


async def test_a_run_takes_a_warm_app_server_and_starts_at_its_turn(
    mock: MockModelServer, launch: PeerLaunch, transcript: Transcript
) -> None:
    mock.script(Text("warm answer"), Text("second answer"))
    registry = Registry()
    registry.register(provider(launch, transcript))
    async with registry:
        await registry.prestart("codex", 1, cwd=launch.cwd)
        assert registry._warm is not None
        (slot,) = registry._warm._slots.values()
        (waiting,) = [run.id for run in slot.ready]
        assert transcript.results("thread/start")  # the thread exists before any task
        assert transcript.sent("turn/start") == []
        assert mock.model_requests == []
        async with registry.run("codex", request(launch.cwd, "turn one"), conversation=True) as run:
            assert run.id == waiting
            first = await run.result()
            second = await run.send("turn two")
        # the refill (started after the first turn settled) is ended with the registry
    assert first.output == "warm answer"
    assert first.stop_reason == StopReason.COMPLETED
    assert second.output == "second answer"
    assert run.quiescent is True
    assert tagged(run.id) == []
    texts = [frame["params"]["input"][0]["text"] for frame in transcript.sent("turn/start")]
    assert texts == ["turn one", "turn two"]
