"""``subagents batch --ray`` on a local Ray cluster: a head and two worker nodes on 127.0.0.1.

The cluster lives in its own helper process (tests/ray_cluster.py) for the whole module;
every Ray process and client keeps to loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import psutil
import pytest

from tests.conftest import EXEMPT_ROOTS, PYTHON, TESTS
from tests.test_batch import (
    console_spans,
    entry,
    records,
    supervised_children,
    wait_for,
    write_config,
    write_input,
)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
pytest.importorskip("ray")

STARTUP_BOUND_S = 180.0
BATCH = [sys.executable, "-m", "supervisor.cli", "batch"]


@dataclass
class Cluster:
    helper: subprocess.Popen[str]
    address: str
    nodes: list[dict[str, Any]]
    env: dict[str, str]

    @property
    def node_ids(self) -> list[str]:
        return [node["node_id"] for node in self.nodes]

    def kill_worker(self, index: int) -> None:
        """Kill worker node ``index`` (the helper adds a fresh one) and reap what it left.

        Earlier tests make this process a child subreaper, so the killed node's processes
        (its workers, agents) are adopted here, not by init: wait for them and reap them.
        """
        stdin, stdout = self.helper.stdin, self.helper.stdout
        assert stdin is not None
        assert stdout is not None
        doomed = _tree(self.nodes[index]["raylet_pid"])
        stdin.write(f"kill {index}\n")
        stdin.flush()
        answer = _readline(stdout, STARTUP_BOUND_S)
        assert answer.startswith("killed ")
        self.nodes[index] = json.loads(answer.removeprefix("killed "))
        _, alive = psutil.wait_procs(doomed, timeout=60)
        assert alive == [], "the killed node's processes outlived it"


def _readline(stream: IO[str], bound: float) -> str:
    ready, _, _ = select.select([stream], [], [], bound)
    if not ready:
        raise AssertionError("the Ray cluster helper did not answer")
    return stream.readline()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    base = tempfile.mkdtemp(prefix="sbr")  # short: Ray's socket paths live under it
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_TMPDIR": base}
    with open(os.path.join(base, "helper.log"), "w") as log:
        helper = subprocess.Popen(
            [PYTHON, str(TESTS / "ray_cluster.py"), base, "2"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
        )
    EXEMPT_ROOTS.add(helper.pid)
    try:
        assert helper.stdout is not None
        line = _readline(helper.stdout, STARTUP_BOUND_S)
        assert line, "the Ray cluster did not start"
        facts = json.loads(line)
        yield Cluster(helper, facts["address"], facts["nodes"], env)
    finally:
        family = _tree(helper.pid)
        assert helper.stdin is not None
        helper.stdin.close()  # EOF: shut the cluster down
        try:
            helper.wait(timeout=120)
        finally:
            if helper.stdout is not None:
                helper.stdout.close()
            # Reaps what was adopted here (see kill_worker); kills only what outlived the shutdown.
            _, survivors = psutil.wait_procs(family, timeout=30)
            for proc in survivors:
                proc.kill()
            psutil.wait_procs(survivors, timeout=10)
            EXEMPT_ROOTS.discard(helper.pid)
            shutil.rmtree(base, ignore_errors=True)
        assert survivors == [], "Ray processes outlived the cluster's shutdown"


def _tree(pid: int) -> list[psutil.Process]:
    """``pid`` and its descendants."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def ray_batch(cluster: Cluster, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "batch", *args, "--ray", cluster.address],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=240,
        env=cluster.env,
    )


