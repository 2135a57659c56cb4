"""The one JSON-RPC core (pending map, close-once fan-out, write lock) the clients share."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from supervisor.wire import CloseOnce, FrameWriter, Pending, PendingRequests, encode_frame, is_request_id

pytestmark = pytest.mark.anyio


async def test_a_pending_request_is_settled_once() -> None:
    pending = Pending("m")
    assert pending.settle(result=1)
    assert not pending.settle(error=RuntimeError("late"))
    assert await pending.wait() == 1


async def test_closing_fails_every_pending_request_with_its_own_error_once() -> None:
    requests: PendingRequests[Pending] = PendingRequests()
    first, second = requests.add(1, Pending("a")), requests.add("x", Pending("b"))
    close: CloseOnce[str] = CloseOnce()
    heard: list[str] = []
    close.on_close(lambda reason: requests.fail_all(lambda: ConnectionError(reason)))
    close.on_close(heard.append)
    assert close.close("eof")
    assert not close.close("broken-pipe")
    assert close.reason == "eof"
    assert heard == ["eof"]
    assert len(requests) == 0
    for pending in (first, second):
        with pytest.raises(ConnectionError, match="eof"):
            await pending.wait()
    assert first.error is not second.error
    await close.wait()


async def test_frames_never_interleave_and_a_closed_connection_refuses() -> None:
    written: list[bytes] = []

    async def write(data: bytes) -> None:
        for byte in data:
            written.append(bytes([byte]))
            await anyio.lowlevel.checkpoint()

    frames = FrameWriter(write)
    async with anyio.create_task_group() as tg:
        tg.start_soon(frames.send, encode_frame({"id": 1}))
        tg.start_soon(frames.send, encode_frame({"id": 2}))
    assert b"".join(written) in (b'{"id":1}\n{"id":2}\n', b'{"id":2}\n{"id":1}\n')

    def refuse() -> None:
        raise ConnectionError("closed")

    with pytest.raises(ConnectionError):
        await frames.send(b"x\n", check=refuse)


def test_request_ids() -> None:
    assert is_request_id(0)
    assert is_request_id("req_1")
    assert not is_request_id(True)
    assert not is_request_id(None)
    assert encode_frame({"a": "é"}, ascii_only=True) == b'{"a":"\\u00e9"}\n'
