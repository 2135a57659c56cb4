"""A release is a release: the version says which, the changelog says what, and the built
wheel (not this editable checkout) runs the README's first command.

The build is the one a user or an index gets: ``python -m build`` in its isolated
environment, the sdist first and the wheel built *from the sdist*, so an sdist that lacks
something a build needs fails here.  The wheel is installed without dependencies into a
fresh virtual environment that sees this environment's packages after its own (a ``.pth``
line: the checkout's editable finder is not activated there), so the command imports the
installed files; the wheel's declared dependencies are checked against what it runs with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from supervisor._version import __version__

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
SECTIONS = ("Added", "Changed", "Deprecated", "Fixed")


def _releases() -> list[tuple[str, str]]:
    """(version, body) of every release in the changelog, newest first."""
    parts = re.split(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", CHANGELOG, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def test_the_changelog_names_this_version_first() -> None:
    releases = _releases()
    assert releases, "CHANGELOG.md has no release heading"
    assert releases[0][0] == __version__


def test_every_release_since_the_second_says_what_was_added_changed_deprecated_and_fixed() -> None:
    versions = [version for version, _ in _releases()]
    assert {"0.2.0", "0.3.0", "0.4.0"} <= set(versions)
    for version, body in _releases():
        if version == "0.1.0":  # the first release only added
            continue
        headings = re.findall(r"^### (\w+)$", body, flags=re.M)
        assert headings == list(SECTIONS), f"{version}: {headings}"


def test_subagents_version_says_this_release() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"subagents {__version__}\n"


def _build(out: Path) -> tuple[Path, Path]:
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _build(tmp_path_factory.mktemp("dist"))


def test_the_sdist_holds_the_sources_and_the_changelog_and_no_tests(built: tuple[Path, Path]) -> None:
    sdist, _ = built
    assert sdist.name == f"subagent_supervisor-{__version__}.tar.gz"
    top = f"subagent_supervisor-{__version__}"
    with tarfile.open(sdist) as archive:
        names = {name.removeprefix(f"{top}/") for name in archive.getnames()}
    for needed in ("pyproject.toml", "README.md", "CHANGELOG.md", "supervisor/py.typed", "machines/py.typed"):
        assert needed in names
    assert "supervisor/process/_shim.c" in names  # the compiled spawn shim's source
    assert "supervisor/providers/acp/_example_agent.py" in names
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/"))]


def test_the_wheel_holds_the_packages_and_the_console_script(built: tuple[Path, Path]) -> None:
    _, wheel = built
    assert wheel.name == f"subagent_supervisor-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"subagent_supervisor-{__version__}.dist-info"
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    assert {"supervisor/py.typed", "machines/py.typed", "supervisor/providers/acp/_example_agent.py"} <= names
    assert "supervisor/process/_shim.c" in names  # built on first use into the user's cache
    assert "subagents = supervisor.cli:console" in entry_points
    assert not [name for name in names if name.startswith(("tests/", "benchmarks/"))]


def test_an_installed_wheel_runs_the_readmes_first_command(built: tuple[Path, Path], tmp_path: Path) -> None:
    _, wheel = built
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-4000:]
    # This environment's packages, after the fresh environment's own: the dependencies.
    (purelib / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    where = subprocess.run(
        [python, "-c", _WHERE_AND_REQUIREMENTS],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.splitlines() == [str(purelib / "supervisor"), __version__, "requirements met"]

    # The README's first command, as a user types it once the wheel is installed.
    script = venv / "bin" / "subagents"
    assert script.read_text().splitlines()[0] == f"#!{python}"
    proc = subprocess.run(
        [script, "run", "say hello"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Hello! I'm the subagent-supervisor example agent")


_WHERE_AND_REQUIREMENTS = """
import importlib.metadata as md, pathlib, re, supervisor
print(pathlib.Path(supervisor.__file__).parent)
dist = md.distribution("subagent-supervisor")
print(dist.version)
for requirement in dist.requires or ():
    if "extra ==" in requirement:
        continue
    name = re.split(r"[<>=!~ \\[;]", requirement, maxsplit=1)[0]
    md.version(name)  # raises PackageNotFoundError when a dependency is missing
print("requirements met")
"""
