"""The test suite's own rule for real peers: skip on a developer's machine, fail in CI."""

from __future__ import annotations

import pytest

from tests.support import REQUIRE_PEERS_VARIABLE, missing_peer, require_module


def test_a_missing_peer_fails_where_peers_are_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_PEERS_VARIABLE, "1")
    with pytest.raises(pytest.fail.Exception, match="a required real peer is missing: gone"):
        missing_peer("gone")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_here is not installed"):
        require_module("no_such_module_here")


def test_a_missing_peer_skips_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_PEERS_VARIABLE, raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="gone"):
        missing_peer("gone")


def test_ci_true_requires_peers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REQUIRE_PEERS_VARIABLE, raising=False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        missing_peer("gone")
