"""Cold start is pinned by what gets imported, never by a clock (a clock flakes on a loaded machine;
an import list does not).

Each check runs a fresh interpreter and reads ``sys.modules``: ``import supervisor`` pulls in
no front-end, no protocol SDK and no OpenTelemetry, even once the core names are used; the
command line's parser (``--version``, ``--help``) pulls in none of a run's machinery.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import supervisor

FRONT_ENDS = ("supervisor.cli", "supervisor.batching", "supervisor.mcp")
SDKS = ("acp", "mcp", "claude_agent_sdk", "opentelemetry", "ray")
# What a run needs and a parser does not: each costs tens of ms to import.
RUN_MACHINERY = ("pydantic", "statemachine", "asyncio", "anyio", "psutil", "importlib.metadata", "machines")


def loaded_after(code: str) -> list[str]:
    """The modules loaded in a fresh interpreter after ``code`` ran."""
    script = f"import sys\n{code}\nimport json; print(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    names: list[str] = json.loads(proc.stdout.splitlines()[-1])
    return names


def under(names: list[str], roots: tuple[str, ...]) -> list[str]:
    return [n for n in names if any(n == r or n.startswith(r + ".") for r in roots)]


def test_import_supervisor_imports_no_front_end_sdk_or_telemetry() -> None:
    assert under(loaded_after("import supervisor"), FRONT_ENDS + SDKS) == []


def test_the_core_names_import_no_front_end_sdk_or_telemetry() -> None:
    core = [name for name in supervisor.__all__ if not name.startswith("Batch") and name != "batch"]
    code = "import supervisor\n" + "\n".join(f"supervisor.{name}" for name in core)
    assert under(loaded_after(code), FRONT_ENDS + SDKS) == []


def test_the_batch_names_import_the_batch_engine_only() -> None:
    loaded = loaded_after("import supervisor; supervisor.batch; supervisor.BatchRecord")
    assert "supervisor.batching._local" in loaded
    assert under(loaded, ("supervisor.cli", "supervisor.mcp", *SDKS)) == []


def test_the_parser_imports_none_of_a_runs_machinery() -> None:
    code = "from supervisor.cli._main import _parser\n_parser().format_help()"
    assert under(loaded_after(code), RUN_MACHINERY + SDKS) == []


def test_version_and_help_import_none_of_a_runs_machinery() -> None:
    for flag in ("--version", "--help"):
        code = f"from supervisor.cli import main\ntry:\n    main([{flag!r}])\nexcept SystemExit:\n    pass"
        assert under(loaded_after(code), RUN_MACHINERY + SDKS) == [], flag


def test_a_journaled_run_does_not_import_psutil(tmp_path: Path) -> None:
    """The journal reads the host's start time from /proc: psutil (tens of ms) stays unloaded;
    the TOML parser is loaded only for a config file; the kinds' discovery reads no
    distribution's METADATA (its parser, ``email.parser``, stays unloaded)."""
    code = (
        "import contextlib, io, os\n"
        f"os.environ['SUBAGENTS_JOURNAL'] = {str(tmp_path / 'j.db')!r}\n"
        "from supervisor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['run', 'say hello']) == 0"
    )
    loaded = loaded_after(code)
    assert "supervisor.journal._observer" in loaded
    assert under(loaded, ("psutil",)) == []
    assert "tomllib" not in loaded  # no --config: no TOML parser
    assert "email.parser" not in loaded  # the kinds' discovery parses no distribution's METADATA


def test_the_contracts_models_are_built_on_first_use() -> None:
    """Importing a run's modules builds none of the supervisor's pydantic models (each costs
    milliseconds); the first validation builds it, and it validates as before."""
    code = (
        "import supervisor.cli._run, supervisor.providers.acp._run, supervisor.workspace\n"
        "from pydantic import BaseModel\n"
        "def subs(c):\n"
        "    for s in c.__subclasses__():\n"
        "        yield s\n"
        "        yield from subs(s)\n"
        "ours = {m.__qualname__: m.__pydantic_complete__ for m in subs(BaseModel) if m.__module__.startswith('supervisor')}\n"
        "from supervisor import Usage\n"
        "usage = Usage(input_tokens=3)\n"
        "print(ours, Usage.__pydantic_complete__, usage.input_tokens)"
    )
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    built, usage_built, tokens = proc.stdout.rsplit(" ", 2)
    models = ast.literal_eval(built)
    assert {"SubagentRequest", "SubagentResult", "Usage", "ProviderConfig", "Workspace"} <= set(models)
    # Capabilities alone is built: the contract makes its empty instance at import.
    assert [name for name, complete in models.items() if complete] == ["Capabilities"]
    assert (usage_built, tokens.strip()) == ("True", "3")


