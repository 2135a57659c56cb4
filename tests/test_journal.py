"""The journal (every run recorded, so a conversation can be resumed later) as a user meets it: real
``subagents`` processes, the real example ACP agent, a real SQLite file; supervising processes
SIGKILLed at random moments, several writing at once, and a corrupt, foreign, read-only or full
journal.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest

from supervisor import Registry, SubagentRequest
from supervisor._kinds import example_kind
from supervisor.journal import Journal, _schema
from supervisor.journal._read import INTERRUPTED, list_runs, read_run
from tests.test_batch import supervised_children

CLI = [sys.executable, "-m", "supervisor.cli"]
GONE_WITHIN = 60.0  # a bound for "eventually", never a claim about speed
TASK = "journal-canary-task 7d1f"  # must never reach the journal unless journal_text = true


def cli(
    *args: str, journal: Path | str, cwd: Path, stdin: str = "", **env: str
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "SUBAGENTS_JOURNAL": str(journal), **env}
    return subprocess.run(
        [*CLI, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=180, env=environ
    )


def runs_json(journal: Path, cwd: Path, *args: str) -> list[dict[str, Any]]:
    proc = cli("runs", "--json", *args, journal=journal, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    runs: list[dict[str, Any]] = json.loads(proc.stdout)
    return runs


def show_json(journal: Path, cwd: Path, run_id: str) -> dict[str, Any]:
    proc = cli("show", "--json", run_id, journal=journal, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    shown: dict[str, Any] = json.loads(proc.stdout)
    return shown


def wait_children_gone() -> None:
    deadline = time.monotonic() + GONE_WITHIN
    while supervised_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert supervised_children() == []


# -- what is written --------------------------------------------------------------------------


def test_a_run_is_journaled_with_closed_facts_and_no_text(tmp_path: Path) -> None:
    journal = tmp_path / "state" / "journal.db"
    proc = cli("run", TASK, journal=journal, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert TASK in proc.stdout
    [run] = runs_json(journal, tmp_path)
    assert (run["kind"], run["provider"], run["state"], run["turns"], run["stop_reason"]) == (
        "acp",
        "acp",
        "ended",
        1,
        "completed",
    )
    shown = show_json(journal, tmp_path, run["run_id"])
    assert shown["cwd"] == str(tmp_path)
    assert shown["quiescent"] is True
    assert shown["conversation"] is False
    assert len(shown["config_digest"]) == 64
    assert [(t["turn"], t["state"], t["stop_reason"]) for t in shown["turn_records"]] == [
        (1, "settled", "completed")
    ]
    assert "task" not in shown["turn_records"][0]
    events = [a["event"] for a in shown["audit"]]
    assert events[0] == "initialize_answered"
    assert events[-1] == "tree_gone"
    # mode 0600, in a directory of its own made 0700; no text of the task or the answer
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    assert stat.S_IMODE(journal.parent.stat().st_mode) == 0o700
    data = b"".join(p.read_bytes() for p in journal.parent.iterdir())
    assert TASK.encode() not in data
    assert b"Hello! You asked" not in data


def test_the_wal_and_shm_files_are_0600_while_a_journal_is_open(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "j.db")
    try:
        journal.write(
            "INSERT INTO audit (run_id, turn, machine, event, source, target, t, at) "
            "VALUES ('r', 1, 'lifecycle', 'e', 's', 't', 0, 0)",
            (),
        )
        assert journal.flush(30)
        for suffix in ("", "-wal", "-shm"):
            assert stat.S_IMODE((tmp_path / f"j.db{suffix}").stat().st_mode) == 0o600, suffix
    finally:
        journal.close()


def test_journal_text_keeps_each_turns_task_and_answer(tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    example = tmp_path / "journal.db"
    config.write_text(
        f'journal = "{example.name}"\njournal_text = true\n\n[[provider]]\nkind = "acp"\n'
        f'command = "{sys.executable}"\n'
        f'args = ["-I", "{Path(__file__).parent.parent / "supervisor/providers/acp/_example_agent.py"}"]\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "SUBAGENTS_JOURNAL"}
    proc = subprocess.run(
        [*CLI, "chat", "--config", str(config)],
        cwd=tmp_path,
        input=f"{TASK}\n@recall\n",
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    [run] = runs_json(example, tmp_path)
    shown = show_json(example, tmp_path, run["run_id"])
    assert shown["conversation"] is True
    assert [(t["turn"], t["task"], t["answer"]) for t in shown["turn_records"]] == [
        (1, TASK, f"Hello! You asked: {TASK}"),
        (2, "@recall", f"Earlier in this session you asked: {TASK}"),
    ]


def test_false_turns_the_journal_off(tmp_path: Path) -> None:
    proc = cli("run", "hello", journal="false", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.iterdir())
    proc = cli("run", "hello", "--journal", "off", journal=tmp_path / "j.db", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "j.db").exists()


def test_the_default_place_is_under_xdg_state_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SUBAGENTS_JOURNAL"}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    proc = subprocess.run(
        [*CLI, "run", "hello"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    journal = tmp_path / "state" / "subagent-supervisor" / "journal.db"
    assert len(list_runs(journal)) == 1


def test_a_registry_with_a_journal_writes_each_turn_as_it_settles(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> None:
        registry = Registry(journal=path)
        found = example_kind()
        assert found is not None
        name, kind = found
        assert kind.example is not None
        registry.register(kind.provider(kind.example(), name))
        request = SubagentRequest(task="one\n@usage", parent_cwd=tmp_path)
        async with registry.run(name, request, conversation=True) as run:
            await run.result()
            assert registry.journal is not None
            assert registry.journal.flush(30)
            record = read_run(path, run.id)  # while the conversation is idle
            assert record is not None
            assert record.state == "idle"
            assert [(t.number, t.state, t.stop_reason) for t in record.turn_records] == [
                (1, "settled", "completed")
            ]
            assert record.turn_records[0].usage == {
                "input_tokens": 1,
                "output_tokens": 4,
                "cached_input_tokens": None,
                "cost_usd": 0.0005,
            }
            await run.send("two")
        registry.journal.flush(30)
        record = read_run(path, run.id)
        assert record is not None
        assert (record.state, record.turns, record.end_reason) == ("ended", 2, "closed")

    anyio.run(main, backend="asyncio")


# -- interrupted -----------------------------------------------------------------------------


@contextlib.contextmanager
def chat_host(tmp_path: Path, journal: Path) -> Iterator[subprocess.Popen[str]]:
    env = {**os.environ, "SUBAGENTS_JOURNAL": str(journal)}
    proc = subprocess.Popen(
        [*CLI, "chat"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=GONE_WITHIN)
        for stream in (proc.stdin, proc.stdout):
            assert stream is not None
            with contextlib.suppress(OSError):
                stream.close()
        wait_children_gone()


def wait_for_turn(journal: Path, number: int, state: str) -> str:
    """The run id once the journal shows turn ``number`` in ``state`` (waits on the file)."""
    deadline = time.monotonic() + GONE_WITHIN
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            for record in list_runs(journal):
                full = read_run(journal, record.id)
                assert full is not None
                if any(t.number == number and t.state == state for t in full.turn_records):
                    return record.id
        time.sleep(0.05)
    raise AssertionError(f"turn {number} never became {state}")


def test_a_host_sigkilled_mid_turn_leaves_an_interrupted_run_and_turn(tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    with chat_host(tmp_path, journal) as proc:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.write("first\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "Hello! You asked: first\n"
        proc.stdin.write("@slow 60000\nsecond turn, slowly\n")  # one line per turn: @slow alone
        proc.stdin.flush()
        run_id = wait_for_turn(journal, 2, "running")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=GONE_WITHIN)
    [run] = runs_json(journal, tmp_path)
    assert (run["run_id"], run["state"], run["turns"]) == (run_id, INTERRUPTED, 2)
    assert runs_json(journal, tmp_path, "--state", "interrupted") == [run]
    assert runs_json(journal, tmp_path, "--state", "ended") == []
    shown = show_json(journal, tmp_path, run_id)
    assert [(t["turn"], t["state"]) for t in shown["turn_records"]] == [(1, "settled"), (2, INTERRUPTED)]
    text = cli("runs", journal=journal, cwd=tmp_path)
    assert text.returncode == 0
    assert "interrupted" in text.stdout


@pytest.mark.parametrize("seed", range(4))
def test_a_host_sigkilled_at_a_random_moment_leaves_a_readable_journal(tmp_path: Path, seed: int) -> None:
    journal = tmp_path / "j.db"
    delay = random.Random(seed).uniform(0.0, 2.5)
    with chat_host(tmp_path, journal) as proc:
        assert proc.stdin is not None
        proc.stdin.write("one\n@recall\n@slow 200\nthree\n")
        proc.stdin.flush()
        time.sleep(delay)  # the moment of the kill; nothing below depends on which it was
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=GONE_WITHIN)
    if not journal.exists():  # killed before the journal was opened
        return
    connection = sqlite3.connect(journal)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        connection.close()
    for run in runs_json(journal, tmp_path):
        assert run["state"] in ("interrupted", "ended"), run
        shown = show_json(journal, tmp_path, run["run_id"])
        assert all(t["state"] in ("settled", INTERRUPTED) for t in shown["turn_records"]), shown


# -- several writers ---------------------------------------------------------------------------

WRITER = """
import sys
from supervisor.journal import Journal
from supervisor.journal._observer import RunJournal
from supervisor._seam import SubagentResult
from types import SimpleNamespace
from supervisor._kinds import example_kind
journal = Journal(sys.argv[1])
assert journal.writing, journal.problem
config = example_kind()[1].example()
for n in range(int(sys.argv[3])):
    run = SimpleNamespace(id=f"{sys.argv[2]}-{n}", kind="acp", provider_name="p", turn=1, task="t", state="prompt",
                          containment="process-tree", conversation=False, quiescent=True, config=config,
                          request=SimpleNamespace(parent_cwd="/"), resources=None, conversation_over=None)
    hooks = RunJournal(journal)
    hooks.begin(run)
    hooks.published(run)
    hooks.settled(run, SubagentResult(output="x", stop_reason="completed"))
    hooks.end(run)
