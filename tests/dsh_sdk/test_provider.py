"""The ``dsh-sdk`` provider, end to end: the fake DSH runtime over real stdio, through
``Registry().run(...)``.

Nothing here sleeps: tests wait on run events (``output_arrived``, ``result``) or on
FIFOs the fake writes to (``FAKE_DSH_READY_FILE`` when a prompt arrives,
``FAKE_DSH_RECORD`` when any line arrives).  Graces are small where a ladder rung is
meant to expire; the autouse leak guard proves every tree was reaped.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from pydantic import ValidationError

from machines import Transition
from machines.dsh_sdk import MACHINES, DshSdkLifecycle
from supervisor import (
    AbortSignal,
    ExitFacts,
    JobOutcome,
    JobStatus,
    Registry,
    Run,
    StartAborted,
    StartFailed,
    StopReason,
    SubagentRequest,
    SubagentResult,
    TeardownFailed,
    UnsupportedCapability,
    foreground_text,
    installed_kinds,
    job_outcome,
)
from supervisor._seam import Capabilities
from supervisor.process import Containment
from supervisor.providers.dsh_sdk import Config, DshSdkRun, Provider
from supervisor.providers.dsh_sdk._client import (
    DshClient,
)
from supervisor.providers.dsh_sdk._errors import (
    DshError,
    DshProtocolError,
    DshRpcError,
    DshTimeout,
    DshTransportClosed,
)
from supervisor.providers.dsh_sdk._fold import (
    TurnEnd,
)
from supervisor.providers.dsh_sdk._run import child_outcome, failure_category
from tests.conftest import CHILDREN, PYTHON, internals
from tests.support.unkillable import UnkillableTree, phantom_process

pytestmark = pytest.mark.anyio

FAKE = CHILDREN / "fake_dsh_runtime.py"
SECRET = "dsh-secret-" + uuid.uuid4().hex
TIMEOUT = 20.0
RECORD = "received.jsonl"
SESSION_ID = re.compile(r"session-[0-9a-f]{32}")


def line(stage: str, category: str) -> str:
    return f"Subagent failure (provider: DSH SDK; stage: {stage}; category: {category})"


def dsh(
    tmp_path: Path,
    knobs: Mapping[str, str] | None = None,
    *,
    name: str | None = None,
    record: Path | None = None,
    env: Mapping[str, str | None] | None = None,
    tree: Containment | None = None,
    **keys: Any,
) -> Provider:
    """A dsh-sdk provider running the fake, scripted by ``FAKE_DSH_<knob>`` values."""
    child_env: dict[str, str | None] = {"FAKE_DSH_RECORD": str(record or tmp_path / RECORD)}
    child_env.update({f"FAKE_DSH_{knob}": value for knob, value in (knobs or {}).items()})
    child_env.update(env or {})
    settings: dict[str, Any] = {
        "command": PYTHON,
        "args": [str(FAKE)],
        "env": child_env,
        "stderr": "log",
        "dispose_eof_grace_ms": 2000,
        "dispose_grace_ms": 1000,
        **keys,
    }
    return Provider(Config.model_validate(settings), name=name, tree=tree)


def registry_with(*providers: Provider) -> Registry:
    registry = Registry()
    for provider in providers:
        registry.register(provider)
    return registry


def request(tmp_path: Path | None, task: str = "do the thing") -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=tmp_path)


async def run_once(
    provider: Provider, tmp_path: Path, task: str = "do the thing"
) -> tuple[SubagentResult, Run]:
    async with registry_with(provider).run(provider.name, request(tmp_path, task)) as run:
        result = await run.result()
    return result, run


async def start_failure(
    provider: Provider, parent_cwd: Path | None, *, abort: AbortSignal | None = None
) -> tuple[StartFailed, list[Transition]]:
    trail: list[Transition] = []
    with pytest.raises(StartFailed) as info:
        async with registry_with(provider).run(
            provider.name, request(parent_cwd), abort=abort, trace=trail.append
        ):
            pytest.fail("a failed start must not publish")
    return info.value, trail


def steps(entries: Iterable[Transition]) -> list[tuple[str, str, str]]:
    return [(t.event, t.source, t.target) for t in entries]


def events(entries: Iterable[Transition]) -> list[str]:
    return [t.event for t in entries]


def received(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(raw) for raw in path.read_bytes().splitlines() if raw.strip()]


def requests_of(path: Path, method: str) -> list[dict[str, Any]]:
    return [frame for frame in received(path) if frame.get("method") == method]


async def read_fifo(path: Path) -> str:
    """Block until the fake opens, writes and closes the FIFO at ``path``."""

    def read() -> str:
        with path.open(encoding="utf-8") as handle:
            return handle.read()

    try:
        with anyio.fail_after(TIMEOUT):
            return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
    except TimeoutError:
        with suppress(OSError):  # release the abandoned reader thread
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        raise


def fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


# -- config and provider shape ----------------------------------------------------------


def test_config_defaults() -> None:
    config = Config(command="dsh-runtime")
    assert config.provider == "deepseek-official"
    assert config.model == "deepseek-v4-flash"
    assert config.max_tokens is None
    assert config.shutdown_timeout_ms == 1000
    assert config.shutdown_timeout == 1.0
    assert (config.dispose_eof_grace_ms, config.dispose_grace_ms) == (6000, 3000)
    assert config.args == []


@pytest.mark.parametrize(
    "keys",
    [
        {"max_tokens": 0},
        {"max_tokens": -5},
        {"max_tokens": 2**53},
        {"max_tokens": True},
        {"max_tokens": 1.5},
        {"max_tokens": "100"},
        {"shutdown_timeout_ms": 0},
        {"shutdown_timeout_ms": -1},
        {"shutdown_timeout_ms": math.inf},
        {"shutdown_timeout_ms": math.nan},
        {"shutdown_timeout_ms": 2_147_483_648},
        {"dispose_grace_ms": 0},
        {"command": " "},
        {"maxTokens": 10},
    ],
)
def test_config_rejects_bad_values(keys: dict[str, Any]) -> None:
    settings: dict[str, Any] = {"command": "dsh-runtime", **keys}
    with pytest.raises(ValidationError):
        Config.model_validate(settings)


def test_config_accepts_the_largest_safe_max_tokens() -> None:
    assert Config(command="x", max_tokens=2**53 - 1).max_tokens == 2**53 - 1


def test_provider_shape_and_kind_registration() -> None:
    kind = installed_kinds()["dsh-sdk"].load()
    assert kind.config is Config
    assert kind.provider is Provider
    provider = Provider(Config(command="x"))
    assert provider.name == "dsh-sdk"
    assert Provider(Config(command="x", name="from-config")).name == "from-config"
    assert Provider(Config(command="x", name="from-config"), name="explicit").name == "explicit"
    assert provider.capabilities == Capabilities(conversation=True)
    assert provider.inherits_parent_context is False


def test_lifecycle_stages_and_events() -> None:
    assert tuple(MACHINES) == (DshSdkLifecycle,)
    assert DshSdkLifecycle.STAGES == ("initialize", "session-run", "shutdown")
    assert {event for event, _, _ in DshSdkLifecycle.TABLE} == {
        "initialize_answered",
        "prompt_spliced",
        "root_idle",
        "transport_closed",
        "protocol_violated",
        "error_answered",
        "shutdown_acknowledged",
        "start_failed",
        "start_aborted",
        "cancelled",
        "failed",
        "dispose_requested",
        "tree_gone",
        "tree_survived",
        # the turn loop of a conversation
        "turn_ended",
        "turn_sent",
        "idle_timed_out",
        "child_lost",
        "conversation_ended",
    }


async def test_an_unsupported_capability_is_rejected_before_anything_spawns(tmp_path: Path) -> None:
    provider = dsh(tmp_path)
    with pytest.raises(UnsupportedCapability, match='"dsh-sdk" does not support the "persona" capability'):
        async with registry_with(provider).run(
            "dsh-sdk", SubagentRequest(task="t", parent_cwd=tmp_path, persona="reviewer")
        ):
            pass
    assert not (tmp_path / RECORD).exists()


# -- a completed run and the wire traps -------------------------------------------------


async def test_a_completed_run_end_to_end(tmp_path: Path) -> None:
    provider = dsh(tmp_path)
    async with registry_with(provider).run("dsh-sdk", request(tmp_path, "say hi")) as run:
        assert isinstance(run, DshSdkRun)
        assert uuid.UUID(run.id).version == 4
        result = await run.result()
        assert repr(run) == f"<DshSdkRun id={run.id} provider='dsh-sdk' state=settled>"
    assert result == SubagentResult(output="fake answer", stop_reason=StopReason.COMPLETED)
    assert run.state == "quiescent"
    assert run.quiescent is True
    assert run.stage == "shutdown"
    assert run.stages_entered == ("initialize", "session-run", "shutdown")
    assert steps(run.audit.entries) == [
        ("initialize_answered", "initialize", "session-run"),
        ("prompt_spliced", "session-run", "session-run"),
        ("root_idle", "session-run", "settled"),
        ("dispose_requested", "settled", "shutdown"),
        ("shutdown_acknowledged", "shutdown", "shutdown"),
        ("stdin_closed", "running", "eof-wait"),
        ("tree_exited", "eof-wait", "gone"),
        ("tree_gone", "shutdown", "quiescent"),
    ]
    assert all(t.run_id == run.id for t in run.audit.entries)
    assert run.exit_facts == ExitFacts(exit_code=0, signal=None)
    methods = [frame["method"] for frame in received(tmp_path / RECORD) if "method" in frame]
    assert methods == ["initialize", "session/prompt", "shutdown"]
    (prompt,) = requests_of(tmp_path / RECORD, "session/prompt")
    assert prompt["params"]["contentBlocks"] == [{"type": "text", "text": "say hi"}]


async def test_the_client_mints_the_session_id_and_it_never_leaks(tmp_path: Path) -> None:
    result, run = await run_once(dsh(tmp_path), tmp_path)
    (prompt,) = requests_of(tmp_path / RECORD, "session/prompt")
    session_id = prompt["params"]["sessionId"]
    assert SESSION_ID.fullmatch(session_id)
    assert session_id.removeprefix("session-") != run.id.replace("-", "")
    assert session_id not in repr(result)
    assert session_id not in repr(run.audit.as_dicts())
    assert session_id not in repr(run)


@pytest.mark.parametrize(
    "knobs",
    [
        pytest.param({}, id="turn-before-response"),
        pytest.param({"ORDER": "after"}, id="response-before-turn"),
        pytest.param({"STALE": "1"}, id="stale-turn-skipped"),
        pytest.param({"STALE": "1", "ORDER": "after"}, id="stale-turn-skipped-response-first"),
    ],
)
async def test_the_client_listens_before_the_prompt_and_matches_the_inbox_receipt(
    tmp_path: Path, knobs: dict[str, str]
) -> None:
    result, _ = await run_once(dsh(tmp_path, knobs), tmp_path)
    assert result == SubagentResult(output="fake answer", stop_reason=StopReason.COMPLETED)


async def test_the_handshake_carries_the_route_and_the_parent_cwd(tmp_path: Path) -> None:
    provider = dsh(tmp_path, provider="deepseek-official", model="deepseek-test-model", max_tokens=321)
    async with registry_with(provider).run("dsh-sdk", request(tmp_path)) as run:
        await run.result()
        child = internals(run).process
        assert child is not None
        assert Path(psutil.Process(child.pid).cwd()) == tmp_path
    (initialize,) = requests_of(tmp_path / RECORD, "initialize")
    assert initialize["params"] == {
        "cwd": str(tmp_path),
        "provider": "deepseek-official",
        "model": "deepseek-test-model",
        "maxTokens": 321,
    }


async def test_without_max_tokens_the_handshake_omits_it(tmp_path: Path) -> None:
    await run_once(dsh(tmp_path), tmp_path)
    (initialize,) = requests_of(tmp_path / RECORD, "initialize")
    assert initialize["params"] == {
        "cwd": str(tmp_path),
        "provider": "deepseek-official",
        "model": "deepseek-v4-flash",
    }


async def test_a_configured_cwd_wins_over_the_parent_cwd(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    provider = dsh(tmp_path, cwd=workspace)
    async with registry_with(provider).run("dsh-sdk", request(tmp_path)) as run:
        await run.result()
        child = internals(run).process
        assert child is not None
        assert Path(psutil.Process(child.pid).cwd()) == workspace
    (initialize,) = requests_of(tmp_path / RECORD, "initialize")
    assert initialize["params"]["cwd"] == str(workspace)


async def test_the_environment_is_scrubbed_and_explicit_env_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMBIENT_API_KEY", "ambient-key")
    monkeypatch.setenv("AMBIENT_PASSWORD", "ambient-password")
    monkeypatch.setenv("DSH_ROUTE", "ambient-route")
    monkeypatch.setenv("PLAIN_AMBIENT", "kept")
    monkeypatch.setenv("DROPPED_AMBIENT", "dropped by None")
    monkeypatch.setenv("LISTED_AMBIENT", "dropped by env_remove")
    provider = dsh(
        tmp_path,
        env={"EXPLICIT_TOKEN": "granted", "DSH_EXPLICIT": "explicit route", "DROPPED_AMBIENT": None},
        env_remove=["LISTED_AMBIENT"],
    )
    async with registry_with(provider).run("dsh-sdk", request(tmp_path)) as run:
        await run.result()
        child = internals(run).process
        assert child is not None
        child_env = psutil.Process(child.pid).environ()
    for scrubbed in ("AMBIENT_API_KEY", "AMBIENT_PASSWORD", "DSH_ROUTE", "DROPPED_AMBIENT", "LISTED_AMBIENT"):
        assert scrubbed not in child_env
    assert child_env["PLAIN_AMBIENT"] == "kept"
    assert child_env["EXPLICIT_TOKEN"] == "granted"
    assert child_env["DSH_EXPLICIT"] == "explicit route"
    assert child_env["SUBAGENT_SUPERVISOR_RUN"] == run.id


# -- the turn-end mapping (every row of the contract) -------------------------------------------


@pytest.mark.parametrize(
    ("reason", "stop_reason", "category"),
    [
        ("completed", StopReason.COMPLETED, None),
        ("max-tokens", StopReason.MAX_TOKENS, None),
        ("aborted:disposed", StopReason.ABORTED, "child-disposed"),
        ("aborted:user", StopReason.ABORTED, None),
        ("aborted:parent", StopReason.ABORTED, None),
        ("aborted:hook", StopReason.ABORTED, None),
        ("aborted:legacy", StopReason.ABORTED, None),
        ("aborted", StopReason.ABORTED, None),
        ("blocked", StopReason.REFUSAL, None),
        ("error", StopReason.ERROR, "child-error"),
        ("interrupted", StopReason.ERROR, None),
        ("none", StopReason.ERROR, "missing-terminal"),
        ("refusal", StopReason.ERROR, "child-unknown"),
        ("malformed", StopReason.ERROR, "child-unknown"),
    ],
)
async def test_every_turn_end_maps_as_the_contract_says(
    tmp_path: Path, reason: str, stop_reason: StopReason, category: str | None
) -> None:
    result, run = await run_once(dsh(tmp_path, {"REASON": reason}), tmp_path)
    diagnostic = None if category is None else line("session-run", category)
    assert result == SubagentResult(output="fake answer", stop_reason=stop_reason, diagnostic=diagnostic)
    assert ("root_idle", "session-run", "settled") in steps(run.audit.entries)


def test_child_outcome_table() -> None:
    assert child_outcome(None) == (StopReason.ERROR, "missing-terminal")
    assert child_outcome(TurnEnd("completed")) == (StopReason.COMPLETED, None)
    assert child_outcome(TurnEnd("max-tokens")) == (StopReason.MAX_TOKENS, None)
    assert child_outcome(TurnEnd("aborted", "disposed")) == (StopReason.ABORTED, "child-disposed")
    assert child_outcome(TurnEnd("aborted", "user")) == (StopReason.ABORTED, None)
    assert child_outcome(TurnEnd("aborted")) == (StopReason.ABORTED, None)
    assert child_outcome(TurnEnd("blocked")) == (StopReason.REFUSAL, None)
    assert child_outcome(TurnEnd("error")) == (StopReason.ERROR, "child-error")
    assert child_outcome(TurnEnd("interrupted")) == (StopReason.ERROR, None)
    assert child_outcome(TurnEnd("something-new")) == (StopReason.ERROR, "child-unknown")
    assert child_outcome(TurnEnd(None)) == (StopReason.ERROR, "child-unknown")
    assert child_outcome(TurnEnd("completed", "disposed")) == (StopReason.COMPLETED, None)


def test_wire_failures_are_classified_by_type_only() -> None:
    assert failure_category(DshTransportClosed("eof")) == "transport"
    assert failure_category(DshTransportClosed("broken-pipe")) == "transport"
    assert failure_category(DshProtocolError("x")) == "protocol"
    assert failure_category(DshRpcError("session/prompt", -32000, "transport closed", None)) == "protocol"
    assert failure_category(DshTimeout("shutdown", 1.0)) == "unknown"
    assert failure_category(DshError("x")) == "unknown"
    assert failure_category(RuntimeError("protocol error")) == "unknown"


@pytest.mark.parametrize(
    ("first", "last", "stop_reason", "diagnostic"),
    [
        ("error", "completed", StopReason.COMPLETED, None),
        ("completed", "error", StopReason.ERROR, line("session-run", "child-error")),
        ("max-tokens", "blocked", StopReason.REFUSAL, None),
    ],
)
async def test_the_last_turn_end_wins(
    tmp_path: Path, first: str, last: str, stop_reason: StopReason, diagnostic: str | None
) -> None:
    result, _ = await run_once(dsh(tmp_path, {"FIRST_REASON": first, "REASON": last}), tmp_path)
    assert (result.stop_reason, result.diagnostic) == (stop_reason, diagnostic)


@pytest.mark.parametrize(
    ("message", "output"),
    [
        ("normal", "final text"),
        ("empty", "streamed text"),
        ("none", "streamed text"),
        ("textless", ""),
    ],
)
async def test_output_is_the_last_non_empty_message_else_the_streamed_text(
    tmp_path: Path, message: str, output: str
) -> None:
    knobs = {"TEXT": "final text", "DELTAS": "streamed text", "MESSAGE": message}
    result, _ = await run_once(dsh(tmp_path, knobs), tmp_path)
    assert result == SubagentResult(output=output, stop_reason=StopReason.COMPLETED)


async def test_streamed_text_is_kept_when_the_turn_fails(tmp_path: Path) -> None:
    knobs = {"TEXT": "final text", "DELTAS": "streamed text", "MESSAGE": "empty", "REASON": "error"}
    result, _ = await run_once(dsh(tmp_path, knobs), tmp_path)
    assert result.output == "streamed text"
    assert result.diagnostic == line("session-run", "child-error")


async def test_only_the_root_session_makes_the_output(tmp_path: Path) -> None:
    result, _ = await run_once(dsh(tmp_path, {"SUBAGENT": "1"}), tmp_path)
    assert result == SubagentResult(output="fake answer", stop_reason=StopReason.COMPLETED)


async def test_malformed_frames_are_ignored_and_a_server_request_is_refused(tmp_path: Path) -> None:
    result, _ = await run_once(dsh(tmp_path, {"MALFORMED_FRAMES": "1"}), tmp_path)
    assert result == SubagentResult(output="fake answer", stop_reason=StopReason.COMPLETED)
    refusals = [frame for frame in received(tmp_path / RECORD) if frame.get("id") == "srv-1"]
    assert [frame["error"]["code"] for frame in refusals] == [-32601]


async def test_invalid_utf8_inside_a_frame_is_replaced_and_the_answer_kept(tmp_path: Path) -> None:
    """The runtime's text holds the raw bytes 0xff 0xfe (an environment value's "\\udcff"
    reaches the child as the byte 0xff, and the fake writes it back verbatim)."""
    result, _ = await run_once(dsh(tmp_path, {"TEXT": "good \udcff\udcfe answer"}), tmp_path)
    assert result == SubagentResult(output="good \ufffd\ufffd answer", stop_reason=StopReason.COMPLETED)


async def test_a_frame_nested_too_deep_is_a_protocol_failure(tmp_path: Path) -> None:
    """Unlike a line that is not JSON (skipped, as the runtimes print debug lines), a frame too
    deep to parse is the wire breaking: ``session-run/protocol``."""
    result, run = await run_once(dsh(tmp_path, {"DEEP_FRAME": "100000"}), tmp_path)
    assert result.stop_reason == StopReason.ERROR
    assert result.diagnostic == line("session-run", "protocol")
    assert run.quiescent is True


async def test_multibyte_utf8_split_across_reads_is_kept_whole(tmp_path: Path) -> None:
    text = "grüße ✓ 完了 🚀"
    result, _ = await run_once(dsh(tmp_path, {"TEXT": text, "SPLIT_UTF8": "1"}), tmp_path)
    assert result == SubagentResult(output=text, stop_reason=StopReason.COMPLETED)


async def test_output_is_bounded_by_max_output_bytes(tmp_path: Path) -> None:
    result, _ = await run_once(dsh(tmp_path, {"TEXT": "é" * 50}, max_output_bytes=11), tmp_path)
    assert result.output == "é" * 5


# -- initialize failures ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "category"),
    [
        pytest.param({"INIT_ERROR": "1"}, "protocol", id="json-rpc-error-answer"),
        pytest.param({"INIT_MALFORMED": "1"}, "protocol", id="malformed-identity"),
        pytest.param({"SERVER_NAME": "impostor-runtime"}, "protocol", id="wrong-server"),
        pytest.param({"EXIT_BEFORE_INIT": "3"}, "transport", id="exit-before-init"),
    ],
)
async def test_an_initialize_failure_is_typed_and_rolled_back(
    tmp_path: Path, knobs: dict[str, str], category: str
) -> None:
    error, trail = await start_failure(dsh(tmp_path, knobs), tmp_path)
    assert str(error) == line("initialize", category)
    assert error.diagnostic == str(error)
    assert error.quiescent
    assert error.code == "START_FAILED"
    assert steps(trail)[0] == ("start_failed", "initialize", "shutdown")
    assert steps(trail)[-1] == ("tree_gone", "shutdown", "quiescent")
    assert isinstance(error.__cause__, Exception)


async def test_a_runtime_that_cannot_be_spawned_is_an_initialize_transport_failure(tmp_path: Path) -> None:
    provider = dsh(tmp_path, command=str(tmp_path / "missing-runtime"), args=[])
    error, trail = await start_failure(provider, tmp_path)
    assert str(error) == line("initialize", "transport")
    assert "missing-runtime" not in str(error)
    assert error.quiescent
    assert events(trail) == ["start_failed", "tree_gone"]


async def test_no_cwd_at_all_is_a_configuration_failure_before_anything_spawns(tmp_path: Path) -> None:
    error, trail = await start_failure(dsh(tmp_path), None)
    assert str(error) == "Subagent failure (provider: DSH SDK; stage: initialize; category: configuration)"
    assert events(trail) == ["start_failed", "tree_gone"]
    assert not (tmp_path / RECORD).exists()


async def test_a_bad_parent_cwd_is_a_configuration_failure(tmp_path: Path) -> None:
    error, _ = await start_failure(dsh(tmp_path), tmp_path / "missing")
    assert str(error) == line("initialize", "configuration")
    assert str(tmp_path) not in str(error)
    assert not (tmp_path / RECORD).exists()


async def test_any_other_initialize_failure_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: DshClient, **_: object) -> None:
        raise RuntimeError(f"the client broke: {SECRET}")

    monkeypatch.setattr(DshClient, "initialize", broken)
    error, _ = await start_failure(dsh(tmp_path), tmp_path)
    assert str(error) == line("initialize", "unknown")
    assert SECRET not in str(error)


# -- session-run failures ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("knobs", "keys", "category", "event", "output"),
    [
        pytest.param({"PROMPT_ERROR": "1"}, {}, "protocol", "error_answered", "", id="prompt-error-answer"),
        pytest.param(
            {"MALFORMED_PROMPT": "1"}, {}, "protocol", "protocol_violated", "", id="malformed-prompt-receipt"
        ),
        pytest.param(
            {"MESSAGE": "malformed", "DELTAS": "streamed"},
            {},
            "protocol",
            "protocol_violated",
            "streamed",
            id="malformed-assistant-message",
        ),
        pytest.param(
            {"MALFORMED_EVENT": "1"}, {}, "protocol", "protocol_violated", "", id="event-without-envelope"
        ),
        pytest.param(
            {"OVERSIZE": "20000", "ORDER": "after"},
            {"max_frame_bytes": 8192},
            "protocol",
            "protocol_violated",
            "fake answer",
            id="frame-over-max-frame-bytes",
        ),
        pytest.param(
            {"EXIT_MID_TURN": "5", "ORDER": "after"},
            {},
            "transport",
            "transport_closed",
            "fake answer",
            id="eof-mid-turn",
        ),
        pytest.param(
            {"EXIT_MID_TURN": "5"}, {}, "transport", "transport_closed", "", id="eof-before-the-receipt"
        ),
        pytest.param(
            {"CLOSE_STDIN": "1"},
            {"dispose_eof_grace_ms": 100},
            "transport",
            "transport_closed",
            "",
            id="broken-stdin",
        ),
    ],
)
async def test_a_session_run_failure_is_typed_and_keeps_attributed_text(
    tmp_path: Path,
    knobs: dict[str, str],
    keys: dict[str, Any],
    category: str,
    event: str,
    output: str,
) -> None:
    result, run = await run_once(dsh(tmp_path, knobs, **keys), tmp_path)
    assert result == SubagentResult(
        output=output, stop_reason=StopReason.ERROR, diagnostic=line("session-run", category)
    )
    assert (event, "session-run", "settled") in steps(run.audit.entries)
    assert run.quiescent


async def test_eof_and_a_broken_stdin_are_both_transport(tmp_path: Path) -> None:
    eof, _ = await run_once(dsh(tmp_path, {"EXIT_MID_TURN": "2"}), tmp_path)
    broken, _ = await run_once(dsh(tmp_path, {"CLOSE_STDIN": "1"}, dispose_eof_grace_ms=100), tmp_path)
    assert eof.diagnostic == broken.diagnostic == line("session-run", "transport")


async def test_any_other_session_run_failure_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(self: DshClient, prompt: str, **_: object) -> None:
        raise RuntimeError(f"the client broke: {SECRET}")

    monkeypatch.setattr(DshClient, "run_turn", broken)
    result, run = await run_once(dsh(tmp_path), tmp_path)
    assert result == SubagentResult(
        output="", stop_reason=StopReason.ERROR, diagnostic=line("session-run", "unknown")
    )
    assert ("failed", "session-run", "settled") in steps(run.audit.entries)


# -- shutdown and the ladder ------------------------------------------------------------


@pytest.mark.parametrize("mode", ["error", "hang"])
async def test_a_failed_shutdown_request_is_only_logged(
    tmp_path: Path, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="supervisor")
    result, run = await run_once(dsh(tmp_path, {"SHUTDOWN": mode}, shutdown_timeout_ms=100), tmp_path)
    assert result == SubagentResult(output="fake answer", stop_reason=StopReason.COMPLETED)
    assert run.quiescent
    assert "shutdown_acknowledged" not in events(run.audit.entries)
    assert any("shutdown" in r.getMessage() and run.id in r.getMessage() for r in caplog.records)
    assert len(requests_of(tmp_path / RECORD, "shutdown")) == 1


async def test_an_eof_ignoring_runtime_is_terminated(tmp_path: Path) -> None:
    provider = dsh(tmp_path, {"SHUTDOWN": "stay", "IGNORE_EOF": "1"}, dispose_eof_grace_ms=100)
    result, run = await run_once(provider, tmp_path)
    assert result.stop_reason == StopReason.COMPLETED
    assert steps(run.audit.entries)[-5:] == [
        ("shutdown_acknowledged", "shutdown", "shutdown"),
        ("stdin_closed", "running", "eof-wait"),
        ("eof_grace_expired", "eof-wait", "term-wait"),
        ("tree_exited", "term-wait", "gone"),
        ("tree_gone", "shutdown", "quiescent"),
    ]
    assert run.exit_facts == ExitFacts(exit_code=None, signal="SIGTERM")


async def test_a_term_trapping_runtime_is_killed(tmp_path: Path) -> None:
    term_file = tmp_path / "sigterm.log"
    knobs = {"SHUTDOWN": "stay", "IGNORE_EOF": "1", "TRAP_TERM": "1", "SIGTERM_FILE": str(term_file)}
    provider = dsh(tmp_path, knobs, dispose_eof_grace_ms=100, dispose_grace_ms=300)
    result, run = await run_once(provider, tmp_path)
    assert result.stop_reason == StopReason.COMPLETED
    assert steps(run.audit.entries)[-4:] == [
        ("eof_grace_expired", "eof-wait", "term-wait"),
        ("term_grace_expired", "term-wait", "kill-wait"),
        ("tree_exited", "kill-wait", "gone"),
        ("tree_gone", "shutdown", "quiescent"),
    ]
    assert run.exit_facts == ExitFacts(exit_code=None, signal="SIGKILL")
    assert "TERM" in term_file.read_text()


@pytest.fixture
def phantom(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    monkeypatch.setattr("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.2)
    with phantom_process() as pid:
        yield pid


async def test_a_tree_that_will_not_die_fails_dispose_with_a_shutdown_line(
    tmp_path: Path, phantom: int
) -> None:
    provider = dsh(tmp_path, tree=UnkillableTree(phantom), dispose_eof_grace_ms=50, dispose_grace_ms=50)
    with pytest.raises(TeardownFailed) as info:
        async with registry_with(provider).run("dsh-sdk", request(tmp_path)) as run:
            await run.result()
    # No exit fields on a DSH line, although the runtime's exit is known: code 0 after its
    # shutdown answer, or SIGTERM if a loaded machine let the 50 ms EOF grace run out first.
    assert str(info.value) == "Subagent failure (provider: DSH SDK; stage: shutdown; category: unknown)"
    assert run.exit_facts in (
        ExitFacts(exit_code=0, signal=None),
        ExitFacts(exit_code=None, signal="SIGTERM"),
    )
    assert run.state == "leaked"
    assert run.quiescent is False
    with pytest.raises(TeardownFailed):
        await run.dispose()


async def test_a_failed_start_whose_rollback_fails_carries_both_lines(tmp_path: Path, phantom: int) -> None:
    provider = dsh(
        tmp_path,
        {"INIT_ERROR": "1"},
        tree=UnkillableTree(phantom),
        dispose_eof_grace_ms=50,
        dispose_grace_ms=50,
    )
    error, trail = await start_failure(provider, tmp_path)
    assert str(error) == f"{line('initialize', 'protocol')}\n{line('shutdown', 'unknown')}"
    assert error.quiescent is False
    assert steps(trail)[-1] == ("tree_survived", "shutdown", "leaked")


async def test_an_aborted_start_whose_rollback_fails_carries_the_shutdown_line_alone(
    tmp_path: Path, phantom: int
) -> None:
    record = fifo(tmp_path, "record.fifo")
    provider = dsh(
        tmp_path,
        {"HANG_INIT": "1"},
        record=record,
        tree=UnkillableTree(phantom),
        shutdown_timeout_ms=50,
        dispose_eof_grace_ms=50,
        dispose_grace_ms=50,
    )
    abort = AbortSignal()
    async with anyio.create_task_group() as tg:

        async def abort_once_initialize_arrives() -> None:
            await read_fifo(record)
            abort.abort()

        tg.start_soon(abort_once_initialize_arrives)
        error, _ = await start_failure(provider, tmp_path, abort=abort)
    assert str(error) == line("shutdown", "unknown")
    assert error.quiescent is False


# -- cancellation -----------------------------------------------------------------------


async def test_a_pre_aborted_request_spawns_nothing(tmp_path: Path) -> None:
    abort = AbortSignal()
    abort.abort()
    with pytest.raises(StartAborted) as info:
        async with registry_with(dsh(tmp_path)).run("dsh-sdk", request(tmp_path), abort=abort):
            pass
    assert str(info.value) == "subagent request was aborted before the DSH SDK child started"
    assert info.value.code == "START_ABORTED"
    assert not (tmp_path / RECORD).exists()


async def test_an_abort_during_a_hung_initialize_rolls_back(tmp_path: Path) -> None:
    record = fifo(tmp_path, "record.fifo")
    provider = dsh(
        tmp_path, {"HANG_INIT": "1"}, record=record, shutdown_timeout_ms=50, dispose_eof_grace_ms=50
    )
    abort = AbortSignal()
    trail: list[Transition] = []
    async with anyio.create_task_group() as tg:

        async def abort_once_initialize_arrives() -> None:
            assert json.loads(await read_fifo(record))["method"] == "initialize"
            abort.abort()

        tg.start_soon(abort_once_initialize_arrives)
        with pytest.raises(StartAborted) as info:
            async with registry_with(provider).run(
                "dsh-sdk", request(tmp_path), abort=abort, trace=trail.append
            ):
                pytest.fail("must not publish")
    assert str(info.value) == "subagent request was aborted before the DSH SDK child started"
    assert steps(trail)[0] == ("start_aborted", "initialize", "shutdown")
    assert steps(trail)[-1] == ("tree_gone", "shutdown", "quiescent")


async def test_caller_cancellation_during_a_hung_initialize_rolls_back_and_propagates(
    tmp_path: Path,
) -> None:
    record = fifo(tmp_path, "record.fifo")
    provider = dsh(
        tmp_path, {"HANG_INIT": "1"}, record=record, shutdown_timeout_ms=50, dispose_eof_grace_ms=50
    )
    trail: list[Transition] = []
    async with anyio.create_task_group() as tg:

        async def cancel_once_initialize_arrives() -> None:
            await read_fifo(record)
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_once_initialize_arrives)
        async with registry_with(provider).run("dsh-sdk", request(tmp_path), trace=trail.append):
            pytest.fail("must not publish")
    assert tg.cancel_scope.cancelled_caught
    assert events(trail)[0] == "start_aborted"
    assert steps(trail)[-1] == ("tree_gone", "shutdown", "quiescent")


def assert_cancelled(result: SubagentResult, run: Run) -> None:
    assert result.stop_reason == StopReason.ABORTED
    assert result.diagnostic is None
    assert job_outcome(result) == JobOutcome(JobStatus.KILLED)
    assert ("cancelled", "session-run", "settled") in steps(run.audit.entries)
    assert "failed" not in events(run.audit.entries)
    assert run.quiescent


async def test_a_local_cancel_after_publication_keeps_the_partial_output(tmp_path: Path) -> None:
    provider = dsh(tmp_path, {"HANG_PROMPT": "partial", "DELTAS": "partial answer"})
    async with registry_with(provider).run("dsh-sdk", request(tmp_path)) as run:
        await run.output_arrived()
        run.cancel()
        result = await run.result()
    assert_cancelled(result, run)
    assert result.output
    assert "partial answer".startswith(result.output)


async def test_an_abort_after_publication_settles_aborted(tmp_path: Path) -> None:
    ready = fifo(tmp_path, "ready.fifo")
    provider = dsh(tmp_path, {"HANG_PROMPT": "silent", "READY_FILE": str(ready)})
    abort = AbortSignal()
    async with registry_with(provider).run("dsh-sdk", request(tmp_path), abort=abort) as run:
        await read_fifo(ready)
        abort.abort()
        result = await run.result()
    assert_cancelled(result, run)
    assert result.output == ""


async def test_leaving_the_block_in_flight_cancels_locally_and_reaps(tmp_path: Path) -> None:
    ready = fifo(tmp_path, "ready.fifo")
    provider = dsh(tmp_path, {"HANG_PROMPT": "silent", "READY_FILE": str(ready)})
    runs: list[Run] = []
    with anyio.CancelScope() as scope:
        async with registry_with(provider).run("dsh-sdk", request(tmp_path)) as run:
            runs.append(run)
            await read_fifo(ready)
            scope.cancel()
            await run.result()
    assert scope.cancelled_caught
    (run,) = runs
    assert_cancelled(await run.result(), run)
    assert "shutdown_acknowledged" in events(run.audit.entries)


# -- isolation --------------------------------------------------------------------------


async def test_concurrent_runs_are_isolated(tmp_path: Path) -> None:
    providers = [
        dsh(tmp_path, {"TEXT": f"answer {name}"}, name=f"dsh-{name}", record=tmp_path / f"{name}.jsonl")
        for name in "abc"
    ]
    registry = registry_with(*providers)
    outcomes: list[tuple[str, str, str]] = []

    async def one(name: str) -> None:
        async with registry.run(f"dsh-{name}", request(tmp_path)) as run:
            outcomes.append((name, run.id, (await run.result()).output))

    async with anyio.create_task_group() as tg:
        for name in "abcabc":
            tg.start_soon(one, name)
    assert sorted((name, output) for name, _, output in outcomes) == [
        (name, f"answer {name}") for name in "aabbcc"
    ]
    assert len({run_id for _, run_id, _ in outcomes}) == 6
    session_ids = [
        frame["params"]["sessionId"]
        for name in "abc"
        for frame in requests_of(tmp_path / f"{name}.jsonl", "session/prompt")
    ]
    assert len(session_ids) == len(set(session_ids)) == 6


# -- sanitisation -----------------------------------------------------------------------

_LEAKY_STARTS = [
    pytest.param({"INIT_ERROR": "1"}, id="initialize-error"),
    pytest.param({"SERVER_NAME": SECRET}, id="server-name"),
]

_LEAKY_RUNS = [
    pytest.param({"PROMPT_ERROR": "1", "SHUTDOWN": "error"}, id="prompt-and-shutdown-errors"),
    pytest.param({"REASON": "error"}, id="turn-error-payload"),
    pytest.param({"REASON": "aborted:hook"}, id="hook-abort-payload"),
    pytest.param({"REASON": f"kind-{SECRET}"}, id="unknown-kind"),
    pytest.param({"MESSAGE": "malformed"}, id="malformed-message"),
    pytest.param({"MALFORMED_EVENT": "1"}, id="malformed-event"),
    pytest.param({"MALFORMED_FRAMES": "1", "STDERR_NO_NEWLINE": "1"}, id="junk-frames"),
    pytest.param({"EXIT_MID_TURN": "9", "ORDER": "after"}, id="exit-with-stderr"),
]


def assert_clean(*values: object) -> None:
    for value in values:
        assert SECRET not in str(value)
        assert SECRET not in repr(value)


def assert_logged(caplog: pytest.LogCaptureFixture) -> None:
    leaked = [r for r in caplog.records if SECRET in r.getMessage()]
    assert leaked, "the raw failure must reach the host log"
    assert all((r.name, r.levelno) == ("supervisor.child", logging.DEBUG) for r in leaked)


@pytest.mark.parametrize("knobs", _LEAKY_STARTS)
async def test_runtime_text_never_reaches_a_start_failure(
    tmp_path: Path, knobs: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    provider = dsh(tmp_path, {**knobs, "SHUTDOWN": "error"}, env={"FAKE_DSH_SECRET": SECRET})
    error, trail = await start_failure(provider, tmp_path)
    assert str(error) == line("initialize", "protocol")
    assert_clean(error, error.diagnostic, error.args, trail)
    assert_logged(caplog)


@pytest.mark.parametrize("knobs", _LEAKY_RUNS)
async def test_runtime_text_never_reaches_a_result(
    tmp_path: Path, knobs: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    provider = dsh(tmp_path, {"TEXT": "clean answer", **knobs}, env={"FAKE_DSH_SECRET": SECRET})
    result, run = await run_once(provider, tmp_path)
    assert_clean(
        result,
        result.diagnostic,
        foreground_text(result),
        job_outcome(result).detail,
        run.audit.entries,
        run.audit.as_dicts(),
        run,
    )
    assert_logged(caplog)


# -- consumers snapshot -----------------------------------------------------------------


async def test_snapshot_of_a_failing_run(tmp_path: Path) -> None:
    provider = dsh(tmp_path, {"TEXT": "partial child loader answer", "REASON": "error"})
    result, _ = await run_once(provider, tmp_path)
    assert foreground_text(result) == (
        "subagent run failed\n"
        "Diagnostic: Subagent failure (provider: DSH SDK; stage: session-run; category: child-error)\n"
        "Partial output before the run ended:\n"
        "partial child loader answer"
    )
    assert job_outcome(result).detail == (
        "error; diagnostic: Subagent failure (provider: DSH SDK; stage: session-run; category: child-error)"
    )
    assert job_outcome(result).status == JobStatus.FAILED
