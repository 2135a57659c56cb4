"""A plug-in of the previous release keeps working; a plug-in that cannot be used says so.

``tests/plugin_provider_v02`` is a provider distribution written exactly as an author
wrote it against 0.2 (names imported from ``supervisor``, hooks ``_start``, ``_drive``,
``_output``, ``_remote_cancel``, ``_before_ladder``, ``_after_ladder``).  It is built and
installed into a temporary ``--target`` directory that only the subprocesses see.

The unusable plug-ins are installed by hand (a module and its ``.dist-info`` with an
``entry_points.txt``), the way an installer leaves them, so the real entry-point
discovery finds them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DISTRIBUTION = Path(__file__).resolve().parent / "plugin_provider_v02"


@pytest.fixture(scope="module")
def legacy_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    target = tmp_path_factory.mktemp("legacy-target")
    source = tmp_path_factory.mktemp("legacy-source") / "plugin_provider_v02"
    shutil.copytree(DISTRIBUTION, source)  # the build writes beside its sources
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(source)]
    subprocess.run(pip, check=True, capture_output=True, timeout=300)
    return str(target)


def environment(path: str, **extra: str) -> dict[str, str]:
    joined = os.pathsep.join(p for p in (path, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": joined}
    env.pop("PYTHONWARNINGS", None)  # Python's default filters unless a test sets its own
    return {**env, **extra}


def subagents(path: str, *args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(path, **extra),
    )


def config(tmp_path: Path, kind: str) -> str:
    path = tmp_path / f"{kind}.toml"
    path.write_text(f'[[provider]]\nkind = "{kind}"\nname = "my-{kind}"\n')
    return str(path)


# -- a 0.2 plug-in -------------------------------------------------------------------------


def test_a_02_plugin_runs_through_the_cli(legacy_path: str, tmp_path: Path) -> None:
    proc = subagents(
        legacy_path, "run", "--config", config(tmp_path, "legacy-echo"), "hello there", cwd=tmp_path
    )
    assert (proc.returncode, proc.stdout) == (0, "hello there\n"), proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Warning" not in proc.stderr  # Python's default filters show no DeprecationWarning here


def test_a_02_plugin_failure_keeps_its_line(legacy_path: str, tmp_path: Path) -> None:
    proc = subagents(legacy_path, "run", "--config", config(tmp_path, "legacy-echo"), "fail", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        "subagents: subagent run failed\n"
        "Diagnostic: Subagent failure (provider: Legacy echo; stage: echo; category: child-exit; exit code: 3)\n"
    )


def test_each_old_hook_warns_naming_the_new_one_and_the_removal(legacy_path: str, tmp_path: Path) -> None:
    proc = subagents(
        legacy_path,
        "run",
        "--config",
        config(tmp_path, "legacy-echo"),
        "hi",
        cwd=tmp_path,
        PYTHONWARNINGS="always::DeprecationWarning",
    )
    assert (proc.returncode, proc.stdout) == (0, "hi\n"), proc.stderr
    for old, new in (
        ("_start", "handshake"),
        ("_drive", "drive"),
        ("_output", "partial_output"),
        ("_remote_cancel", "remote_cancel"),
        ("_before_ladder", "before_ladder"),
        ("_after_ladder", "after_ladder"),
    ):
        assert (
            f"DeprecationWarning: LegacyEchoRun.{old}() is the 0.2 name of the provider hook {new}(): "
            f"rename it {new}() (the old name is removed in 0.5)"
        ) in proc.stderr
    assert (
        "DeprecationWarning: supervisor.ProviderRun is a provider author's name: import it from "
        "supervisor.provider (importing it from supervisor is removed in 0.5)"
    ) in proc.stderr
    assert "Traceback" not in proc.stderr


CANCEL = """
import anyio
from pathlib import Path
from supervisor import Registry, StopReason, SubagentRequest, create_provider, installed_kinds
from supervisor.provider import ProviderConfig

async def main() -> None:
    kind = installed_kinds()["legacy-echo"].load()
    registry = Registry()
    registry.register(create_provider("legacy-echo", kind.config(), "legacy"))
    request = SubagentRequest(task="hang", parent_cwd=Path.cwd())
    async with registry.run("legacy", request) as run:
        run.cancel()
        result = await run.result()
    print(result.stop_reason)
    print(" ".join(h for h in run.hooks_called if h.startswith("_")))

