"""The seam's contract: registry checks, publication, settlement, cancellation, dispose."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import ValidationError

from supervisor import (
    AbortSignal,
    Capabilities,
    DuplicateProvider,
    ExitFacts,
    InvalidRequest,
    NoProvider,
    Registry,
    StartAborted,
    StartFailed,
    StopReason,
    SubagentRequest,
    SubagentResult,
    TeardownFailed,
    UnsupportedCapability,
)
from tests.support.scripted import ScriptedConfig, ScriptedProvider, scripted
from tests.support.unkillable import UnkillableTree, phantom_process

pytestmark = pytest.mark.anyio


def request(tmp_path: Path, task: str = "do the thing", **fields: Any) -> SubagentRequest:
    return SubagentRequest(task=task, parent_cwd=tmp_path, **fields)


def registry_with(*providers: ScriptedProvider) -> Registry:
    registry = Registry()
    for provider in providers:
        registry.register(provider)
    return registry


# -- the registry -----------------------------------------------------------------------


def test_register_list_and_unregister() -> None:
    registry = registry_with(ScriptedProvider("a"), ScriptedProvider("b"))
    assert registry.list() == ["a", "b"]
    with pytest.raises(DuplicateProvider, match=r'^a subagent provider named "a" is already registered$'):
        registry.register(ScriptedProvider("a"))
    registry.unregister("a")
    assert registry.list() == ["b"]


async def test_unknown_provider_is_rejected_before_anything_spawns(tmp_path: Path) -> None:
    with pytest.raises(NoProvider, match=r'^no subagent provider registered for "nope"$') as info:
        async with Registry().run("nope", request(tmp_path)):
            pass
    assert info.value.code == "NO_PROVIDER"


@pytest.mark.parametrize(
    ("fields", "spelled"),
    [
        ({"output_schema": {"type": "object"}, "persona": "p"}, "outputSchema"),
        ({"max_depth": 2, "tool_filter": {"allow": []}}, "depthLimit"),
        ({"tool_filter": {"deny": ["x"]}, "persona": "p"}, "toolFilter"),
        ({"persona": "reviewer", "agent_options": {}}, "persona"),
        ({"agent_options": {"model": "m"}}, "agentOptions"),
    ],
)
async def test_first_unsupported_capability_is_named(
    tmp_path: Path, fields: dict[str, Any], spelled: str
) -> None:
    registry = registry_with(ScriptedProvider("p"))
    message = f'^subagent provider "p" does not support the "{spelled}" capability$'
    with pytest.raises(UnsupportedCapability, match=message) as info:
        async with registry.run("p", request(tmp_path, **fields)):
            pass
    assert info.value.code == "UNSUPPORTED_CAPABILITY"


@pytest.mark.parametrize("depth", [-1, 1.5, True, "2"])
async def test_max_depth_must_be_a_non_negative_int(tmp_path: Path, depth: object) -> None:
    provider = ScriptedProvider("deep", capabilities=Capabilities(depth_limit=True))
    with pytest.raises(InvalidRequest) as info:
        async with registry_with(provider).run("deep", request(tmp_path, max_depth=depth)):
            pass
    assert info.value.code == "INVALID_REQUEST"


def test_blank_task_is_rejected() -> None:
    with pytest.raises(ValidationError, match="task must not be blank"):
        SubagentRequest(task=" \n\t")


# -- a run ------------------------------------------------------------------------------


async def test_a_completed_run(tmp_path: Path) -> None:
    registry = registry_with(ScriptedProvider("p"))
    async with registry.run("p", request(tmp_path, task="hello")) as run:
        assert uuid.UUID(run.id).version == 4
        assert repr(run) == f"<ScriptedRun id={run.id} provider='p' state=prompt>"
        result = await run.result()
        assert result == SubagentResult(output="hello", stop_reason="completed", diagnostic=None)
        assert run.state == "settled"
    assert run.state == "quiescent"
    assert run.quiescent is True
    assert run.stage == "teardown"
    assert run.stages_entered == ("initialize", "prompt", "teardown")
    assert [(t.event, t.source, t.target) for t in run.audit.entries] == [
        ("hello_received", "initialize", "prompt"),
        ("answer_received", "prompt", "settled"),
        ("dispose_requested", "settled", "teardown"),
        ("stdin_closed", "running", "eof-wait"),
        ("tree_exited", "eof-wait", "gone"),
        ("tree_gone", "teardown", "quiescent"),
    ]
    assert all(t.run_id == run.id for t in run.audit.entries)
    times = [t.t for t in run.audit.entries]
    assert times == sorted(times)


async def test_start_failure_names_stage_and_exit_and_rolls_back(tmp_path: Path) -> None:
    registry = registry_with(scripted({"LINE_AGENT_START": "exit:3"}))
    with pytest.raises(StartFailed) as info:
        async with registry.run("scripted", request(tmp_path)):
            pytest.fail("must not publish")
    expected = (
        "Subagent failure (provider: Scripted; stage: initialize; category: process-exit; exit code: 3)"
    )
    assert str(info.value) == expected
    assert info.value.diagnostic == expected
    assert info.value.quiescent
    assert info.value.code == "START_FAILED"


async def test_start_failure_by_signal(tmp_path: Path) -> None:
    registry = registry_with(scripted({"LINE_AGENT_START": "signal:SIGSEGV"}))
    with pytest.raises(StartFailed, match=r"category: process-exit; signal: SIGSEGV\)$"):
        async with registry.run("scripted", request(tmp_path)):
            pass


async def test_spawn_failure_is_process_start(tmp_path: Path) -> None:
    config = ScriptedConfig(argv=[str(tmp_path / "missing-agent")])
    registry = registry_with(ScriptedProvider(config=config))
    with pytest.raises(StartFailed) as info:
        async with registry.run("scripted", request(tmp_path)):
            pass
    assert str(info.value) == "Subagent failure (provider: Scripted; stage: process; category: process-start)"
    assert "missing-agent" not in str(info.value)
    assert "missing-agent" in repr(info.value.__cause__.__cause__)  # type: ignore[union-attr]


@pytest.mark.parametrize("cwd", ["relative/dir", "missing", "file"])
async def test_bad_parent_cwd_is_a_configuration_failure_before_spawn(tmp_path: Path, cwd: str) -> None:
    (tmp_path / "file").write_text("")
    parent = Path(cwd) if cwd.startswith("relative") else tmp_path / cwd
    registry = registry_with(ScriptedProvider())
    with pytest.raises(StartFailed, match=r"stage: initialize; category: configuration\)$") as info:
        async with registry.run("scripted", SubagentRequest(task="t", parent_cwd=parent)):
            pass
    assert str(tmp_path) not in str(info.value)


async def test_no_cwd_at_all_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(StartFailed, match="category: configuration"):
        async with registry_with(ScriptedProvider()).run("scripted", SubagentRequest(task="t")):
            pass


async def test_abort_before_start_spawns_nothing(tmp_path: Path) -> None:
    signal_ = AbortSignal()
    signal_.abort()
    registry = registry_with(ScriptedProvider())
    with pytest.raises(StartAborted) as info:
        async with registry.run("scripted", request(tmp_path), abort=signal_):
            pass
    assert str(info.value) == "subagent request was aborted before the Scripted child started"
    assert info.value.code == "START_ABORTED"


async def test_abort_during_start_rolls_back(tmp_path: Path) -> None:
    abort = AbortSignal()
    provider = scripted({"LINE_AGENT_START": "hang"})
    registry = registry_with(provider)
    async with anyio.create_task_group() as tg:

        async def abort_soon() -> None:
            await provider.events.spawned.wait()
            abort.abort()

        tg.start_soon(abort_soon)
        with pytest.raises(StartAborted):
            async with registry.run("scripted", request(tmp_path), abort=abort):
                pass


async def test_caller_cancellation_during_start_rolls_back_and_propagates(tmp_path: Path) -> None:
    provider = scripted({"LINE_AGENT_START": "hang"})
    registry = registry_with(provider)
    async with anyio.create_task_group() as tg:

        async def cancel_once_spawned() -> None:
            await provider.events.spawned.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(cancel_once_spawned)
        async with registry.run("scripted", request(tmp_path)):
            pytest.fail("must not publish")
    assert tg.cancel_scope.cancelled_caught
    assert provider.events.spawned.is_set()


async def test_local_cancel_settles_aborted_with_partial_output(tmp_path: Path) -> None:
    provider = scripted({"LINE_AGENT_ANSWER": "hang"})
    async with registry_with(provider).run("scripted", request(tmp_path, task="t1")) as run:
        await provider.events.partial_output.wait()
        run.cancel()
        result = await run.result()
    assert result == SubagentResult(output="working on t1", stop_reason=StopReason.ABORTED)
    assert run.quiescent


async def test_abort_signal_after_publication_cancels_locally(tmp_path: Path) -> None:
    abort = AbortSignal()
    registry = registry_with(scripted({"LINE_AGENT_ANSWER": "hang"}))
    async with registry.run("scripted", request(tmp_path), abort=abort) as run:
        abort.abort()
        result = await run.result()
    assert result.stop_reason == "aborted"
    assert result.diagnostic is None


async def test_leaving_the_block_in_flight_is_a_local_cancellation(tmp_path: Path) -> None:
    registry = registry_with(scripted({"LINE_AGENT_ANSWER": "hang"}))
    async with registry.run("scripted", request(tmp_path)) as run:
        pass
    assert (await run.result()).stop_reason == "aborted"
    assert run.state == "quiescent"


@pytest.mark.parametrize(
    ("answer", "tail"),
    [("exit:7", "exit code: 7)"), ("signal:SIGKILL", "signal: SIGKILL)")],
)
async def test_child_exit_after_publication_is_a_process_failure(
    tmp_path: Path, answer: str, tail: str
) -> None:
    registry = registry_with(scripted({"LINE_AGENT_ANSWER": answer}))
    async with registry.run("scripted", request(tmp_path, task="t")) as run:
        result = await run.result()
    assert result.stop_reason == "error"
    assert result.output == "working on t"
    assert (
        result.diagnostic
        == f"Subagent failure (provider: Scripted; stage: process; category: process-exit; {tail}"
    )


async def test_dispose_is_idempotent_and_concurrent_safe(tmp_path: Path) -> None:
    registry = registry_with(scripted({"LINE_AGENT_IGNORE_EOF": "1"}, dispose_eof_grace_ms=100))
    async with registry.run("scripted", request(tmp_path)) as run:
        await run.result()
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(run.dispose)
        await run.dispose()
    assert run.quiescent
    assert [t.target for t in run.audit.entries].count("teardown") == 1


@pytest.fixture
def phantom() -> Iterable[int]:
    with phantom_process() as pid:
        yield pid


def unkillable(phantom: int, env: dict[str, str | None] | None = None) -> ScriptedProvider:
    config = ScriptedConfig(env=env or {}, dispose_eof_grace_ms=50, dispose_grace_ms=50)
    provider = ScriptedProvider(config=config, tree=UnkillableTree(phantom))
    return provider


async def test_a_tree_that_will_not_die_fails_dispose(
    tmp_path: Path, phantom: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.2)
    registry = registry_with(unkillable(phantom))
    with pytest.raises(TeardownFailed) as info:
        async with registry.run("scripted", request(tmp_path)) as run:
            await run.result()
    # The child exits 0 on EOF, unless a loaded machine let the 50 ms EOF grace run out first
    # and SIGTERM ended it: the line carries whichever exit was observed.
    facts = run.exit_facts
    assert facts in (ExitFacts(exit_code=0, signal=None), ExitFacts(exit_code=None, signal="SIGTERM"))
    tail = f"exit code: {facts.exit_code}" if facts.exit_code is not None else f"signal: {facts.signal}"
    expected = f"Subagent failure (provider: Scripted; stage: teardown; category: unknown; {tail})"
    assert str(info.value) == expected
    assert info.value.quiescent is False
    assert run.quiescent is False
    assert run.state == "leaked"
    with pytest.raises(TeardownFailed):  # idempotent: the same failure again
        await run.dispose()


async def test_failed_start_whose_rollback_fails_carries_both_lines(
    tmp_path: Path, phantom: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.2)
    registry = registry_with(unkillable(phantom, {"LINE_AGENT_START": "exit:4"}))
    with pytest.raises(StartFailed) as info:
        async with registry.run("scripted", request(tmp_path)):
            pass
    assert str(info.value) == (
        "Subagent failure (provider: Scripted; stage: initialize; category: process-exit; exit code: 4)\n"
        "Subagent failure (provider: Scripted; stage: teardown; category: unknown; exit code: 4)"
    )
    assert info.value.quiescent is False


async def test_aborted_start_whose_rollback_fails_carries_the_teardown_line_alone(
    tmp_path: Path, phantom: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.2)
    provider = unkillable(phantom, {"LINE_AGENT_START": "hang"})
    registry = registry_with(provider)
    abort = AbortSignal()
    async with anyio.create_task_group() as tg:

        async def abort_soon() -> None:
            await provider.events.spawned.wait()
            abort.abort()

        tg.start_soon(abort_soon)
        with pytest.raises(StartFailed) as info:
            async with registry.run("scripted", request(tmp_path), abort=abort):
                pass
    assert (
        str(info.value)
        == "Subagent failure (provider: Scripted; stage: teardown; category: unknown; signal: SIGTERM)"
    )
    assert not info.value.quiescent


async def test_concurrent_runs_are_isolated(tmp_path: Path) -> None:
    registry = registry_with(ScriptedProvider("p"))
    results: dict[str, tuple[str, str]] = {}

    async def one(i: int) -> None:
        async with registry.run("p", request(tmp_path, task=f"task {i}")) as run:
            results[run.id] = (f"task {i}", (await run.result()).output)

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(one, i)
    assert len(results) == 10
    assert all(want == got for want, got in results.values())


async def test_child_text_never_reaches_a_diagnostic(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "sk-live-" + uuid.uuid4().hex
    registry = registry_with(
        scripted({"LINE_AGENT_STDERR": secret, "LINE_AGENT_ANSWER": "exit:1"}, stderr="log")
    )
    caplog.set_level(logging.DEBUG, logger="supervisor")
    async with registry.run("scripted", request(tmp_path, task=secret)) as run:
        result = await run.result()
    assert result.diagnostic is not None
    assert secret not in result.diagnostic
    assert secret not in repr(run.audit.entries)
    assert any(secret in r.getMessage() for r in caplog.records)  # the host log has it


async def test_unregister_keeps_published_runs_valid(tmp_path: Path) -> None:
    registry = registry_with(ScriptedProvider("p"))
    async with registry.run("p", request(tmp_path, task="x")) as run:
        registry.unregister("p")
        assert (await run.result()).output == "x"


def test_run_ids_never_reuse_the_child_session() -> None:
    assert re.fullmatch(r"[0-9a-f-]{36}", str(uuid.uuid4()))


async def test_runs_on_asyncio_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs need asyncio itself (the process layer's protocol and Process, the ACP SDK's streams)."""

    def no_asyncio_loop() -> None:
        raise RuntimeError("no running event loop")

    monkeypatch.setattr("asyncio.get_running_loop", no_asyncio_loop)
    with pytest.raises(InvalidRequest, match="runs on anyio's asyncio backend only"):
        async with registry_with(ScriptedProvider()).run("scripted", request(tmp_path)):
            pass