def test_the_executable_collects_nothing_during_a_run_s_start(tmp_path: Path) -> None:
    """The executable switches the collector off from the command's dispatch until the run's
    first transition (the run's modules and the SDK imported by then: their objects live as
    long as the process), then freezes what exists and switches it back on; main() in a
    caller's interpreter leaves the collector alone."""
    env = {**os.environ, "SUBAGENTS_JOURNAL": str(tmp_path / "j.db")}
    watch = (
        "import atexit, gc, sys\n"
        "import supervisor.cli._main as m\n"
        "seen = {'start': 0, 'sdk': 0}\n"
        "def count(phase, info):\n"
        "    if phase != 'start' or 'supervisor.process' not in sys.modules:\n"
        "        return\n"
        "    sdk = sys.modules.get('acp')\n"
        "    if sdk is not None and getattr(sdk.__spec__, '_initializing', False):\n"
        "        seen['sdk'] += 1\n"
        "    if not gc.get_freeze_count():\n"
        "        seen['start'] += 1\n"
        "gc.callbacks.append(count)\n"
        "def report():\n"
        "    sys.stderr.write(f\"{seen['start']} {seen['sdk']} {gc.get_freeze_count() > 0} {gc.isenabled()}\")\n"
    )
    executable = watch + (
        "atexit.register(report)\nsys.argv = ['subagents', 'run', 'say hello']\nm.console()"
    )
    in_process = watch + (
        "import contextlib, io\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert m.main(['run', 'say hello']) == 0\n"
        "seen['start'], seen['sdk'] = seen['start'] > 0, seen['sdk'] > 0\n"
        "report()"
    )
    for code, expected in ((executable, "0 0 True True"), (in_process, "True True False True")):
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.endswith(expected), proc.stderr


def test_the_executable_freezes_its_startup_objects_and_main_does_not(tmp_path: Path) -> None:
    """The executable's run takes its imported modules out of the collector's scans; a caller
    of main() in its own interpreter keeps its collector as it was."""
    env = {**os.environ, "SUBAGENTS_JOURNAL": str(tmp_path / "j.db")}
    executable = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: sys.stderr.write(f'frozen={gc.get_freeze_count() > 0}'))\n"
        "sys.argv = ['subagents', 'run', 'say hello']\n"
        "from supervisor.cli import console\n"
        "console()"
    )
    in_process = (
        "import contextlib, gc, io, sys\n"
        "from supervisor.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['run', 'say hello']) == 0\n"
        "sys.stderr.write(f'frozen={gc.get_freeze_count() > 0}')"
    )
    for code, frozen in ((executable, True), (in_process, False)):
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.endswith(f"frozen={frozen}")


def test_every_public_name_has_an_origin_and_a_typed_import() -> None:
    """The lazy map and the import block that type checkers read name the same modules."""
    tree = ast.parse(Path(supervisor.__file__).read_text(encoding="utf-8"))
    typed: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                assert stmt.module is not None
                for alias in stmt.names:
                    typed[alias.asname or alias.name] = stmt.module
    origins = supervisor._ORIGINS
    assert typed == origins
    assert set(origins) == set(supervisor.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    import pytest

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        _ = supervisor.Nope
    assert "Registry" in dir(supervisor)


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_the_quick_exit_flushes_and_runs_the_exit_handlers() -> None:
    proc = python(
        "import atexit, sys\n"
        "from supervisor.cli._main import _quick_exit\n"
        "atexit.register(print, 'from a handler')\n"
        "sys.stdout.write('buffered ')\n"
        "sys.stderr.write('to stderr')\n"
        "_quick_exit(3)\n"
        "print('not reached')"
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "buffered from a handler\n", "to stderr")


def test_a_live_thread_keeps_the_interpreter_s_own_exit() -> None:
    """A non-daemon thread still running is waited for, as the interpreter always does."""
    proc = python(
        "import threading\n"
        "from supervisor.cli._main import _quick_exit\n"
        "go = threading.Event()\n"
        "t = threading.Thread(target=lambda: (go.wait(), print('the thread finished')))\n"
        "t.start()\n"
        "_quick_exit(0)\n"
        "print('back in the main thread')\n"
        "go.set()"
    )
    assert (proc.returncode, proc.stdout) == (0, "back in the main thread\nthe thread finished\n")


def test_main_returns_the_status_and_the_executable_exits_with_it(tmp_path: Path) -> None:
    from supervisor.cli import main

    assert main(["run", "--timeout", "-1", "x"]) == 2  # in-process callers get the status back
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", "--timeout", "-1", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "subagents: --timeout must be a positive number of seconds\n"
