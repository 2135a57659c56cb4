"""The confining spawn shim: what a child becomes before the agent's first instruction.

Run as ``python -I -S _shim.py STEP... -- PROGRAM ARGS...`` (isolated, no ``site``:
stdlib only, nothing of the supervisor is imported, so it starts in a few
milliseconds and reads no file of the user's).  It does, in this order, what its
steps say, then ``execve``\\s the program in the same process (the pid the supervisor
spawned is the agent's):

``procs=PATH``
    enter a cgroup (write this pid into ``PATH``, a ``cgroup.procs``); v2 leaf first.
``ns=cgroup`` / ``ns=cgroup,mount``
    a cgroup namespace rooted at the groups just entered (and a private mount namespace).
``ro=PATH``
    in the private mount namespace, ``PATH`` and every mount below it read-only (a bind
    mount of it onto itself first where it is not a mount point).
``view=KIND:OPTIONS:POINT``
    in the private mount namespace, the host's mount at ``POINT`` is detached, and in its
    place: ``cgroup2`` (a fresh mount of the v2 hierarchy: its root is the run's own
    group), ``cgroup`` (the same for the v1 hierarchy of controllers ``OPTIONS``), or
    ``hide`` (nothing).
``shm=POINT``
    in the private mount namespace, a fresh tmpfs on ``POINT`` (``/dev/shm``): the run's shared
    memory is its own, and goes with the namespace when the run's last process exits (never
    left behind, charged to the host ceiling).  Skipped where ``POINT`` is not a directory.
``drop=N,N,...``
    remove these capabilities from the bounding set (and clear the inheritable and
    ambient sets), so that the program, though root, never has them.
``pdeathsig=PPID``
    ``PR_SET_PDEATHSIG(SIGKILL)``; if the parent ``PPID`` is already gone, die now.
``landlock=HANDLED:SCOPED`` then ``rule=RIGHTS:PATH``...
    no new privileges, then a Landlock ruleset handling the file-system rights
    ``HANDLED`` (and the scopes ``SCOPED``), a rule per path, and ``restrict_self``.
    A path that does not exist grants nothing and is skipped; ``.`` is the working
    directory the child was started in (the workspace, as opened by the kernel).

Any step that fails ends the shim with status 125 before the program runs, with one
line on stderr naming the step and the errno (no child text exists yet); so does a
command line the supervisor never builds (``a malformed step: errno 22``).  The program
gets ``SIGPIPE`` and ``SIGXFSZ`` at their default (the interpreter's start ignores both,
and an ignored signal stays ignored across ``execve``).

The same program in C (``_shim.c``) is what the supervisor runs where it could be compiled
(``_cshim.py``); this one is the fallback, and the two are tested alike.

Every spawn of a root supervisor (and every confined one) pays this program's start, so it
imports nothing but built-in modules and ``_ctypes``: ``posix`` instead of ``os`` (the same
functions; ``os`` adds ~1.6 ms of imports: ``posixpath``, ``stat``, ``_collections_abc``),
and ``_ctypes`` instead of ``ctypes`` (whose ``__init__`` only re-exports it, after ~3 ms
of defining every C type, ``struct`` and ``_endian``).  The few types the steps need are
defined here, and libc functions are called exactly as ``ctypes.CDLL(None, use_errno=True)``
calls them (C ``int`` result, default argument conversion, ``errno`` kept).  What is left is
the interpreter's own start (``python -I -S -c pass``).
"""

import _signal  # type: ignore[import-not-found]  # built in (signal.py imports enum)
import posix
import sys
from _ctypes import (
    FUNCFLAG_CDECL,
    FUNCFLAG_USE_ERRNO,
    CFuncPtr,
    Structure,
    _SimpleCData,
    byref,
    dlopen,
    dlsym,
    get_errno,
    sizeof,
)

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_RULE_PATH_BENEATH = 1
_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000
_MNT_DETACH = 2
_MS_BIND = 4096
_SYS_MOUNT_SETATTR = 442
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
# The rights Landlock accepts on a rule for a file that is not a directory.
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)
_S_IFMT, _S_IFDIR = 0o170000, 0o040000
_ENOENT, _ENOTDIR = 2, 20
_DEFAULT_PATH = b"/bin:/usr/bin"  # os.defpath: where execvp looks without a PATH


class _Failed(Exception):
    pass


class _Int(_SimpleCData):  # type: ignore[type-arg]  # ctypes.c_int
    _type_ = "i"


class _UInt32(_SimpleCData):  # type: ignore[type-arg]  # ctypes.c_uint32
    _type_ = "I"


class _UInt64(_SimpleCData):  # type: ignore[type-arg]  # ctypes.c_uint64
    _type_ = "Q"


