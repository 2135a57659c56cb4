"""``subagents mcp`` under hostile input (one clear error, never a crash or child text): a real
server process, real children.

* ``cwd`` is checked as it will be used: a NUL byte (or text no path can hold) is an
  ``isError`` result, never a protocol error with a traceback on the server's stderr.
* The checked directory is held open from the check on: a queued run whose folder was
  swapped for a symlink to a folder outside the roots does not run there.
* Hostile child text and hostile tasks reach a client as U+FFFD (fuzzed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given

from tests.conftest import tagged
from tests.mcp.test_server import write_config
from tests.support.raw_mcp import RawMcp, facts
from tests.test_batch import wait_for
from tests.test_hostile_text import FUZZ, HOSTILE, TEXT, Hostile, clean, frames_env

CONFIGURATION = "Subagent failure (provider: ACP; stage: initialize; category: configuration)"


@pytest.fixture
def server_stderr(tmp_path: Path) -> Path:
    path = tmp_path / "server.stderr"
    path.touch()
    return path


def start(tmp_path: Path, stderr: Path, *args: str) -> RawMcp:
    return RawMcp(*args, cwd=tmp_path, stderr=stderr)


def text_of(result: dict[str, Any]) -> str:
    (content,) = result["content"]
    text: str = content["text"]
    return text


def held_directories(pid: int) -> list[str]:
    """What the server's descriptors name (pinned directories show as their paths)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return found


def test_a_cwd_that_no_path_can_hold_is_an_error_result(tmp_path: Path, server_stderr: Path) -> None:
    """Before: the NUL byte raised ``ValueError`` in the tool; the client got a protocol
    error and the server's stderr a traceback.  And a frame holding the escape ``\\ud800``
    was dropped by the MCP SDK's parser: the client never got an answer."""
    server = start(tmp_path, server_stderr)
    try:
        for cwd, message in (
            ('"a\\u0000b"', "cwd must not contain a NUL byte"),
            ('"\\ud800"', "cwd is not an accessible directory"),  # U+FFFD: no such folder
        ):
            result = server.call("run_subagent", f'{{"task": "t", "cwd": {cwd}}}')
            assert (result["isError"], text_of(result)) == (True, message)
        listed = server.call("list_subagents", "{}")
        assert facts(listed) == {"runs": []}  # nothing spawned
    finally:
        assert server.close() == 0
    assert "Traceback" not in server_stderr.read_text(encoding="utf-8", errors="replace")


def test_a_folder_swapped_for_a_symlink_after_the_check_cannot_move_a_run_out(
    tmp_path: Path, server_stderr: Path
) -> None:
    """A queued run's folder is replaced by a symlink to a folder outside the roots between
    the check and the start.  Before: the path was resolved again at spawn and the run ran
    outside the roots.  Now the run starts in the directory checked, or fails as a bad cwd
    when that directory is no longer where it was checked."""
    root = tmp_path / "root"
    for name in ("work", "other", "steady"):
        (root / name).mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    ready = tmp_path / "hang.ready"
    config = write_config(
        tmp_path / "c.toml",
        hang={"HANG": "1", "READY_FILE": str(ready)},
        echo={"ECHO_CWD": "1", "TEXT": ""},
    )
    server = start(
        tmp_path, server_stderr, "--config", str(config), "--root", str(root), "--max-concurrent", "1"
    )
    try:
        hanging = facts(server.call("start_subagent", '{"task": "t", "provider": "hang"}'))
        wait_for(ready.exists, "the run holding the only slot")
        queued = {
            name: server.call("start_subagent", json.dumps({"task": "t", "provider": "echo", "cwd": name}))
            for name in ("work", "other", "steady")
        }
        held = held_directories(server.process.pid)  # checked below, after the behaviour

        # The swaps: "work" moved out of the roots and replaced by a link out; "other" deleted
        # and replaced by a link out.  "steady" stays.
        (root / "work").rename(tmp_path / "moved-away")
        (root / "work").symlink_to(outside)
        (root / "other").rmdir()
        (root / "other").symlink_to(outside)

        server.call("cancel_subagent", json.dumps({"run_id": hanging["run_id"]}))
        settled = {}
        for name, started in queued.items():
            run_id = facts(started)["run_id"]
            waited = server.call("wait_subagent", json.dumps({"run_id": run_id, "timeout_s": 120}))
            settled[name] = facts(waited)
            assert not tagged(run_id)
        for name in ("work", "other"):
            assert (settled[name]["stop_reason"], settled[name]["diagnostic"]) == ("error", CONFIGURATION)
            assert str(outside) not in settled[name]["output"]
        assert settled["steady"]["stop_reason"] == "completed"
        assert settled["steady"]["output"] == f"cwd={root / 'steady'}\nsession_cwd={root / 'steady'}\n"
        assert {str(root / name) for name in queued} <= set(held)  # each checked folder was held open ...
        assert not {str(root / name) for name in queued} & set(
            held_directories(server.process.pid)
        )  # ... till settled
    finally:
        assert server.close() == 0
    assert "Traceback" not in server_stderr.read_text(encoding="utf-8", errors="replace")


@FUZZ
@given(hostile=HOSTILE, task=TEXT)
def test_fuzz_the_mcp_results(tmp_path: Path, server_stderr: Path, hostile: Hostile, task: str) -> None:
    """Hostile chunks from the child and a hostile task (``\\udXXX`` escapes in the call):
    the server's frames are strict UTF-8 with U+FFFD in both places."""
    knobs = {k.removeprefix("ACP_CHILD_"): v for k, v in frames_env(tmp_path, hostile.frames).items()}
    config = write_config(tmp_path / "c.toml", hostile={**knobs, "ECHO_PROMPT": "1"})
    server = start(tmp_path, server_stderr, "--config", str(config))
    try:
        arguments = json.dumps({"task": "t" + task})  # ASCII: lone surrogates as escapes
        result = server.call("run_subagent", arguments)
    finally:
        assert server.close() == 0
    expected = "prompt=" + clean(json.loads(arguments)["task"]) + "\n" + hostile.expected
    assert result["isError"] is False
    assert facts(result)["output"] == expected
    assert text_of(result) == expected
    for frame in server.frames:  # no escape of a lone surrogate either
        assert_clean(json.loads(frame))