journal.close()
"""


def test_several_processes_writing_at_once_lose_no_rows(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    script = tmp_path / "writer.py"
    script.write_text(WRITER.replace("from supervisor._seam", "from supervisor._seam"))
    with Journal(path) as _:
        pass  # created first, so the writers race on rows, not on the schema
    writers = [
        subprocess.Popen(
            [sys.executable, str(script), str(path), f"w{i}", "300"], stderr=subprocess.PIPE, text=True
        )
        for i in range(4)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=180)
        assert writer.returncode == 0, err
    records = list_runs(path)
    assert len(records) == 1200
    assert {r.state for r in records} == {"ended"}
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("SELECT count(*) FROM turns WHERE state = 'settled'").fetchone() == (1200,)
    finally:
        connection.close()


def test_two_batches_journal_every_run_to_one_file(tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    env = {**os.environ, "SUBAGENTS_JOURNAL": str(journal)}
    procs = []
    for name in ("a", "b"):
        items = tmp_path / f"{name}.jsonl"
        items.write_text("".join(json.dumps({"id": f"{name}{i}", "task": "hi"}) + "\n" for i in range(4)))
        procs.append(
            subprocess.Popen(
                [*CLI, "batch", str(items), "--concurrency", "2"],
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert len(out.splitlines()) == 4
    records = list_runs(journal)
    assert len(records) == 8
    assert {(r.state, r.stop_reason) for r in records} == {("ended", "completed")}


def test_a_journal_another_process_creates_meanwhile_is_not_taken_for_a_foreign_file(tmp_path: Path) -> None:
    """Two supervising processes open one new journal at once: the second looks at the file
    while the first creates its tables.  Whatever it reads must be one snapshot (read one
    PRAGMA at a time, it saw an application id still 0 and then the first one's tables, and
    refused the journal as another program's: its runs went unjournaled)."""
    path = tmp_path / "j.db"
    sqlite3.connect(path).close()  # an empty file, as the first process's open leaves it
    creator = sqlite3.connect(path, isolation_level=None)

    class Interleaved(sqlite3.Connection):
        """The other process's whole creation commits between our statements, if we make
        more than one."""

        statements = 0

        def execute(self, *args: Any, **kwargs: Any) -> sqlite3.Cursor:
            if Interleaved.statements == 1:
                _schema.prepare(creator)
            Interleaved.statements += 1
            return super().execute(*args, **kwargs)

    looker = sqlite3.connect(path, isolation_level=None, factory=Interleaved)
    try:
        _schema.check_ours(looker)  # no SchemaProblem
    finally:
        looker.close()
        creator.close()


# -- bad input ---------------------------------------------------------------------------------


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if not line.startswith("subagents: ") or "journal" in line]
    journal_lines = [line for line in lines if "journal" in line]
    assert len(journal_lines) == 1, text
    return journal_lines[0]


