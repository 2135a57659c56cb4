"""The raw results the ACP provider classifies itself, kept by its transport (sans-io)."""

from __future__ import annotations

import pytest

from supervisor.providers.acp._transport import RawResults


def test_the_results_of_watched_requests_are_kept_as_sent() -> None:
    raw = RawResults()
    raw.sent({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}})
    raw.sent({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {}})
    raw.sent({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {}})
    assert not raw.has_session_id()
    raw.received({"jsonrpc": "2.0", "id": 3, "result": {"sessionId": "not this one"}})
    assert not raw.has_session_id()
    raw.received({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s-1"}})
    raw.received({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "beyond_the_vocabulary"}})
    assert raw.has_session_id()
    assert raw.raw_stop_reason() == "beyond_the_vocabulary"


def test_requests_errors_and_odd_ids_from_the_child_are_not_results() -> None:
    raw = RawResults()
    raw.sent({"jsonrpc": "2.0", "id": 0, "method": "session/prompt", "params": {}})
    # a request of the child's own with the same id
    raw.received({"jsonrpc": "2.0", "id": 0, "method": "session/prompt", "params": {}})
    raw.received({"jsonrpc": "2.0", "id": [0], "result": {"stopReason": "x"}})  # unhashable: ignored
    raw.received({"jsonrpc": "2.0", "id": {"a": 1}, "error": {"code": 1, "message": "m"}})
    assert raw.raw_stop_reason() is None
    raw.received({"jsonrpc": "2.0", "id": 0, "error": {"code": -32603, "message": "failed"}})
    assert raw.raw_stop_reason() is None
    raw.received({"jsonrpc": "2.0", "id": 0, "result": {"stopReason": "end_turn"}})  # answered already
    assert raw.raw_stop_reason() is None


@pytest.mark.anyio
async def test_blank_lines_are_skipped_and_anything_else_not_json_rpc_ends_the_stream() -> None:
    """ASCII whitespace alone is a blank line (skipped); a line of other white space (a
    no-break space) is a frame that is not JSON-RPC: a protocol fault, as it always was."""
    import asyncio

    from supervisor.providers.acp._transport import StdioTransport, WireFault, is_json_rpc

    class Writer:
        def is_closing(self) -> bool:
            return False

    async def first(data: bytes) -> tuple[object, WireFault | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        transport = StdioTransport(reader, Writer(), max_frame_bytes=1 << 16, max_inflight=4)  # type: ignore[arg-type]
        return await transport.receive(), transport.fault

    answer = b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    assert await first(b"\n \t\r\x0b\x0c\n" + answer) == ({"jsonrpc": "2.0", "id": 1, "result": {}}, None)
    assert await first("\u00a0\n".encode() + answer) == (None, WireFault.NOT_JSON_RPC)
    assert is_json_rpc({"jsonrpc": "2.0", "method": "m", "params": None})
    assert is_json_rpc({"jsonrpc": "2.0", "method": "m", "params": []})
    assert not is_json_rpc({"jsonrpc": "2.0", "method": "m", "params": "text"})
    assert not is_json_rpc({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}})