def assert_clean(value: Any) -> None:
    if isinstance(value, str):
        assert clean(value) == value
    elif isinstance(value, dict):
        for key, item in value.items():
            assert_clean(key)
            assert_clean(item)
    elif isinstance(value, list):
        for item in value:
            assert_clean(item)


def test_a_hostile_task_sent_to_a_conversation_reaches_the_child_as_u_fffd(
    tmp_path: Path, server_stderr: Path
) -> None:
    """``send_subagent`` with lone-surrogate escapes: the child gets U+FFFD, the frames stay
    strict UTF-8, and an unknown id or a closed conversation is an ``isError`` line."""
    config = write_config(tmp_path / "c.toml", echo={"ECHO_PROMPT": "1", "TEXT": ""})
    server = start(tmp_path, server_stderr, "--config", str(config))
    try:
        first = facts(server.call("run_subagent", '{"task": "one", "keep_alive": true}'))
        run_id = first["run_id"]
        second = server.call("send_subagent", f'{{"run_id": "{run_id}", "task": "two \\ud800 x \\udfff"}}')
        assert second["isError"] is False
        assert facts(second)["output"] == "prompt=two \ufffd x \ufffd\n"
        unknown = server.call("send_subagent", '{"run_id": "\\ud800", "task": "t"}')
        assert (unknown["isError"], text_of(unknown)) == (True, "no subagent run with id '\ufffd'")
        server.call("close_subagent", json.dumps({"run_id": run_id}))
        closed = server.call("send_subagent", json.dumps({"run_id": run_id, "task": "three"}))
        assert closed["isError"] is True
        assert text_of(closed) == "subagent conversation is over (provider: ACP; turn: 2; reason: closed)"
        assert not tagged(run_id)
    finally:
        assert server.close() == 0
    for frame in server.frames:
        assert_clean(json.loads(frame))
    assert "Traceback" not in server_stderr.read_text(encoding="utf-8", errors="replace")


def test_an_oversized_request_is_one_error_answer_and_the_server_goes_on(
    tmp_path: Path, server_stderr: Path
) -> None:
    """A 50 MiB request line (the frame bound is 16 MiB).  Before: the transport ended the
    session, the server exited 0 with no answer and the client lost its server."""
    server = start(tmp_path, server_stderr)
    try:
        big = json.dumps({"name": "run_subagent", "arguments": {"task": "x" * (50 * 2**20)}})
        answer = server.request("tools/call", {}, raw_params=big)
        assert answer["error"] == {
            "code": -32600,
            "message": f"request too large: a frame is at most {16 * 2**20} bytes",
        }
        # an id the line's first bytes do not show (it comes after the large part): id null
        server.send_text('{"jsonrpc": "2.0", "params": {"pad": "' + "y" * (17 * 2**20) + '"}, "id": 99}')
        listed = server.call("list_subagents", "{}")  # the server goes on, the next frame is read
        assert facts(listed) == {"runs": []}
        refusals = [json.loads(f) for f in server.frames if b'"error"' in f]
        assert [r["id"] for r in refusals] == [answer["id"], None]
    finally:
        assert server.close() == 0
    assert "Traceback" not in server_stderr.read_text(encoding="utf-8", errors="replace")


def test_a_long_lived_server_forgets_old_settled_runs(tmp_path: Path, server_stderr: Path) -> None:
    """Before: every settled run was kept for ever (``list_subagents`` listed all 200 after 200
    runs).  Now the ``--keep-settled`` most recent are kept (default 100)."""
    server = start(tmp_path, server_stderr, "--keep-settled", "2")
    try:
        ids = [facts(server.call("run_subagent", '{"task": "hi"}'))["run_id"] for _ in range(3)]
        listed = [run["run_id"] for run in facts(server.call("list_subagents", "{}"))["runs"]]
        assert sorted(listed) == sorted(ids[1:])
        forgotten = server.call("wait_subagent", json.dumps({"run_id": ids[0]}))
        assert (forgotten["isError"], text_of(forgotten)) == (True, f"no subagent run with id '{ids[0]}'")
    finally:
        assert server.close() == 0


def test_idle_conversations_are_bounded_least_recently_used_first(
    tmp_path: Path, server_stderr: Path
) -> None:
    """Before: only the idle timeout bounded idle conversations (a live agent each, ~9 MiB).
    Beyond ``--max-idle`` (default 16) the least recently used is closed, as ``close_subagent``
    would: its next send says the conversation is over; the newer one goes on."""
    server = start(tmp_path, server_stderr, "--max-idle", "1")
    try:
        first = facts(server.call("run_subagent", '{"task": "hi", "keep_alive": true}'))["run_id"]
        second = facts(server.call("run_subagent", '{"task": "hi", "keep_alive": true}'))["run_id"]
        over = server.call("send_subagent", json.dumps({"run_id": first, "task": "again"}))
        assert (over["isError"], text_of(over)) == (
            True,
            "subagent conversation is over (provider: ACP; turn: 1; reason: closed)",
        )
        again = server.call("send_subagent", json.dumps({"run_id": second, "task": "again"}))
        assert again["isError"] is False
        assert tagged(first) == []
    finally:
        assert server.close() == 0