LOCKED_CHECK = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("cwd", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    module.check_directory(module.Path(sys.argv[2]), "cwd")
except module.CwdError as error:
    print("rejected:", error)
else:
    print("accepted")
"""


def test_a_mode_0600_directory_is_not_enterable(tmp_path: Path) -> None:
    """X_OK, not just is_dir: a mode-0600 directory cannot be a child's cwd.

    Root may enter any directory, so as root the check runs as ``nobody`` (the
    module has no dependencies and is loaded by path from a world-readable copy).
    """
    from supervisor.process import _cwd

    shared = Path(tempfile.mkdtemp(prefix="cwd-check-"))
    try:
        shared.chmod(0o755)
        module = shared / "cwd.py"
        module.write_text(Path(_cwd.__file__).read_text())
        module.chmod(0o644)
        locked = shared / "locked"
        locked.mkdir(mode=0o600)
        as_root = os.geteuid() == 0
        proc = subprocess.run(
            ["/usr/bin/python3" if as_root else sys.executable, "-c", LOCKED_CHECK, str(module), str(locked)],
            user=65534 if as_root else None,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.stdout.strip() == f"rejected: cwd is not an accessible directory: {locked}", proc.stderr
    finally:
        (shared / "locked").chmod(0o700)
        shutil.rmtree(shared)
