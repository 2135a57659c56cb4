"""The compiled spawn shim: ``_shim.c`` built once per machine and user, checked before every use.

The Python shim (``_shim.py``) costs every spawn an interpreter's start (~9 ms of CPU); the same
program in C costs an ``exec`` (~1 ms).  No compiled file ships in the package (it would be one
per platform): the C source does, and the first process that needs the shim compiles it with the
machine's ``cc`` into a private cache directory, ``$XDG_CACHE_HOME/subagent-supervisor/shim``
(``~/.cache/...`` by default).  Anything that goes wrong (no compiler, a compile error, an unsafe
or corrupt cache) means the Python shim, with one log line (a failed build is remembered in the
cache, ``failed-<key>``, so that not every process pays it); ``SUBAGENT_SHIM=python`` asks for
it outright.

**Who could have written it.**  A root supervisor execs this file as root before every agent,
so it is trusted only as ``ssh`` trusts its files (checked once per process; before every spawn
the file and its directory must still be what was checked): the directory (as resolved) is owned
by the effective user and writable by nobody else, and so is every directory above it, up to
``/`` (owned by root or that user; writable by others only with the sticky bit, ``/tmp``'s, where
no one else may rename what is not theirs); the file is a regular file of that user's, writable
by nobody else.

**What it is.**  Its name carries the SHA-256 of the source, compiler and flags it was built
from (a new release, or a new compiler, builds a new one) and of its own bytes: once per process
its bytes are hashed and compared with its name (a truncated or altered file is never run; a new
one is compiled in its place), and before every spawn its ``lstat`` (and its directory's) must
be what was checked, or the check is made again.  A new build is run once before it is used
(a step, then a program that is not there: status 127 and the one line expected).

**Two processes at once.**  Each compiles to a name of its own and renames it into place: the
rename is atomic, and both names, should the two builds differ, are valid.  A process compiles
at most once; the supervisor does it off the event loop, before its first shimmed spawn.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import stat
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

log = logging.getLogger("supervisor")

SOURCE = Path(__file__).with_name("_shim.c")
FORCE_VARIABLE = "SUBAGENT_SHIM"
"""``python``: the Python shim for every spawn of this process (``compiled`` or unset: the
compiled one where it can be had)."""
COMPILER = "cc"
FLAGS = ("-std=gnu11", "-O2", "-pipe", "-s")
"""Dynamically linked: ``-static`` saved ~0.05-0.1 ms of CPU per spawn in ~1.6, for a 47 times
larger file (690 kB, hashed once per process) and ``libc.a``, which not every machine has."""
_COMPILE_TIMEOUT = 120.0
_PREFIX = "shim-"


def forced_python() -> bool:
    return os.environ.get(FORCE_VARIABLE, "").strip().lower() == "python"


def default_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    root = Path(base) if base and os.path.isabs(base) else Path(os.path.expanduser("~")) / ".cache"
    return root / "subagent-supervisor" / "shim"


@dataclass(frozen=True)
class _Checked:
    path: str
    identity: tuple[int, ...]
    directory: str
    directory_identity: tuple[int, ...]


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid, st.st_nlink)


def _directory_identity(st: os.stat_result) -> tuple[int, ...]:
    """What makes the directory safe (not its times: another process's build changes those)."""
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid)


