"""The compiled spawn shim's cache: built once, trusted only as ``ssh`` trusts its files, never
run corrupt, safe to build from two processes at once; and the Python shim where it cannot be.

Every test builds into a cache directory of its own (``tmp_path``: ``/tmp``, sticky, is an
acceptable ancestor), never the user's.  What the shim does is ``test_shim.py``'s.
"""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from supervisor.process import _cshim
from supervisor.process._confine import shim_command
from supervisor.process._cshim import FORCE_VARIABLE, SOURCE, CompiledShim, unsafe_directory
from tests.support.shims import require_compiled_shim

ROOT = os.geteuid() == 0
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _compiler() -> None:
    require_compiled_shim()  # no compiler: skipped (failed where peers are required)


def runs(path: str) -> bool:
    done = subprocess.run(
        [path, "--", "/bin/sh", "-c", "echo ran"], capture_output=True, text=True, timeout=60
    )
    return (done.returncode, done.stdout, done.stderr) == (0, "ran\n", "")


def shims_in(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


def test_it_is_built_once_into_a_private_directory_and_found_by_the_next_process(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "shim"
    shim = CompiledShim(cache)
    path = shim.path()
    assert path is not None
    assert shim.compiled_here
    assert shim.reason is None
    assert runs(path)
    for folder in (cache, cache.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    (built,) = shims_in(cache)  # nothing else left there (no build under a temporary name)
    assert str(built) == path
    assert stat.S_IMODE(built.stat().st_mode) == 0o700
    again = CompiledShim(cache)
    assert again.path() == path
    assert not again.compiled_here
    assert again.ready()
    assert shim.ready()


def test_an_unsafe_directory_is_refused_and_the_python_shim_used(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    cache.chmod(0o770)  # the group may write it
    shim = CompiledShim(cache)
    assert shim.path() is None
    assert shim.reason is not None
    assert "only it may write" in shim.reason
    assert shims_in(cache) == []  # nothing was built there
    cache.chmod(0o700)
    above = tmp_path / "open"
    above.mkdir()
    above.chmod(0o777)  # writable by all, no sticky bit: anyone could rename the cache away
    shim = CompiledShim(above / "cache")
    assert shim.path() is None
    assert shim.reason is not None
    assert f"{above} (above the cache directory)" in shim.reason
    above.chmod(0o1777)  # as /tmp: the sticky bit keeps what is ours ours
    assert CompiledShim(above / "cache").path() is not None


@pytest.mark.skipif(not ROOT, reason="needs root (a directory of another user's)")
def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, 65534, 65534)
    assert unsafe_directory(str(cache)) is not None
    shim = CompiledShim(cache)
    assert shim.path() is None
    assert shim.reason is not None
    assert shims_in(cache) == []
    owned = tmp_path / "owned" / "cache"
    owned.parent.mkdir()
    os.chown(owned.parent, 65534, 65534)  # a folder above, of another user's
    assert CompiledShim(owned).path() is None


def test_a_directory_made_unsafe_after_the_check_is_seen_at_the_next_spawn(tmp_path: Path) -> None:
    """Before every spawn the file and its directory must be what was checked: another entry in
    the directory (another process's build) changes its times, not its safety; a mode does."""
    cache = tmp_path / "cache"
    shim = CompiledShim(cache)
    assert shim.path() is not None
    (cache / ".build-elsewhere").write_text("")
    assert shim.ready()
    cache.chmod(0o770)
    assert not shim.ready()
    assert shim.path() is None
    assert shim.reason is not None
    assert "only it may write" in shim.reason


def test_a_cached_file_another_could_write_is_never_run_but_replaced(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = CompiledShim(cache).path()
    assert first is not None
    changes: list[tuple[str, int, int]] = [("mode", 0o722, os.geteuid())]
    if ROOT:
        changes.append(("owner", 0o700, 65534))
    for what, mode, owner in changes:
        os.chmod(first, mode)
        os.chown(first, owner, -1)
        before = os.stat(first)
        shim = CompiledShim(cache)
        path = shim.path()
        assert path == first, what  # built again, under the same name
        assert shim.compiled_here, what
        after = os.stat(path)
        assert after.st_ino != before.st_ino, what  # a new file: the refused one is gone
        assert (after.st_uid, stat.S_IMODE(after.st_mode)) == (os.geteuid(), 0o700)
        assert runs(path)


def test_a_corrupt_cached_file_never_breaks_a_spawn(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Its bytes are hashed once per process (its name carries the hash): a truncated file is
    not run, a new one is built; a file changed under a process that checked it is seen at the
    next spawn (its ``lstat``), and checked again."""
    cache = tmp_path / "cache"
    path = CompiledShim(cache).path()
    assert path is not None
    size = os.path.getsize(path)
    os.truncate(path, size // 2)
    caplog.set_level(logging.DEBUG, logger="supervisor")
    shim = CompiledShim(cache)
    assert shim.path() == path
    assert shim.compiled_here
    assert os.path.getsize(path) == size
    assert runs(path)
    assert "its bytes are not the ones it was built with" in caplog.text
    # changed under a process that has checked it, and compiled once already: the Python shim
    os.truncate(path, size // 2)
    assert not shim.ready()
    assert shim.path() is None
    assert shim.reason is not None
    assert "compiled by this process" in shim.reason
    # another process (that has not compiled) builds it again
    assert CompiledShim(cache).path() == path
    assert runs(path)


def test_two_processes_building_at_once_both_get_a_shim(tmp_path: Path) -> None:
    """Each builds to a name of its own and renames it into place: both succeed, whatever the
    order (they start building when both are ready: a line on their stdin)."""
    cache = tmp_path / "cache"
    script = (
        "import sys; from pathlib import Path; from supervisor.process._cshim import CompiledShim\n"
        "sys.stdin.readline(); shim = CompiledShim(Path(sys.argv[1])); path = shim.path()\n"
        "print(path, shim.compiled_here, shim.reason)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    builders = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(cache)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    for builder in builders:
        assert builder.stdin is not None
        builder.stdin.write("go\n")
        builder.stdin.flush()
    answers = [builder.communicate(timeout=120)[0].split() for builder in builders]
    assert all(builder.returncode == 0 for builder in builders)
    paths = {answer[0] for answer in answers}
    assert all(answer[2] == "None" for answer in answers), answers
    assert all(path.startswith(str(cache)) and runs(path) for path in paths)
    assert {str(p) for p in shims_in(cache)} == paths  # no build left under a temporary name
    assert CompiledShim(cache).path() in paths


def test_without_a_compiler_or_with_a_broken_build_the_python_shim(tmp_path: Path) -> None:
    """A build that failed is remembered (``failed-<key>``): the next process does not pay it again."""
    missing = CompiledShim(tmp_path / "a", compiler="no-such-compiler-here")
    assert missing.path() is None
    assert missing.reason == "no C compiler (no-such-compiler-here) on PATH"
    broken = tmp_path / "broken.c"
    broken.write_text("int main(void) { return }\n")
    wrong = tmp_path / "wrong.c"  # compiles, but is not the shim: the trial run refuses it
    wrong.write_text("int main(void) { return 0; }\n")
    for folder, source, why in (("b", broken, "failed"), ("c", wrong, "does not run as it must")):
        shim = CompiledShim(tmp_path / folder, source=source)
        assert shim.path() is None
        assert shim.reason is not None
        assert why in shim.reason
        (marker,) = shims_in(tmp_path / folder)  # no build left: only the failure remembered
        assert marker.name.startswith("failed-")
        assert why in marker.read_text()
        again = CompiledShim(tmp_path / folder, source=source)
        assert again.path() is None
        assert not again.compiled_here
        assert again.reason is not None
        assert "failed here before" in again.reason
        marker.unlink()  # removed: tried again
        third = CompiledShim(tmp_path / folder, source=source)
        assert third.path() is None
        assert third.compiled_here


def test_the_source_is_clean_under_every_warning(tmp_path: Path) -> None:
    done = subprocess.run(
        ["cc", *_cshim.FLAGS, "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "shim"), str(SOURCE)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_knob_forces_the_python_shim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(FORCE_VARIABLE, raising=False)
    compiled = shim_command(["pdeathsig=1"], ["/bin/true"])
    assert compiled[0].endswith(tuple(p.name for p in shims_in(Path(compiled[0]).parent)))
    assert compiled[1:] == ["pdeathsig=1", "--", "/bin/true"]
    monkeypatch.setenv(FORCE_VARIABLE, "python")
    python = shim_command(["pdeathsig=1"], ["/bin/true"])
    assert python[1:3] == ["-I", "-S"]
    assert python[3].endswith((".py", ".pyc"))


@pytest.mark.anyio
async def test_the_supervisor_prepares_it_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before its first shimmed spawn: the build runs in a worker thread (the loop's thread never
    compiles), and a later spawn finds it ready without leaving the loop."""
    import threading

    shim = CompiledShim(tmp_path / "cache")
    monkeypatch.setattr(_cshim, "_default", shim)
    monkeypatch.delenv(FORCE_VARIABLE, raising=False)
    threads: list[int] = []
    resolve = shim._resolve

    def recording() -> object:
        threads.append(threading.get_ident())
        return resolve()

    monkeypatch.setattr(shim, "_resolve", recording)
    await _cshim.prepare_shim()
    assert shim.ready()
    assert shim.compiled_here
    assert threads
    assert threading.get_ident() not in threads
    await _cshim.prepare_shim()
    assert len(threads) == 1
