"""The mount table kept open and read again only when the kernel marks it changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from supervisor.process import _confine
from supervisor.process._mounttable import mount_table


def read_fresh() -> str:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        return f.read()


def test_the_table_is_this_process_s_and_unchanged_it_is_not_read_again() -> None:
    first = mount_table()
    assert first == read_fresh()
    assert mount_table() is first  # nothing mounted meanwhile: the text kept, not a new read
    assert _confine._mounts() == _confine._mounts()


def in_own_mount_namespace(script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as root in a mount namespace of its own (its mounts stay there)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount in a namespace of its own")
    argv = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c", textwrap.dedent(script)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode == 97:
        pytest.skip(f"cannot mount here: {done.stderr[-300:]}")
    return done


CHANGES = """
import os, subprocess, sys, tempfile
sys.path.insert(0, {root!r})
from supervisor.process import _confine
from supervisor.process._mounttable import mount_table

def fresh():
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
        return f.read()

def mount(point):
    if subprocess.run(["mount", "-t", "tmpfs", "none", point]).returncode:
        sys.exit(97)

before = mount_table()
assert before == fresh()
point = tempfile.mkdtemp()
mount(point)
after = mount_table()
assert after is not before and after == fresh() and point in after, "a mount not seen"
assert mount_table() is after
subprocess.run(["umount", point], check=True)
assert point not in mount_table(), "an unmount not seen"

# a child after fork has a descriptor of its own: what it polls never hides a change from us
second = tempfile.mkdtemp()
mount_table()
pid = os.fork()
if pid == 0:
    mount(second)
    ok = second in mount_table()
    os._exit(0 if ok else 3)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the child did not see its own mount"
assert second in mount_table(), "the parent lost the change to its child's poll"
print("ok")
"""


def test_a_mount_or_an_unmount_is_seen_at_the_next_call_in_a_forked_child_too() -> None:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(_confine.__file__ or ""))))
    done = in_own_mount_namespace(CHANGES.format(root=root))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "ok"
