"""The raw results the ACP provider classifies itself, kept by its transport (sans-io)."""

from __future__ import annotations

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