def test_a_corrupt_journal_is_one_line_and_the_run_still_runs(tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    journal.write_bytes(b"this is not a database at all\n" * 200)
    proc = cli("run", "ping", journal=journal, cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "Hello! You asked: ping\n"
    assert one_line(proc.stderr) == (
        f"subagents: journal {journal}: corrupt or not a SQLite file; runs are not journaled"
    )
    listed = cli("runs", journal=journal, cwd=tmp_path)
    assert listed.returncode == 1
    assert listed.stderr == f"subagents: journal {journal}: corrupt or not a SQLite file\n"


def test_a_foreign_sqlite_file_is_one_line_and_is_left_alone(tmp_path: Path) -> None:
    journal = tmp_path / "other.db"
    connection = sqlite3.connect(journal)
    connection.execute("CREATE TABLE notes (text TEXT)")
    connection.execute("INSERT INTO notes VALUES ('mine')")
    connection.commit()
    connection.close()
    before = journal.read_bytes()
    proc = cli("run", "ping", journal=journal, cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "Hello! You asked: ping\n"
    assert one_line(proc.stderr) == (
        f"subagents: journal {journal}: not a subagents journal (another program's SQLite file); "
        "runs are not journaled"
    )
    assert journal.read_bytes() == before
    shown = cli("show", "some-id", journal=journal, cwd=tmp_path)
    assert shown.returncode == 1
    assert shown.stderr == (
        f"subagents: journal {journal}: not a subagents journal (another program's SQLite file)\n"
    )


def test_a_journal_of_a_newer_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    Journal(journal).close()
    connection = sqlite3.connect(journal)
    connection.execute(f"PRAGMA user_version = {_schema.VERSION + 1}")
    connection.close()
    proc = cli("runs", journal=journal, cwd=tmp_path)
    assert proc.returncode == 1
    assert "written by a newer subagent-supervisor" in proc.stderr
    assert proc.stderr.count("\n") == 1
    proc = cli("run", "ping", journal=journal, cwd=tmp_path)
    assert proc.returncode == 0
    assert "newer subagent-supervisor" in one_line(proc.stderr)


def test_an_unknown_run_id_is_one_line(tmp_path: Path) -> None:
    journal = tmp_path / "j.db"
    assert cli("run", "ping", journal=journal, cwd=tmp_path).returncode == 0
    proc = cli("show", "no-such-run", journal=journal, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == f"subagents: no run no-such-run in the journal {journal}\n"


def test_no_journal_yet_lists_nothing(tmp_path: Path) -> None:
    proc = cli("runs", journal=tmp_path / "none.db", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    assert not (tmp_path / "none.db").exists()
    proc = cli("runs", "--limit", "0", journal=tmp_path / "none.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "subagents: --limit must be a positive integer\n"


@contextlib.contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_journal_on_a_read_only_disk_is_one_line_and_the_run_still_runs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "1m") as disk:
        journal = disk / "j.db"
        assert cli("run", "ping", journal=journal, cwd=tmp_path).returncode == 0
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        proc = cli("run", "ping", journal=journal, cwd=tmp_path)
        assert proc.returncode == 0
        assert proc.stdout == "Hello! You asked: ping\n"
        assert one_line(proc.stderr).startswith(f"subagents: journal {journal}: read-only")
        assert one_line(proc.stderr).endswith("; runs are not journaled")
        new = cli("run", "hello", journal=disk / "new" / "j.db", cwd=tmp_path)
        assert new.returncode == 0, new.stderr
        assert one_line(new.stderr) == (
            f"subagents: journal {disk / 'new' / 'j.db'}: read-only file system; runs are not journaled"
        )


def test_a_journal_on_a_full_disk_is_one_line_and_the_run_still_runs(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk", "256k") as disk:
        journal = disk / "j.db"
        Journal(journal).close()
        filler = disk / "filler"
        with filler.open("wb", buffering=0) as out, contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 4096)
        proc = cli("run", "ping", journal=journal, cwd=tmp_path)
        assert proc.returncode == 0
        assert proc.stdout == "Hello! You asked: ping\n"
        assert one_line(proc.stderr) == f"subagents: journal {journal}: disk full; runs are not journaled"


# -- interrupted, as the reader decides it ---------------------------------------------------


def test_a_live_host_is_not_interrupted_and_a_reused_pid_is(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = Journal(path)
    me = psutil.Process()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    now = time.time()
    rows = [("live", os.getpid(), me.create_time()), ("dead", dead.pid, now), ("reused", os.getpid(), 1.0)]
    for run_id, pid, start in rows:
        journal.write(
            "INSERT INTO runs (id, kind, provider, config_digest, host, host_pid, host_start, state, started_at, "
            "updated_at) VALUES (?, 'acp', 'acp', '', ?, ?, ?, 'running', ?, ?)",
            (run_id, __import__("socket").gethostname(), pid, start, now, now),
        )
    journal.close()
    states = {r.id: r.state for r in list_runs(path)}
    assert states == {"live": "running", "dead": INTERRUPTED, "reused": INTERRUPTED}


def test_the_start_time_read_from_proc_is_psutils_to_the_bit() -> None:
    """Rows written by versions that asked psutil compare equal with the value read now."""
    from supervisor.journal._observer import host_identity
    from supervisor.journal._start_time import NoSuchProcess, start_time

    assert start_time(os.getpid()) == psutil.Process().create_time()
    assert host_identity()[2] == psutil.Process().create_time()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert start_time(child.pid) == psutil.Process(child.pid).create_time()
    finally:
        child.communicate(b"")
    with pytest.raises(NoSuchProcess):
        start_time(child.pid)


def test_the_config_journal_keys_are_checked(tmp_path: Path) -> None:
    config = tmp_path / "agents.toml"
    config.write_text('journal = 3\n\n[[provider]]\nkind = "acp"\ncommand = "x"\n')
    proc = cli("run", "hello", "--config", str(config), journal="", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"subagents: {config}: journal: must be a file path or false\n"
    config.write_text('journal_text = "yes"\n\n[[provider]]\nkind = "acp"\ncommand = "x"\n')
    proc = cli("run", "hello", "--config", str(config), journal="", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == f"subagents: {config}: journal_text: must be true or false\n"


def test_the_parser_knows_the_journals_states() -> None:
    from supervisor.cli._journal import STATES as PARSED
    from supervisor.journal._read import STATES

    assert PARSED == STATES


def test_a_warm_child_is_journaled_once_taken_with_its_whole_trail(tmp_path: Path) -> None:
    path = tmp_path / "j.db"

    async def main() -> tuple[str, list[dict[str, Any]]]:
        registry = Registry(journal=path)
        found = example_kind()
        assert found is not None
        name, kind = found
        assert kind.example is not None
        registry.register(kind.provider(kind.example(), name))
        async with registry:
            await registry.prestart(name, 2, cwd=tmp_path)
            async with registry.run(name, SubagentRequest(task="warm", parent_cwd=tmp_path)) as run:
                await run.result()
            trail = run.audit.as_dicts()
        assert registry.journal is not None
        registry.journal.flush(30)
        return run.id, trail

    run_id, trail = anyio.run(main, backend="asyncio")
    [record] = list_runs(path)  # the children no caller took left no row
    assert record.id == run_id
    full = read_run(path, run_id)
    assert full is not None
    assert [(a["event"], a["machine"]) for a in full.audit] == [(a["event"], a["machine"]) for a in trail]
    assert [a["t"] for a in full.audit] == [a["t"] for a in trail]


def test_an_empty_sqlite_file_is_migrated_to_the_current_schema(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    sqlite3.connect(path).close()  # an empty database: schema version 0, no application id
    with Journal(path) as journal:
        assert journal.writing
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA user_version").fetchone() == (_schema.VERSION,)
        assert connection.execute("PRAGMA application_id").fetchone() == (_schema.APPLICATION_ID,)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()
    assert list_runs(path) == []


@pytest.mark.parametrize("wait", ["flush", "close"])
def test_a_flush_or_close_commits_without_waiting_out_the_gathering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait: str
) -> None:
    """The writer gathers rows for up to ``COALESCE`` before a commit; someone waiting for
    them (a registry closing, a command ending) must not wait that out: a command's exit
    waited about 50 ms after its run for it.  With the window a minute long, a flush or close
    that waited it out would still be waiting when the bounded join gives up."""
    import threading

    from supervisor.journal import _store

    monkeypatch.setattr(_store, "COALESCE", 60.0)
    path = tmp_path / "j.db"
    journal = Journal(path)
    journal.write("CREATE TABLE scratch (x INTEGER)", ())
    journal.write("INSERT INTO scratch VALUES (?)", (7,))
    waiter = threading.Thread(target=getattr(journal, wait), daemon=True)
    waiter.start()
    waiter.join(30)
    assert not waiter.is_alive()
    with contextlib.closing(sqlite3.connect(path)) as reader:
        assert reader.execute("SELECT x FROM scratch").fetchall() == [(7,)]
    journal.close()