anyio.run(main)
"""


def test_the_old_remote_cancel_and_ladder_hooks_are_called(legacy_path: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", CANCEL],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=environment(legacy_path),
    )
    assert proc.returncode == 0, proc.stderr
    stop_reason, hooks = proc.stdout.splitlines()
    assert stop_reason == "aborted"
    called = hooks.split()
    assert called[0] == "_start"
    assert {"_drive", "_output", "_remote_cancel", "_before_ladder", "_after_ladder"} <= set(called)
    assert "never awaited" not in proc.stderr


# -- plug-ins that cannot be used ----------------------------------------------------------

BROKEN_IMPORT = "import a_module_that_is_not_installed\n"

NOT_A_KIND = "KIND = object()\n"

NO_HOOKS = """
from supervisor.provider import (
    NO_CAPABILITIES, ProviderConfig, ProviderKind, ProviderRun, RunContext, Vocabulary,
    build_lifecycle, common_rows,
)
import enum

class Event(enum.StrEnum):
    DONE = "done"

Chart = build_lifecycle(
    "HooklessLifecycle", stages=("work", "teardown"), events=Event,
    table=((Event.DONE, "work", "settled"),
           *common_rows(startup=("work",), running=("work",), teardown="teardown", late=())),
    doc="A kind whose run fills in no hook.", module=__name__,
)
VOCABULARY = Vocabulary(label="Hookless", stages=Chart.STAGES, categories=frozenset({"unknown", "transport"}))

class Config(ProviderConfig):
    pass

class HooklessRun(ProviderRun[Config]):
    vocabulary = VOCABULARY
    lifecycle = Chart

    async def start_child(self) -> None:  # not a hook of any release
        pass

class Provider:
    inherits_parent_context = False
    capabilities = NO_CAPABILITIES

    def __init__(self, config, name=None):
        self.config = config
        self.name = name or "hookless"

    def create_run(self, request, *, trace=None):
        return HooklessRun(RunContext(self.name, self.config, request, trace))

KIND = ProviderKind(config=Config, provider=Provider, vocabulary=VOCABULARY)
"""


def install_by_hand(root: Path, module: str, source: str) -> str:
    """A one-module distribution ``broken-plugin 1.0`` whose kind ``broken`` is ``module:KIND``."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[subagent_supervisor.providers]\nbroken = {module}:KIND\n")
    (info / "top_level.txt").write_text(f"{module}\n")
    return str(root)


WHERE = 'provider kind "broken" (distribution broken-plugin 1.0) cannot be used: '


@pytest.mark.parametrize(
    ("source", "why"),
    [
        (
            BROKEN_IMPORT,
            "importing it raised ModuleNotFoundError: No module named 'a_module_that_is_not_installed'",
        ),
        (NOT_A_KIND, "its entry point names no ProviderKind"),
    ],
    ids=["import-error", "not-a-kind"],
)
def test_a_plugin_that_does_not_load_is_one_line(tmp_path: Path, source: str, why: str) -> None:
    path = install_by_hand(tmp_path, "broken_plugin", source)
    proc = subagents(path, "run", "--config", config(tmp_path, "broken"), "hi", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, "", f"subagents: {WHERE}{why}\n")
    # ``providers`` lists every other kind and names the broken one.
    proc = subagents(path, "providers", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == f"subagents: {WHERE}{why}\n"
    assert proc.stdout.startswith("acp ")


def test_a_run_class_without_hooks_is_one_line(tmp_path: Path) -> None:
    path = install_by_hand(tmp_path, "hookless_plugin", NO_HOOKS)
    proc = subagents(path, "run", "--config", config(tmp_path, "broken"), "hi", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    first, rest = proc.stderr.split("TypeError: ")
    assert first == (
        'subagents: subagent provider "my-broken" (distribution broken-plugin 1.0) cannot be used: '
        "creating a run raised "
    )
    # Python's own words for an abstract class (they differ between 3.11 and 3.12)
    assert rest.startswith("Can't instantiate abstract class HooklessRun ")
    assert rest.endswith("drive, handshake, partial_output\n") or rest.endswith(
        "'drive', 'handshake', 'partial_output'\n"
    )
    # batch: the item is one error record with the same line, the batch goes on
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "task": "hi"}\n')
    proc = subagents(path, "batch", "--config", config(tmp_path, "broken"), str(items), cwd=tmp_path)
    assert proc.returncode == 1
    record = json.loads(proc.stdout)
    assert record["id"] == "a"
    assert record["error"].startswith(
        'subagent provider "my-broken" (distribution broken-plugin 1.0) cannot be used'
    )
    assert "Traceback" not in proc.stderr


def test_the_migration_note_lists_every_old_hook_and_its_removal() -> None:
    from supervisor.run._deprecated import OLD_HOOKS, REMOVED_IN

    note = (Path(__file__).resolve().parent.parent / "docs" / "migration.md").read_text()
    for old, new in OLD_HOOKS.items():
        assert f"| `ProviderRun.{old}(" in note
        row = next(line for line in note.splitlines() if line.startswith(f"| `ProviderRun.{old}("))
        assert f"| `{new}(" in row
        assert row.endswith(f"| {REMOVED_IN} |")
