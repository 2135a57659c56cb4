"""The DSH SDK wire client, driven over real stdio against the fake runtime.

Every test that spawns the fake does so in its own session and kills and reaps the
whole group in a ``finally``; nothing waits by sleeping (events, FIFOs, bounded scopes).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from supervisor.providers.dsh_sdk._client import (
    SERVER_NAME,
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
    Notification,
    ServerInfo,
    SessionEvent,
    SessionStatus,
    SubagentFinished,
    SubagentStarted,
    TurnEnd,
    TurnEndKind,
    TurnProgress,
    new_session_id,
)
from supervisor.providers.dsh_sdk._streams import (
    AsyncioLineReader,
)

FAKE = Path(__file__).resolve().parents[1] / "children" / "fake_dsh_runtime.py"
SECRET = "s3cr3t-dsh-credential-9f41"
TIMEOUT = 20.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class Fake:
    proc: asyncio.subprocess.Process
    client: DshClient
    record: Path
    stderr: Path
    cwd: Path

    def received(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_bytes().splitlines() if line.strip()]

    def methods(self) -> list[str]:
        return [frame["method"] for frame in self.received() if "method" in frame]

    async def initialize(self) -> ServerInfo:
        return await self.client.initialize(
            cwd=str(self.cwd), provider="deepseek-official", model="deepseek-v4-flash"
        )


@asynccontextmanager
async def fake_runtime(
    tmp_path: Path, *, max_frame_bytes: int = 1 << 20, knobs: dict[str, str] | None = None, **more: str
) -> AsyncIterator[Fake]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("FAKE_DSH_")}
    record = tmp_path / "received.jsonl"
    env["FAKE_DSH_RECORD"] = str(record)
    env.update({f"FAKE_DSH_{name}": value for name, value in {**(knobs or {}), **more}.items()})
    stderr = tmp_path / "stderr.log"
    with stderr.open("wb") as stderr_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            str(FAKE),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr_file,
            env=env,
            cwd=tmp_path,
            start_new_session=True,
        )
    try:
        assert proc.stdout is not None
        assert proc.stdin is not None
        client = DshClient.from_asyncio_streams(proc.stdout, proc.stdin, max_frame_bytes=max_frame_bytes)
        async with client:
            yield Fake(proc, client, record, stderr, tmp_path)
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.stdin is not None:
            proc.stdin.close()
        with anyio.CancelScope(shield=True):
            await proc.wait()
        assert proc.returncode is not None


async def wait_fifo(path: Path) -> str:
    """Block until the fake opens, writes and closes the FIFO at ``path``; return the text."""

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


def assert_no_secret(*values: object) -> None:
    for value in values:
        assert SECRET not in str(value)
        assert SECRET not in repr(value)


# ----------------------------------------------------------------------------- handshake


@pytest.mark.anyio
@pytest.mark.parametrize("max_tokens", [None, 512])
async def test_handshake_carries_the_route_and_returns_the_identity(
    tmp_path: Path, max_tokens: int | None
) -> None:
    async with fake_runtime(tmp_path) as fake:
        info = await fake.client.initialize(
            cwd=str(tmp_path), provider="deepseek-official", model="deepseek-v4-flash", max_tokens=max_tokens
        )
        assert info == ServerInfo(SERVER_NAME, "0.0.1")
        await fake.client.shutdown(TIMEOUT)
        (frame, shutdown) = fake.received()
    expected: dict[str, object] = {
        "cwd": str(tmp_path),
        "provider": "deepseek-official",
        "model": "deepseek-v4-flash",
    }
    if max_tokens is not None:
        expected["maxTokens"] = max_tokens
    assert frame["jsonrpc"] == "2.0"
    assert frame["method"] == "initialize"
    assert frame["params"] == expected
    assert frame["id"].startswith("req_")
    assert shutdown["method"] == "shutdown"
    assert "params" not in shutdown


@pytest.mark.anyio
@pytest.mark.parametrize(
    "knobs",
    [{"SERVER_NAME": "some-other-runtime"}, {"INIT_MALFORMED": "1"}],
    ids=["wrong-name", "no-version"],
)
async def test_a_wrong_or_malformed_identity_is_a_protocol_error(
    tmp_path: Path, knobs: dict[str, str]
) -> None:
    async with fake_runtime(tmp_path, knobs=knobs) as fake:
        with pytest.raises(DshProtocolError) as caught:
            await fake.initialize()
    assert "some-other-runtime" not in str(caught.value)


@pytest.mark.anyio
async def test_an_initialize_error_answer_is_typed_and_keeps_its_payload_out_of_the_text(
    tmp_path: Path,
) -> None:
    async with fake_runtime(tmp_path, INIT_ERROR="1", SECRET=SECRET) as fake:
        with pytest.raises(DshRpcError) as caught:
            await fake.initialize()
    error = caught.value
    assert (error.method, error.code) == ("initialize", 7)
    assert SECRET in error.message
    assert error.data == {"secret": SECRET}
    assert_no_secret(error)


@pytest.mark.anyio
async def test_initialize_rejects_a_relative_cwd_and_a_bad_max_tokens(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path) as fake:
        with pytest.raises(ValueError, match="absolute"):
            await fake.client.initialize(cwd="relative/dir", provider="p", model="m")
        for bad in (0, -1, 2**53, True):
            with pytest.raises(ValueError, match="max_tokens"):
                await fake.client.initialize(cwd=str(tmp_path), provider="p", model="m", max_tokens=bad)
        assert fake.received() == []


@pytest.mark.anyio
async def test_a_hung_initialize_is_bounded_by_the_callers_scope(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, HANG_INIT="1") as fake:
        with anyio.move_on_after(0.3) as scope:
            await fake.initialize()
        assert scope.cancelled_caught
        assert fake.client.pending_requests == 0


# ----------------------------------------------------------------------------- turns


async def one_turn(fake: Fake, progress: TurnProgress | None = None, **kwargs: Any) -> Any:
    await fake.initialize()
    return await fake.client.run_turn("do the task", session_id=new_session_id(), progress=progress, **kwargs)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("completed", TurnEnd("completed")),
        ("max-tokens", TurnEnd("max-tokens")),
        ("aborted:disposed", TurnEnd("aborted", "disposed")),
        ("aborted:user", TurnEnd("aborted", "user")),
        ("aborted:parent", TurnEnd("aborted", "parent")),
        ("aborted:hook", TurnEnd("aborted", "hook")),
        ("aborted:legacy", TurnEnd("aborted", "legacy")),
        ("aborted", TurnEnd("aborted")),
        ("blocked", TurnEnd("blocked")),
        ("error", TurnEnd("error")),
        ("interrupted", TurnEnd("interrupted")),
        ("quantum-leap", TurnEnd("quantum-leap")),
        ("malformed", TurnEnd(None)),
        ("none", None),
    ],
)
async def test_every_turn_end_kind_is_reported(tmp_path: Path, reason: str, expected: TurnEnd | None) -> None:
    async with fake_runtime(tmp_path, REASON=reason, SECRET=SECRET) as fake:
        outcome = await one_turn(fake)
    assert outcome.output == "fake answer"
    assert outcome.turn_end == expected
    assert_no_secret(outcome)


def test_turn_end_classification() -> None:
    assert TurnEnd("completed").kind is TurnEndKind.COMPLETED
    assert TurnEnd("max-tokens").kind is TurnEndKind.MAX_TOKENS
    assert TurnEnd("aborted", "disposed").disposed
    assert not TurnEnd("aborted", "user").disposed
    assert not TurnEnd("error", "disposed").disposed
    assert TurnEnd("blocked").kind is TurnEndKind.BLOCKED
    assert TurnEnd("interrupted").kind is TurnEndKind.INTERRUPTED
    assert TurnEnd("unknown").kind is TurnEndKind.UNKNOWN
    assert TurnEnd("quantum-leap").kind is TurnEndKind.UNKNOWN
    assert TurnEnd(None).kind is TurnEndKind.UNKNOWN


@pytest.mark.anyio
@pytest.mark.parametrize(("first", "last"), [("error", "completed"), ("completed", "max-tokens")])
async def test_the_last_turn_end_wins(tmp_path: Path, first: str, last: str) -> None:
    async with fake_runtime(tmp_path, FIRST_REASON=first, REASON=last) as fake:
        outcome = await one_turn(fake)
    assert outcome.turn_end == TurnEnd(last)


@pytest.mark.anyio
@pytest.mark.parametrize("order", ["before", "after"])
async def test_the_turn_is_matched_to_its_receipt_whether_it_precedes_the_response_or_not(
    tmp_path: Path, order: str
) -> None:
    seen: list[Notification] = []
    async with fake_runtime(tmp_path, ORDER=order, STALE="1") as fake:
        progress = TurnProgress()
        outcome = await one_turn(fake, progress, on_notification=seen.append)
    assert progress.received
    assert outcome.output == "fake answer"
    assert outcome.turn_end == TurnEnd("completed")
    first = seen[0]
    assert isinstance(first, SessionEvent)
    assert first.type == "agent/inbox/spliced"
    assert all("stale" not in repr(note) for note in seen)
    last = seen[-1]
    assert isinstance(last, SessionStatus)
    assert last.status == "idle"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("message", "output"),
    [("normal", "final text"), ("empty", "streamed text"), ("none", "streamed text"), ("textless", "")],
)
async def test_output_is_the_last_non_empty_message_else_the_text_deltas(
    tmp_path: Path, message: str, output: str
) -> None:
    async with fake_runtime(tmp_path, MESSAGE=message, TEXT="final text", DELTAS="streamed text") as fake:
        outcome = await one_turn(fake)
    assert outcome.output == output


@pytest.mark.anyio
async def test_output_is_bounded_by_max_output_bytes(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, TEXT="añswer with a lot of text", MESSAGE="none") as fake:
        progress = TurnProgress(max_output_bytes=3)
        outcome = await one_turn(fake, progress)
    assert outcome.output == "añ"
    assert progress.truncated


@pytest.mark.anyio
async def test_a_malformed_assistant_message_is_a_protocol_error_and_keeps_the_streamed_text(
    tmp_path: Path,
) -> None:
    async with fake_runtime(tmp_path, MESSAGE="malformed", DELTAS="partial stream", SECRET=SECRET) as fake:
        progress = TurnProgress()
        with pytest.raises(DshProtocolError) as caught:
            await one_turn(fake, progress)
    assert progress.output == "partial stream"
    assert_no_secret(caught.value)


@pytest.mark.anyio
async def test_a_root_event_without_an_envelope_is_a_protocol_error(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, MALFORMED_EVENT="1", SECRET=SECRET) as fake:
        with pytest.raises(DshProtocolError) as caught:
            await one_turn(fake)
    assert_no_secret(caught.value)


@pytest.mark.anyio
async def test_malformed_frames_are_ignored_and_logged_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="supervisor")
    async with fake_runtime(tmp_path, MALFORMED_FRAMES="1", SECRET=SECRET, SHUTDOWN="stay") as fake:
        outcome = await one_turn(fake)
        await fake.client.shutdown(TIMEOUT)
        answers = [frame for frame in fake.received() if frame.get("id") == "srv-1"]
    assert outcome.output == "fake answer"
    assert outcome.turn_end == TurnEnd("completed")
    assert_no_secret(outcome)
    assert answers == [
        {"jsonrpc": "2.0", "id": "srv-1", "error": {"code": -32601, "message": "method not found"}}
    ]
    ignored = [record for record in caplog.records if "ignored a frame" in record.getMessage()]
    assert len(ignored) >= 15
    assert all(record.levelno == logging.DEBUG and record.name == "supervisor" for record in ignored)


@pytest.mark.anyio
async def test_multibyte_utf8_split_across_reads_is_decoded_whole(tmp_path: Path) -> None:
    text = "héllo wörld — 世界 🌍"
    async with fake_runtime(tmp_path, TEXT=text, DELTAS="ascii", SPLIT_UTF8="1") as fake:
        outcome = await one_turn(fake)
    assert outcome.output == text


@pytest.mark.anyio
async def test_the_session_tree_is_observed_and_only_the_root_makes_the_output(tmp_path: Path) -> None:
    seen: list[Notification] = []
    async with fake_runtime(tmp_path, SUBAGENT="1") as fake:
        outcome = await one_turn(fake, on_notification=seen.append)
    assert outcome.output == "fake answer"
    started = [note for note in seen if isinstance(note, SubagentStarted)]
    assert len(started) == 2
    root = started[0].parent_session_id
    child, grandchild = started[0].child_session_id, started[1].child_session_id
    assert started[1].parent_session_id == child
    sessions = {note.session_id for note in seen if isinstance(note, SessionEvent | SessionStatus)}
    assert sessions == {root, child, grandchild}
    assert any(isinstance(note, SubagentFinished) and note.child_session_id == child for note in seen)
    last = seen[-1]
    assert isinstance(last, SessionStatus)
    assert last.session_id == root


# ----------------------------------------------------------------------------- failures


@pytest.mark.anyio
async def test_a_frame_over_max_frame_bytes_fails_the_client_as_protocol(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, max_frame_bytes=4096, OVERSIZE="10000") as fake:
        with pytest.raises(DshProtocolError):
            await one_turn(fake)
        assert isinstance(fake.client.failure, DshProtocolError)
        with pytest.raises(DshProtocolError):
            await fake.client.request("anything")


@pytest.mark.anyio
async def test_eof_before_the_handshake_is_transport_closed(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, EXIT_BEFORE_INIT="3") as fake:
        with pytest.raises(DshTransportClosed) as caught:
            await fake.initialize()
        assert await fake.proc.wait() == 3
        with pytest.raises(DshTransportClosed):
            await fake.client.shutdown(TIMEOUT)
    assert caught.value.reason == "eof"


@pytest.mark.anyio
@pytest.mark.parametrize(("order", "partial"), [("after", "partial words"), ("before", "")])
async def test_exit_mid_turn_is_transport_closed_and_keeps_attributed_text(
    tmp_path: Path, order: str, partial: str
) -> None:
    async with fake_runtime(tmp_path, ORDER=order, DELTAS="partial words", EXIT_MID_TURN="5") as fake:
        progress = TurnProgress()
        with pytest.raises(DshTransportClosed) as caught:
            await one_turn(fake, progress)
        assert await fake.proc.wait() == 5
    assert caught.value.reason == "eof"
    assert progress.output == partial
    assert progress.turn_end is None


@pytest.mark.anyio
async def test_a_broken_stdin_is_transport_closed(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, CLOSE_STDIN="1") as fake:
        with pytest.raises(DshTransportClosed) as caught:
            await one_turn(fake)
        assert caught.value.reason == "broken-pipe"
        assert isinstance(caught.value.__cause__, ConnectionError)
        with pytest.raises(DshTransportClosed) as again:
            await fake.client.request("anything")
        assert again.value.reason == "broken-pipe"
        assert fake.proc.returncode is None


@pytest.mark.anyio
async def test_a_prompt_error_answer_is_typed_and_attributes_no_text(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, PROMPT_ERROR="1", SECRET=SECRET) as fake:
        progress = TurnProgress()
        with pytest.raises(DshRpcError) as caught:
            await one_turn(fake, progress)
    assert caught.value.method == "session/prompt"
    assert SECRET in caught.value.message
    assert_no_secret(caught.value)
    assert progress.output == ""


@pytest.mark.anyio
async def test_a_malformed_prompt_acceptance_is_a_protocol_error_and_attributes_no_text(
    tmp_path: Path,
) -> None:
    async with fake_runtime(tmp_path, MALFORMED_PROMPT="1") as fake:
        progress = TurnProgress()
        with pytest.raises(DshProtocolError):
            await one_turn(fake, progress)
    assert not progress.received
    assert progress.output == ""
    assert progress.turn_end is None


@pytest.mark.anyio
async def test_a_cancelled_turn_keeps_its_partial_output_and_leaves_nothing_pending(tmp_path: Path) -> None:
    streamed = anyio.Event()
    progress = TurnProgress()

    def observe(note: Notification) -> None:
        if progress.output == "half done":
            streamed.set()

    async with fake_runtime(tmp_path, HANG_PROMPT="partial", DELTAS="half done") as fake:
        await fake.initialize()
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: fake.client.run_turn(
                    "task", session_id=new_session_id(), progress=progress, on_notification=observe
                )
            )
            with anyio.fail_after(TIMEOUT):
                await streamed.wait()
            group.cancel_scope.cancel()
        assert fake.client.pending_requests == 0
        await fake.client.shutdown(TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            assert await fake.proc.wait() == 0
    assert progress.output == "half done"
    assert progress.turn_end is None


@pytest.mark.anyio
async def test_a_silent_prompt_is_cancellable_once_the_runtime_has_it(tmp_path: Path) -> None:
    ready = tmp_path / "ready.fifo"
    os.mkfifo(ready)
    progress = TurnProgress()
    async with fake_runtime(tmp_path, HANG_PROMPT="silent", READY_FILE=str(ready)) as fake:
        await fake.initialize()
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: fake.client.run_turn("task", session_id=new_session_id(), progress=progress)
            )
            assert await wait_fifo(ready) == "ready"
            assert fake.client.pending_requests == 1
            group.cancel_scope.cancel()
        assert fake.client.pending_requests == 0
    assert not progress.received


# ----------------------------------------------------------------------------- shutdown and stdin


@pytest.mark.anyio
async def test_shutdown_is_idempotent(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path) as fake:
        await fake.initialize()
        await fake.client.shutdown(TIMEOUT)
        await fake.client.shutdown(TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            assert await fake.proc.wait() == 0
        await fake.client.shutdown(TIMEOUT)
        assert fake.methods() == ["initialize", "shutdown"]


@pytest.mark.anyio
async def test_a_hung_shutdown_is_bounded_and_sent_once(tmp_path: Path) -> None:
    failures: list[BaseException] = []

    async def shut() -> None:
        try:
            await fake.client.shutdown(0.3)
        except DshError as exc:
            failures.append(exc)

    async with fake_runtime(tmp_path, SHUTDOWN="hang") as fake:
        await fake.initialize()
        with anyio.fail_after(TIMEOUT):  # a guard against a hang, not a timing claim
            async with anyio.create_task_group() as group:
                group.start_soon(shut)
                group.start_soon(shut)
        assert len(failures) == 2
        assert all(isinstance(exc, DshTimeout) for exc in failures)
        with pytest.raises(DshTimeout):
            await fake.client.shutdown(0.3)
        await fake.client.close_input()  # the fake reads on until EOF: the record is complete
        with anyio.fail_after(TIMEOUT):
            assert await fake.proc.wait() == 0
        assert fake.methods() == ["initialize", "shutdown"]
        assert fake.client.pending_requests == 0
    assert [type(exc) for exc in failures] == [DshTimeout, DshTimeout]


@pytest.mark.anyio
async def test_a_shutdown_error_answer_is_typed_every_time(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, SHUTDOWN="error", SECRET=SECRET) as fake:
        await fake.initialize()
        for _ in range(2):
            with pytest.raises(DshRpcError) as caught:
                await fake.client.shutdown(TIMEOUT)
            assert caught.value.method == "shutdown"
            assert_no_secret(caught.value)


@pytest.mark.anyio
async def test_close_input_is_idempotent_and_a_runtime_that_honours_eof_exits(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path) as fake:
        await fake.initialize()
        await fake.client.close_input()
        await fake.client.close_input()
        with pytest.raises(DshTransportClosed) as caught:
            await fake.client.request("anything")
        assert caught.value.reason == "input-closed"
        with anyio.fail_after(TIMEOUT):
            assert await fake.proc.wait() == 0


@pytest.mark.anyio
async def test_stderr_noise_never_reaches_the_wire(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path, STDERR="some noise", STDERR_NO_NEWLINE="1", SECRET=SECRET) as fake:
        outcome = await one_turn(fake)
    assert outcome.output == "fake answer"
    assert_no_secret(outcome)
    assert SECRET in fake.stderr.read_text()


# ----------------------------------------------------------------------------- line reader


async def _read_all(chunks: list[bytes], max_frame_bytes: int) -> list[bytes]:
    stream = asyncio.StreamReader()
    for chunk in chunks:
        stream.feed_data(chunk)
    stream.feed_eof()
    reader = AsyncioLineReader(stream, max_frame_bytes=max_frame_bytes)
    lines: list[bytes] = []
    while (line := await reader.receive_line()) is not None:
        lines.append(line)
    return lines


def test_the_line_reader_enforces_max_frame_bytes_and_returns_a_final_unterminated_line() -> None:
    assert asyncio.run(_read_all([b"12345\n", b"abc"], max_frame_bytes=5)) == [b"12345", b"abc"]
    with pytest.raises(DshProtocolError):
        asyncio.run(_read_all([b"123456\n"], max_frame_bytes=5))
    with pytest.raises(DshProtocolError):
        asyncio.run(_read_all([b"1234", b"567", b"89"], max_frame_bytes=5))


@pytest.mark.anyio
async def test_a_stdin_closed_behind_the_clients_back_is_transport_closed(tmp_path: Path) -> None:
    async with fake_runtime(tmp_path) as fake:
        await fake.initialize()
        assert fake.proc.stdin is not None
        fake.proc.stdin.close()
        with pytest.raises(DshTransportClosed) as caught:
            await fake.client.request("anything")
    assert caught.value.reason == "broken-pipe"


# ----------------------------------------------------------------------------- in memory


class SilentSource:
    async def receive_line(self) -> bytes | None:
        await anyio.sleep_forever()
        return None


class NullSink:
    async def send(self, data: bytes) -> None:
        pass

    async def close_input(self) -> None:
        pass


@pytest.mark.anyio
async def test_an_error_inside_the_client_context_propagates_unwrapped() -> None:
    async def body() -> None:
        async with DshClient(SilentSource(), NullSink()):
            try:
                raise ConnectionResetError("raw")
            except ConnectionResetError as exc:
                raise DshTransportClosed("eof") from exc

    with pytest.raises(DshTransportClosed) as caught:
        await body()
    assert isinstance(caught.value.__cause__, ConnectionResetError)


@pytest.mark.anyio
async def test_stopping_the_reader_fails_what_is_pending() -> None:
    client = DshClient(SilentSource(), NullSink())
    failures: list[DshError] = []

    async def ask() -> None:
        try:
            await client.request("anything")
        except DshError as exc:
            failures.append(exc)

    async with anyio.create_task_group() as group:
        reader = anyio.CancelScope()

        async def serve(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            with reader:
                await client.serve(task_status=task_status)

        await group.start(serve)
        group.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert client.pending_requests == 1
        reader.cancel()
    assert [type(exc) for exc in failures] == [DshTransportClosed]
    assert isinstance(failures[0], DshTransportClosed)
    assert failures[0].reason == "stopped"
    assert client.pending_requests == 0