class CompiledShim:
    """The compiled shim of one cache directory, for this process (thread-safe)."""

    def __init__(self, directory: Path, *, source: Path = SOURCE, compiler: str = COMPILER) -> None:
        self.directory = directory
        self.source = source
        self.compiler = compiler
        self.reason: str | None = None
        """Why there is no compiled shim (None: there is one, or it was not looked for yet)."""
        self.compiled_here = False
        self._lock = threading.Lock()
        self._settled = False
        self._checked: _Checked | None = None

    def path(self) -> str | None:
        """The compiled shim to exec, checked now; None: the Python shim."""
        if self._settled and self._still():
            return self._checked.path if self._checked is not None else None
        with self._lock:
            if not (self._settled and self._still()):
                self._checked = self._resolve()
                self._settled = True
            return self._checked.path if self._checked is not None else None

    def ready(self) -> bool:
        """Whether :meth:`path` would answer without a file's hash or a compile."""
        return self._settled and self._still()

    def _still(self) -> bool:
        """The checked file and its directory are as they were checked (or there is none)."""
        checked = self._checked
        if checked is None:
            return True
        try:
            return (
                _identity(os.lstat(checked.path)) == checked.identity
                and _directory_identity(os.lstat(checked.directory)) == checked.directory_identity
            )
        except OSError:
            return False

    # -- finding, checking, compiling --------------------------------------------------------

    def _resolve(self) -> _Checked | None:
        self.reason = None
        started = time.monotonic()
        try:
            checked = self._find_or_compile()
        except _Unavailable as exc:
            self.reason = str(exc)
            log.info("spawn shim: the Python one (%s)", exc)
            return None
        if self.compiled_here:
            log.info("spawn shim: compiled %s in %.0f ms", checked.path, (time.monotonic() - started) * 1000)
        else:
            log.debug("spawn shim: %s", checked.path)
        return checked

    def _find_or_compile(self) -> _Checked:
        compiler = shutil.which(self.compiler)
        if compiler is None:
            raise _Unavailable(f"no C compiler ({self.compiler}) on PATH")
        try:
            source = self.source.read_bytes()
            key = _key(source, compiler)
            directory = self._safe_directory()
        except OSError as exc:
            raise _Unavailable(f"the cache directory {self.directory}: {exc!r}") from None
        for name in sorted(os.listdir(directory)):
            if name.startswith(f"{_PREFIX}{key}-"):
                checked = _verified(directory, name)
                if checked is not None:
                    return checked
        failed = os.path.join(directory, f"failed-{key}")
        if os.path.lexists(failed):  # not again at every start (a home mounted noexec, a broken cc)
            raise _Unavailable(f"this build failed here before (remove {failed} to try again)")
        if self.compiled_here:  # at most once per process
            raise _Unavailable("the shim compiled by this process is gone or was changed")
        self.compiled_here = True
        try:
            name = _compile(compiler, self.source, directory, key)
        except _Unavailable as exc:
            _remember_failure(failed, str(exc))
            raise
        checked = _verified(directory, name)
        if checked is None:
            raise _Unavailable("the shim just compiled did not pass its check")
        return checked

    def _safe_directory(self) -> str:
        """The cache directory (made 0700 where missing), resolved, and checked safe."""
        _make_private(self.directory)
        directory = os.path.realpath(self.directory)
        problem = unsafe_directory(directory)
        if problem is not None:
            raise _Unavailable(problem)
        return directory


class _Unavailable(Exception):
    pass


def _make_private(directory: Path) -> None:
    """``mkdir -p`` with every directory it makes 0700 (``os.makedirs`` so makes only the last)."""
    missing: list[Path] = []
    for path in (directory, *directory.parents):
        if os.path.lexists(path):
            break
        missing.append(path)
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another process
            path.mkdir(mode=0o700)


def unsafe_directory(directory: str) -> str | None:
    """Why another user could write into resolved ``directory`` (itself or above), or None."""
    euid = os.geteuid()
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != euid or st.st_mode & 0o022:
        return f"{directory} is not a directory of uid {euid}'s that only it may write"
    parent = os.path.dirname(directory)
    while True:
        st = os.lstat(parent)
        others_write = st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX
        if st.st_uid not in (0, euid) or others_write:
            return f"{parent} (above the cache directory) may be written by another user"
        if parent == os.path.dirname(parent):
            return None
        parent = os.path.dirname(parent)


def _key(source: bytes, compiler: str) -> str:
    """What the build depends on: the source, the compiler (as installed) and the flags."""
    resolved = os.path.realpath(compiler)
    st = os.stat(resolved)
    digest = hashlib.sha256(source)
    digest.update(f"\0{resolved}\0{st.st_size}\0{st.st_mtime_ns}\0{' '.join(FLAGS)}".encode())
    return digest.hexdigest()[:16]


