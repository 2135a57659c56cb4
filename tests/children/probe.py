"""A hostile child: tries every access a confined or root child must be denied, and some it
must keep, and reports what happened.

``probe.py '<json>'``: the JSON names the places to try (``secret``: a file to read,
``outside``: a folder to write in, ``writable``: a folder granted, ``readable``: a file
granted for reading, ``outside_file``: a file to truncate; ``allocate_mb``: after the report, allocate that much).
It prints one line, ``{"pid": ..., "results": {name: "ok" | errno name | value}}``, then
waits for EOF.

Everything here runs as the agent would: after the spawn shim, before nothing else.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

_CLONE_NEWNS = 0x00020000
_CLONE_NEWCGROUP = 0x02000000


def attempt(action: Callable[[], object]) -> str:
    try:
        value = action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return "ok" if value is None or isinstance(value, int) else str(value)


def libc_call(name: str, *args: object) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def write(path: Path, text: str = "x") -> None:
    path.write_text(text)


def status(key: str) -> str:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split()[1]
    return "?"


def cgroup_mounts() -> dict[str, str]:
    found = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        tail = right.split()
        if tail and tail[0] in ("cgroup", "cgroup2"):
            found[left.split()[4]] = tail[0] + ":" + tail[2]
    return found


def raise_v1_memory(group: Path) -> None:
    """No memory limit in ``group`` (memory and swap first: it may never be below memory)."""
    memsw = group / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        write(memsw, "-1")
    write(group / "memory.limit_in_bytes", "-1")


def first_of(*paths: Path) -> str:
    """The first of ``paths`` that exists, read (the limit the child sees in its own group)."""
    for path in paths:
        if path.exists():
            return path.read_text().strip()
    raise FileNotFoundError(2, "none of the limit files exists")


def rewrite(path: Path, *, picked: bool = False) -> None:
    """Write a setting back as it is (``picked``: the bracketed word of a choice list)."""
    value = path.read_text().strip()
    if picked:
        value = value.split("[", 1)[1].split("]", 1)[0]
    path.write_text(value + "\n")


def make_groups(root: Path, count: int) -> None:
    for i in range(count):
        (root / f"g{i}").mkdir()


def cgroup_attacks(results: dict[str, str]) -> None:
    """What the third release's root child did: write the cgroup root it sees, make groups there,
    raise its own limits."""
    v2 = next(
        (p for p in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup") if Path(p, "cgroup.procs").exists()), None
    )
    results["view_memory_limit"] = attempt(
        lambda: first_of(
            Path(v2 or "/nonexistent", "memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes")
        )
    )
    results["view_pids_limit"] = attempt(
        lambda: first_of(Path(v2 or "/nonexistent", "pids.max"), Path("/sys/fs/cgroup/pids/pids.max"))
    )
    results["v2_view_procs"] = attempt(
        lambda: " ".join(Path(v2 or "/nonexistent", "cgroup.procs").read_text().split())
    )
    results["v2_view_has_agent_group_above"] = str(Path(v2 or "/", "..", "agent").exists())
    results["write_max_descendants"] = attempt(
        lambda: write(Path(v2 or "/nonexistent", "cgroup.max.descendants"), "50")
    )
    results["make_groups"] = attempt(lambda: make_groups(Path(v2 or "/nonexistent"), 20))
    results["raise_memory_v2"] = attempt(lambda: write(Path(v2 or "/nonexistent", "memory.max"), "max"))
    results["raise_memory_v1"] = attempt(lambda: raise_v1_memory(Path("/sys/fs/cgroup/memory")))
    results["raise_pids_v1"] = attempt(lambda: write(Path("/sys/fs/cgroup/pids/pids.max"), "max"))
    results["see_devices_v1"] = str(Path("/sys/fs/cgroup/devices/devices.allow").exists())
    results["see_release_agent"] = str(
        any(Path(p, "release_agent").exists() for p in cgroup_mounts() if Path(p).is_dir())
    )
    results["mount"] = attempt(lambda: libc_call("mount", b"none", b"/mnt", b"cgroup2", 0, None))
    results["umount_view"] = attempt(lambda: libc_call("umount2", (v2 or "/").encode(), 2))
    results["unshare"] = attempt(lambda: libc_call("unshare", _CLONE_NEWNS | _CLONE_NEWCGROUP))
    # the kernel's settings, written with the value they have (harmless if the write went through)
    results["write_core_pattern"] = attempt(lambda: rewrite(Path("/proc/sys/kernel/core_pattern")))
    results["write_sys"] = attempt(
        lambda: rewrite(Path("/sys/kernel/mm/transparent_hugepage/defrag"), picked=True)
    )
    results["host_root_via_proc1"] = attempt(lambda: os.listdir("/proc/1/root/sys/fs/cgroup"))


def file_attacks(places: dict[str, str], results: dict[str, str]) -> None:
    outside = Path(places["outside"])
    results["read_secret"] = attempt(lambda: Path(places["secret"]).read_text())
    results["list_secret_folder"] = attempt(lambda: os.listdir(Path(places["secret"]).parent))
    results["write_outside"] = attempt(lambda: write(outside / "planted"))
    results["truncate_outside"] = attempt(lambda: os.truncate(places["outside_file"], 0))
    results["write_tmp"] = attempt(lambda: write(Path("/tmp") / f"subagent-probe-{os.getpid()}"))
    results["mkfifo_outside"] = attempt(lambda: os.mkfifo(outside / "fifo"))
    results["symlink_outside"] = attempt(lambda: os.symlink("/etc/passwd", outside / "link"))
    results["write_workspace"] = attempt(lambda: write(Path("made-here.txt")))
    results["rename_out_of_workspace"] = attempt(lambda: os.rename("made-here.txt", outside / "moved"))
    results["link_out_of_workspace"] = attempt(lambda: os.link("made-here.txt", outside / "hard"))
    results["write_tmpdir"] = attempt(lambda: write(Path(os.environ.get("TMPDIR", "/tmp")) / "scratch"))
    results["tmpdir_is_private"] = str(os.environ.get("TMPDIR", "/tmp") not in ("/tmp", "/var/tmp"))
    results["write_writable"] = attempt(lambda: write(Path(places["writable"]) / "state"))
    results["read_readable"] = attempt(lambda: Path(places["readable"]).read_text() and None)
    results["write_readable"] = attempt(lambda: write(Path(places["readable"]), "changed"))
    results["read_system"] = attempt(lambda: Path("/etc/hostname").read_text() and None)
    results["write_dev_null"] = attempt(lambda: write(Path("/dev/null")))
    results["parent_environ"] = attempt(lambda: Path(f"/proc/{os.getppid()}/environ").read_bytes() and None)
    results["signal_parent"] = attempt(lambda: os.kill(os.getppid(), 0))


def main() -> None:
    places = json.loads(sys.argv[1])
    results: dict[str, str] = {
        "uid": str(os.geteuid()),
        "cap_bnd": status("CapBnd"),
        "cap_eff": status("CapEff"),
        "no_new_privs": status("NoNewPrivs"),
        "cgroup": next(
            line for line in Path("/proc/self/cgroup").read_text().splitlines() if line[:3] == "0::"
        ),
    }
    cgroup_attacks(results)
    file_attacks(places, results)
    print(json.dumps({"pid": os.getpid(), "results": results}), flush=True)
    if places.get("allocate_mb"):  # past the limits it just tried to raise
        held = []
        for _ in range(int(places["allocate_mb"])):
            held.append(bytearray(1 << 20))
            held[-1][::4096] = b"x" * len(held[-1][::4096])
        sys.exit(3)  # the kernel should have ended it before
    while sys.stdin.buffer.read(65536):
        pass


if __name__ == "__main__":
    main()
