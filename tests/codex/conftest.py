"""Fixtures of the codex tests: the pinned binary, its generated schema, a mock model server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mockmodel import MockModelServer
from tests.support import missing_peer
from tests.support.codex import Transcript
from tests.support.codex_schema import ProtocolSchema, generate
from tests.support.peers import PeerLaunch, PeerNotInstalled, codex_app_server_launch, codex_binary


@pytest.fixture(scope="session")
def codex_bin() -> Path:
    """The native codex binary of @openai/codex (``npm ci`` in tests/)."""
    try:
        return codex_binary()
    except PeerNotInstalled as exc:
        missing_peer(str(exc))
        raise


@pytest.fixture(scope="session")
def protocol(codex_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> ProtocolSchema:
    """The app-server protocol schema, generated now by the pinned binary (never vendored)."""
    top = tmp_path_factory.mktemp("codex-schema")
    return ProtocolSchema(generate(codex_bin, top / "schema", top / "home"))


@pytest.fixture
def mock() -> Iterator[MockModelServer]:
    with MockModelServer() as server:
        yield server


@pytest.fixture
def launch(mock: MockModelServer, codex_bin: Path, tmp_path: Path) -> Iterator[PeerLaunch]:
    """An isolated CODEX_HOME whose model provider is the mock."""
    with codex_app_server_launch(mock, root=tmp_path) as peer:
        yield peer


@pytest.fixture
def transcript(protocol: ProtocolSchema) -> Iterator[Transcript]:
    """Every frame of the test's runs; validated against the generated schema afterwards."""
    recorded = Transcript()
    yield recorded
    for frames in recorded.by_run.values():
        protocol.validate(frames)