def _verified(directory: str, name: str) -> _Checked | None:
    """``name`` in ``directory`` if it is the user's own file whose bytes its name names."""
    path = os.path.join(directory, name)
    expected = name.rsplit("-", 1)[-1]
    try:
        before = os.lstat(path)
        if not stat.S_ISREG(before.st_mode) or before.st_uid != os.geteuid() or before.st_mode & 0o022:
            log.debug("spawn shim: %s refused: not a file of this user's that only it may write", path)
            return None
        if not before.st_mode & stat.S_IXUSR or before.st_nlink != 1:
            log.debug("spawn shim: %s refused: not executable, or linked elsewhere", path)
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if _identity(os.fstat(fd)) != _identity(before):
                return None
            digest = hashlib.sha256()
            while chunk := os.read(fd, 1 << 16):
                digest.update(chunk)
        finally:
            os.close(fd)
        if digest.hexdigest() != expected:
            log.debug("spawn shim: %s refused: its bytes are not the ones it was built with", path)
            return None
        return _Checked(path, _identity(before), directory, _directory_identity(os.lstat(directory)))
    except OSError:
        return None


def _compile(compiler: str, source: Path, directory: str, key: str) -> str:
    """Build into a name of this process's own, run it once, rename it into place."""
    _sweep_builds(directory)
    token = f"{os.getpid()}-{secrets.token_hex(4)}"
    temporary = os.path.join(directory, f".build-{token}")
    try:
        env = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"}
        built = _run([compiler, *FLAGS, "-o", temporary, str(source)], env, "compiling")
        if built.returncode != 0:
            first = (built.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
            raise _Unavailable(f"{compiler} failed ({built.returncode}): {first[:200]}")
        # a step, then a program that is not there: the status and the one line the shim gives
        absent = os.path.join(directory, f".absent-{token}")
        tried = _run([temporary, f"pdeathsig={os.getpid()}", "--", absent], {}, "trying")
        if (tried.returncode, tried.stderr) != (127, b"subagent spawn shim: exec: errno 2\n"):
            raise _Unavailable(f"the shim just compiled does not run as it must ({tried.returncode})")
        os.chmod(temporary, 0o700)
        with open(temporary, "rb") as built_file:
            digest = hashlib.file_digest(built_file, "sha256").hexdigest()
        name = f"{_PREFIX}{key}-{digest}"
        os.rename(temporary, os.path.join(directory, name))
        return name
    except OSError as exc:
        raise _Unavailable(f"compiling the shim: {exc!r}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temporary)


def _remember_failure(path: str, reason: str) -> None:
    """A build that failed is not tried again by every process (until the source or the compiler
    changes, or the file is removed)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, f"{reason}\n".encode())
        finally:
            os.close(fd)


def _sweep_builds(directory: str) -> None:
    """Builds a process left when it was killed mid-compile (an hour old: nobody's now)."""
    for name in os.listdir(directory):
        if name.startswith(".build-"):
            path = os.path.join(directory, name)
            try:
                if time.time() - os.lstat(path).st_mtime > 3600:
                    os.unlink(path)
            except OSError:
                pass


def _run(argv: list[str], env: dict[str, str], doing: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=_COMPILE_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise _Unavailable(f"{doing} the shim took more than {_COMPILE_TIMEOUT:.0f} s") from None


_default: CompiledShim | None = None
_default_lock = threading.Lock()


def default_shim() -> CompiledShim:
    """This process's compiled shim (its cache directory as the environment named it first)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = CompiledShim(default_directory())
        return _default


def compiled_shim() -> str | None:
    """The compiled shim to exec for a spawn now, or None (the Python shim)."""
    if forced_python():
        return None
    return default_shim().path()


async def prepare_shim() -> None:
    """Before a shimmed spawn: the compiled shim found, checked (or built) off the event loop."""
    if forced_python():
        return
    shim = default_shim()
    if not shim.ready():
        await anyio.to_thread.run_sync(shim.path)