def test_records_come_back_complete_and_the_work_is_spread_over_nodes(
    cluster: Cluster, tmp_path: Path
) -> None:
    config = write_config(
        tmp_path / "c.toml",
        entry("slow", {"ACP_CHILD_SLOW_MS": "300", "ACP_CHILD_TEXT": "one two three four"}),
        entry("crash", {"ACP_CHILD_EXIT_AT": "prompt"}),
    )
    items: list[dict[str, Any] | str] = [{"id": f"r{i}", "task": "x"} for i in range(6)]
    items += [{"id": "boom", "task": "x", "provider": "crash"}, "not json"]
    source = write_input(tmp_path / "in.jsonl", *items)
    proc = ray_batch(cluster, str(source), "--config", str(config), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    found = {r["id"]: r for r in records(proc.stdout)}
    assert set(found) == {f"r{i}" for i in range(6)} | {"boom", "line 8"}
    assert found["line 8"] == {"id": "line 8", "error": "not valid JSON"}
    for i in range(6):
        record = found[f"r{i}"]
        assert record["stop_reason"] == "completed"
        assert record["output"] == "one two three four"
        assert (record["started"], record["quiescent"]) == (True, True)
        assert record["node"] == os.uname().nodename
        assert record["ray_node"] in cluster.node_ids
    assert found["boom"]["stop_reason"] == "error"
    assert found["boom"]["diagnostic"]
    assert len({found[f"r{i}"]["ray_node"] for i in range(6)}) >= 2
    assert proc.stderr.splitlines()[-1].startswith("6 completed, 2 failed, 0 cancelled in ")
    assert supervised_children() == []


def test_a_conversation_item_runs_its_turns_inside_one_ray_task(cluster: Cluster, tmp_path: Path) -> None:
    source = write_input(
        tmp_path / "in.jsonl",
        {"id": "talk", "task": "what is 2+2?", "turns": ["and 3+3?\n@usage", "@recall"]},
        {"id": "dies", "task": "one", "turns": ["@exit 3", "never sent"]},
    )
    proc = ray_batch(cluster, str(source), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    found = {r["id"]: r for r in records(proc.stdout)}
    talk = found["talk"]
    assert [(t["turn"], t["stop_reason"], t["output"]) for t in talk["turns"]] == [
        (1, "completed", "Hello! You asked: what is 2+2?"),
        (2, "completed", "Hello! You asked: and 3+3?"),
        (3, "completed", "Earlier in this session you asked: what is 2+2?; and 3+3?"),
    ]
    assert talk["turns"][1]["usage"] == {
        "input_tokens": 2,
        "output_tokens": 5,
        "cached_input_tokens": None,
        "cost_usd": 0.0007,
    }
    assert (talk["stop_reason"], talk["quiescent"]) == ("completed", True)
    assert talk["ray_node"] in cluster.node_ids
    dies = found["dies"]
    assert [t["stop_reason"] for t in dies["turns"]] == ["completed", "error", "error"]
    assert dies["diagnostic"] == (
        "subagent conversation is over (provider: ACP; turn: 2; reason: child exited; exit code: 3)"
    )
    assert supervised_children() == []


def test_with_otel_the_trace_goes_on_in_each_ray_task(cluster: Cluster, tmp_path: Path) -> None:
    """The driver's batch span is the parent of every run's span on the workers: the child on
    the worker node sees a ``TRACEPARENT`` of the batch's trace (the worker's own export
    goes to its node; what the driver exports is read from its console exporter)."""
    config = write_config(tmp_path / "c.toml", entry("echo", {"ACP_CHILD_ECHO_ENV": "TRACEPARENT"}))
    source = write_input(tmp_path / "in.jsonl", *({"id": f"t{i}", "task": "x"} for i in range(2)))
    env = {**cluster.env, "OTEL_TRACES_EXPORTER": "console"}
    proc = subprocess.run(
        [*BATCH, str(source), "--config", str(config), "--ray", cluster.address, "--otel"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    (batch_span,) = [s for s in console_spans(proc.stderr) if s["name"] == "subagents batch"]
    trace_id = batch_span["context"]["trace_id"].removeprefix("0x")
    for record in records(proc.stdout):
        traceparent = record["output"].removeprefix("TRACEPARENT=").strip()
        assert traceparent.split("-")[1] == trace_id, record["output"]


def test_ctrl_c_cancels_every_task_and_leaves_no_process_on_any_node(
    cluster: Cluster, tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    hang = {"ACP_CHILD_HANG": "1", "ACP_CHILD_IGNORE_CANCEL": "1", "ACP_CHILD_READY_FILE": str(ready)}
    config = write_config(tmp_path / "c.toml", entry("hang", hang))
    source = write_input(tmp_path / "in.jsonl", *({"id": f"h{i}", "task": "x"} for i in range(5)))
    with subprocess.Popen(
        [*BATCH, str(source), "--config", str(config), "--ray", cluster.address],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cluster.env,
    ) as cli:
        wait_for(lambda: len(supervised_children()) >= 3, "a hanging run on every node", timeout=120)
        cli.send_signal(signal.SIGINT)
        stdout, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 130, stderr
    assert stdout == ""  # no run finished: nothing is written
    summary = stderr.splitlines()[-1]
    assert summary.startswith("0 completed, 0 failed, ")
    assert int(summary.split(", ")[2].split()[0]) >= 3
    assert supervised_children() == []  # the CLI returned only after every node's teardown


def test_a_worker_node_lost_mid_batch_yields_worker_lost_and_the_batch_finishes(
    cluster: Cluster, tmp_path: Path
) -> None:
    slow = {"ACP_CHILD_SLOW_MS": "1500", "ACP_CHILD_TEXT": "one two three four five"}
    config = write_config(tmp_path / "c.toml", entry("slow", slow))
    source = write_input(tmp_path / "in.jsonl", *({"id": f"s{i}", "task": "x"} for i in range(3)))
    out = tmp_path / "out.jsonl"
    with subprocess.Popen(
        [*BATCH, str(source), "--config", str(config), "--out", str(out), "--ray", cluster.address],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cluster.env,
    ) as cli:
        wait_for(lambda: len(supervised_children()) >= 3, "a run on every node", timeout=120)
        started = time.monotonic()
        cluster.kill_worker(1)
        _stdout, stderr = cli.communicate(timeout=180)
    assert cli.returncode == 1, stderr
    found = records(out.read_text())
    lost = [r for r in found if r.get("error") == "worker lost"]
    done = [r for r in found if r.get("stop_reason") == "completed"]
    assert len(lost) == 1, (found, time.monotonic() - started)
    assert set(lost[0]) == {"id", "error"}
    assert len(done) == 2
    assert {r["id"] for r in found} == {"s0", "s1", "s2"}
    assert stderr.splitlines()[-1].startswith("2 completed, 1 failed, 0 cancelled in ")
    wait_for(lambda: supervised_children() == [], "the lost node's runs to be gone", timeout=30)