class _Function(CFuncPtr):  # a function of ctypes.CDLL(None, use_errno=True)
    _flags_ = FUNCFLAG_CDECL | FUNCFLAG_USE_ERRNO
    _restype_ = _Int


class _Libc:
    """libc's functions by name, each looked up once (``dlopen(NULL)``: this program's own)."""

    def __init__(self) -> None:
        self._handle = dlopen(None, 0)  # type: ignore[arg-type]  # NULL: this program

    def __getattr__(self, name: str) -> _Function:
        function = _Function(dlsym(self._handle, name))
        setattr(self, name, function)
        return function


class _RulesetAttr(Structure):
    _fields_ = (
        ("handled_access_fs", _UInt64),
        ("handled_access_net", _UInt64),
        ("scoped", _UInt64),
    )


class _PathBeneath(Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", _UInt64), ("parent_fd", _Int))


class _MountAttr(Structure):
    _fields_ = (
        ("attr_set", _UInt64),
        ("attr_clr", _UInt64),
        ("propagation", _UInt64),
        ("userns_fd", _UInt64),
    )


class _CapHeader(Structure):
    _fields_ = (("version", _UInt32), ("pid", _Int))


class _CapData(Structure):
    _fields_ = (
        ("effective", _UInt32),
        ("permitted", _UInt32),
        ("inheritable", _UInt32),
    )


_libc = _Libc()


def _check(result: int, step: str) -> int:
    if result < 0:
        raise _Failed(f"{step}: errno {get_errno()}")
    return result


def _encode(path: str) -> bytes:
    """``os.fsencode``."""
    return path.encode(sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())


def _mode(path: str) -> int | None:
    """The file type bits of ``path`` (followed), or None where it cannot be seen."""
    try:
        return posix.stat(path).st_mode & _S_IFMT
    except (OSError, ValueError):
        return None


def _enter(path: str) -> None:
    try:
        fd = posix.open(path, posix.O_WRONLY | posix.O_CLOEXEC)
        try:
            posix.write(fd, b"%d\n" % posix.getpid())
        finally:
            posix.close(fd)
    except OSError as exc:
        raise _Failed(f"entering a cgroup: errno {exc.errno}") from None


def _unshare(what: str) -> None:
    flags = 0
    for name in what.split(","):
        flags |= {"cgroup": _CLONE_NEWCGROUP, "mount": _CLONE_NEWNS}[name]
    _check(_libc.unshare(flags), "unshare")
    if flags & _CLONE_NEWNS:  # nothing mounted here may reach the machine's mount table
        _check(_libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "making mounts private")


def _view(spec: str) -> None:
    kind, options, point = spec.split(":", 2)
    target = _encode(point)
    # Off first (the kernel refuses a cgroup mount on the root of a mount of the same
    # hierarchy), and nothing of the host's mount stays underneath to be uncovered.
    _check(_libc.umount2(target, _MNT_DETACH), f"unmounting the host's {kind} mount")
    if kind != "hide":
        data = _encode(options) if options else None
        flags = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        _check(_libc.mount(kind.encode(), target, kind.encode(), flags, data), f"mounting the {kind} view")


def _private_tmpfs(point: str) -> None:
    if _mode(point) != _S_IFDIR:
        return
    flags = _MS_NOSUID | _MS_NODEV
    result = _libc.mount(b"tmpfs", _encode(point), b"tmpfs", flags, b"mode=1777")
    _check(result, "mounting a private tmpfs")


def _read_only(point: str) -> None:
    target = _encode(point)
    if _mode(point) is None:
        return
    _check(_libc.mount(target, target, None, _MS_BIND | _MS_REC, None), "binding a read-only path")
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    result = _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, target, _AT_RECURSIVE, byref(attr), 32)
    _check(result, "making a path read-only")


def _drop(numbers: str) -> None:
    dropped = [int(n) for n in numbers.split(",") if n]
    for cap in dropped:
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), "dropping a capability")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing ambient capabilities")
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capget(byref(header), data), "capget")
    if data[0].inheritable or data[1].inheritable:  # inheritable bits would outlive the bounding set
        data[0].inheritable = data[1].inheritable = 0
        _check(_libc.capset(byref(header), data), "capset")


def _pdeathsig(parent: str) -> None:
    _check(_libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0), "PR_SET_PDEATHSIG")
    if posix.getppid() != int(parent):  # the supervisor died before the signal was armed
        posix.kill(posix.getpid(), 9)


def _landlock(handled: str, rules: list[str]) -> None:
    fs, _, scoped = handled.partition(":")
    attr = _RulesetAttr(int(fs), 0, int(scoped or 0))
    size = sizeof(attr) if attr.scoped else 8  # an older kernel takes the first field only
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
    ruleset = _check(_libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, byref(attr), size, 0), "landlock ruleset")
    try:
        for rule in rules:
            rights_text, _, path = rule.partition(":")
            try:
                fd = posix.open(path, posix.O_PATH | posix.O_CLOEXEC)
            except OSError:
                continue  # nothing there: nothing granted
            try:
                rights = int(rights_text)
                if posix.fstat(fd).st_mode & _S_IFMT != _S_IFDIR:  # an O_PATH descriptor may be fstat'ed
                    rights &= _FILE_RIGHTS
                beneath = _PathBeneath(rights, fd)
                if rights:
                    _check(
                        _libc.syscall(
                            _SYS_LANDLOCK_ADD_RULE,
                            ruleset,
                            _LANDLOCK_RULE_PATH_BENEATH,
                            byref(beneath),
                            0,
                        ),
                        "landlock rule",
                    )
            finally:
                posix.close(fd)
        _check(_libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock restrict_self")
    finally:
        posix.close(ruleset)


def main(args: list[str]) -> None:
    split = args.index("--") if "--" in args else len(args)
    steps, argv = args[:split], args[split + 1 :]
    if not argv:  # no "--", or no program after it
        _malformed()
        return
    env = _environment()
    rules = [step[5:] for step in steps if step.startswith("rule=")]
    try:
        for step in steps:
            key, _, value = step.partition("=")
            if key == "procs":
                _enter(value)
            elif key == "ns":
                _unshare(value)
            elif key == "ro":
                _read_only(value)
            elif key == "view":
                _view(value)
            elif key == "shm":
                _private_tmpfs(value)
            elif key == "drop":
                _drop(value)
            elif key == "pdeathsig":
                _pdeathsig(value)
            elif key == "landlock":
                _landlock(value, rules)
    except _Failed as exc:
        posix.write(2, f"subagent spawn shim: {exc}\n".encode())
        posix._exit(125)
    except (KeyError, ValueError):
        _malformed()
        return
    # The interpreter's start ignored these two; the program gets them as the supervisor gave
    # them (subprocess restores both to the default in the child it starts).
    _signal.signal(_signal.SIGPIPE, _signal.SIG_DFL)
    _signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)
    try:
        _execvpe(argv, env)
    except OSError as exc:
        posix.write(2, f"subagent spawn shim: exec: errno {exc.errno}\n".encode())
        posix._exit(126 if exc.errno != _ENOENT else 127)


def _malformed() -> None:
    """A command line the supervisor never builds (no ``--``, no program, a step it cannot read)."""
    posix.write(2, b"subagent spawn shim: a malformed step: errno 22\n")
    posix._exit(125)


def _environment() -> dict[bytes, bytes]:
    """The environment this process was started with, for the program: exactly the supervisor's.

    Not ``posix.environ``: where the locale is C or POSIX the interpreter's start adds
    ``LC_CTYPE=C.UTF-8`` to it (locale coercion, which ``-I`` leaves on), and the program would
    inherit it.  ``/proc/self/environ`` is what ``execve`` was given."""
    try:
        fd = posix.open("/proc/self/environ", posix.O_RDONLY | posix.O_CLOEXEC)
    except OSError:
        return dict(posix.environ)
    try:
        chunks = []
        while chunk := posix.read(fd, 65536):
            chunks.append(chunk)
    finally:
        posix.close(fd)
    env: dict[bytes, bytes] = {}
    for entry in b"".join(chunks).split(b"\0"):
        name, equals, value = entry.partition(b"=")
        if name and equals:
            env.setdefault(name, value)  # the first of a name, as the interpreter's own environ
    return env


def _execvpe(argv: list[str], env: dict[bytes, bytes]) -> None:
    """``os.execvpe(argv[0], argv, env)``: a name without a slash is looked for along ``env``'s
    ``PATH`` (``/bin:/usr/bin`` without one); the error raised is the first that is not "not
    there" (``EACCES`` of a file that is not executable), else the last."""
    program = argv[0]
    if "/" in program:
        posix.execve(program, argv, env)
    name = _encode(program)
    saved: OSError | None = None
    last: OSError | None = None
    for directory in env.get(b"PATH", _DEFAULT_PATH).split(b":"):
        full = directory + name if not directory or directory.endswith(b"/") else directory + b"/" + name
        try:
            posix.execve(full, argv, env)
        except OSError as exc:
            last = exc
            if saved is None and exc.errno not in (_ENOENT, _ENOTDIR):
                saved = exc
    raise saved or last or OSError(_ENOENT, "no PATH entry")


if __name__ == "__main__":
    main(sys.argv[1:])
