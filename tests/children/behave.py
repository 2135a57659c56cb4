"""A child with one chosen behaviour, for the process-layer tests.

Usage: ``behave.py BEHAVIOUR [ARG]``.  Where a behaviour starts descendants, it prints
``ready <pids>`` on stdout once they exist, so a test waits on that line, not a sleep.

eof                 exit 0 on stdin EOF
ignore-eof          ignore EOF; exit on SIGTERM
trap-term           ignore EOF and SIGTERM; only SIGKILL ends it
grandchild          a ``sleep`` grandchild in the same group; exit on EOF (grandchild stays)
setsid-grandchild   a grandchild in its own session (escapes the group); exit on EOF
daemon              a double-fork + setsid daemon grandchild; exit on EOF
trap-term-tree      a TERM-ignoring grandchild; the child itself ignores EOF, exits on TERM
exit N              exit with status N at once
signal NAME         kill itself with signal NAME
stderr-flood N      write N bytes to stderr, then behave like eof
print-env NAME,...  print NAME=value lines for the names, then behave like eof
pwd                 print the working directory, then behave like eof
frames N            print "short", a line of N bytes and "after" in one write, then behave like eof
env-cleared-daemon  a double-fork + setsid daemon that execs ``sleep`` with an empty environment
env-cleared-grandchild  a grandchild in the child's group, execs ``sleep`` with an empty environment
churn               a chain that forks a successor (in a new session) and exits every few ms
stopped-grandchild  a ``sleep`` grandchild stopped with SIGSTOP; exit on EOF
own-subreaper       the child makes itself a subreaper, then starts a daemon; exit on EOF
storm N             N sleeping grandchildren; exit on EOF
hold-stdout         a grandchild that keeps stdout open; the child exits at once after "ready"
nondumpable-daemon  a double-fork + setsid daemon that makes itself non-dumpable (environ unreadable)
nested-cgroup       a daemon moved into a new cgroup made below the child's own, found the way
                    a nested supervisor finds it; prints "ready <pid> <cgroup dir>"; exit on EOF
escape-cgroup [bare]  a double-fork + setsid daemon that writes its pid into the cgroup v2 root's
                    cgroup.procs (as root may), then sleeps (``bare``: after an ``execve`` with an
                    empty environment); prints "ready <pid> <moved|stayed>"; exit on EOF
cgroup-view         print "ready <the 0:: line of /proc/self/cgroup> <cgroup namespace>"; exit on EOF
ssh-agent           start a real ``ssh-agent -s`` (it daemonises and makes itself non-dumpable);
                    prints "ready <agent pid>"; exit on EOF
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def wait_eof() -> None:
    while sys.stdin.buffer.read(65536):
        pass


def sleep_forever() -> None:
    while True:
        time.sleep(3600)


def ready(*pids: int) -> None:
    sys.stdout.write("ready " + " ".join(str(p) for p in pids) + "\n")
    sys.stdout.flush()


def spawn_sleeper(*, new_session: bool = False, ignore_term: bool = False) -> int:
    code = "import signal,time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('up', flush=True)\nwhile True: time.sleep(3600)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=new_session,
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    return proc.pid


def spawn_daemon() -> int:
    read_end, write_end = os.pipe()
    if os.fork() == 0:  # intermediate
        os.setsid()
        if os.fork() == 0:  # the daemon
            os.close(read_end)
            os.write(write_end, str(os.getpid()).encode())
            os.close(write_end)
            for fd in (0, 1, 2):
                os.close(fd)
            sleep_forever()
        os._exit(0)
    os.close(write_end)
    pid = int(os.read(read_end, 32))
    os.close(read_end)
    os.wait()  # reap the intermediate
    return pid


def escape_cgroup(*, bare: bool) -> tuple[int, str]:
    """A daemon that moves itself to the cgroup v2 root; its pid and whether the move worked."""
    mount = next(m for m in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup") if Path(m, "cgroup.procs").exists())
    read_end, write_end = os.pipe()
    if os.fork() == 0:  # intermediate
        os.setsid()
        if os.fork() == 0:  # the daemon
            os.close(read_end)
            try:
                Path(mount, "cgroup.procs").write_text(f"{os.getpid()}\n")
                moved = "moved"
            except OSError:
                moved = "stayed"
            os.write(write_end, f"{os.getpid()} {moved}".encode())
            os.close(write_end)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            if bare:
                os.execve("/bin/sleep", ["sleep", "3600"], {})
            sleep_forever()
        os._exit(0)
    os.close(write_end)
    pid, moved = os.read(read_end, 64).decode().split()
    os.close(read_end)
    os.wait()  # reap the intermediate
    return int(pid), moved


def spawn_env_cleared(*, daemon: bool) -> int:
    """A ``sleep`` that ran ``execve`` with an empty environment (no run tag left)."""
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        if daemon:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
        os.close(read_end)
        os.write(write_end, str(os.getpid()).encode())
        os.close(write_end)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execve("/bin/sleep", ["sleep", "3600"], {})
    os.close(write_end)
    pid = int(os.read(read_end, 32))
    os.close(read_end)
    if daemon:
        os.wait()  # reap the intermediate
    return pid


def churn() -> None:
    """Fork a successor in a new session and exit, over and over (every ~5 ms)."""
    if os.fork() != 0:
        return
    for fd in (0, 1):
        os.dup2(os.open(os.devnull, os.O_RDWR), fd)
    while True:
        time.sleep(0.005)
        if os.fork() != 0:
            os._exit(0)
        os.setsid()


def spawn_nondumpable_daemon() -> int:
    read_end, write_end = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() != 0:
            os._exit(0)
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0, as after a setuid exec
        os.close(read_end)
        os.write(write_end, str(os.getpid()).encode())
        os.close(write_end)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        sleep_forever()
    os.close(write_end)
    pid = int(os.read(read_end, 32))
    os.close(read_end)
    os.wait()
    return pid


def set_own_subreaper() -> None:
    import ctypes

    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)


def main() -> None:
    behaviour = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else ""
    if behaviour == "eof":
        ready()
        wait_eof()
    elif behaviour == "ignore-eof":
        ready()
        wait_eof()
        sleep_forever()
    elif behaviour == "trap-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        ready()
        wait_eof()
        sleep_forever()
    elif behaviour == "grandchild":
        ready(spawn_sleeper())
        wait_eof()
    elif behaviour == "setsid-grandchild":
        ready(spawn_sleeper(new_session=True))
        wait_eof()
    elif behaviour == "daemon":
        ready(spawn_daemon())
        wait_eof()
    elif behaviour == "trap-term-tree":
        ready(spawn_sleeper(ignore_term=True))
        wait_eof()
        sleep_forever()
    elif behaviour == "exit":
        sys.exit(int(arg))
    elif behaviour == "signal":
        os.kill(os.getpid(), getattr(signal, arg))
        sleep_forever()
    elif behaviour == "stderr-flood":
        block = b"x" * 8191 + b"\n"
        remaining = int(arg)
        while remaining > 0:
            sys.stderr.buffer.write(block[:remaining])
            remaining -= len(block)
        sys.stderr.buffer.flush()
        ready()
        wait_eof()
    elif behaviour == "print-env":
        for name in arg.split(","):
            print(f"{name}={os.environ.get(name, '<unset>')}")
        ready()
        wait_eof()
    elif behaviour == "pwd":
        print(os.getcwd())
        ready()
        wait_eof()
    elif behaviour == "frames":
        sys.stdout.buffer.write(b"short\n" + b"x" * int(arg) + b"\nafter\n")
        sys.stdout.flush()
        wait_eof()
    elif behaviour == "env-cleared-daemon":
        ready(spawn_env_cleared(daemon=True))
        wait_eof()
    elif behaviour == "env-cleared-grandchild":
        ready(spawn_env_cleared(daemon=False))
        wait_eof()
    elif behaviour == "churn":
        churn()
        ready()
        wait_eof()
    elif behaviour == "stopped-grandchild":
        pid = spawn_sleeper()
        os.kill(pid, signal.SIGSTOP)
        ready(pid)
        wait_eof()
    elif behaviour == "own-subreaper":
        set_own_subreaper()
        ready(spawn_daemon())
        wait_eof()
    elif behaviour == "storm":
        pids = []
        for _ in range(int(arg)):
            pid = os.fork()
            if pid == 0:
                os.closerange(0, 3)
                sleep_forever()
            pids.append(pid)
        ready()
        wait_eof()
    elif behaviour == "nondumpable-daemon":
        ready(spawn_nondumpable_daemon())
        wait_eof()
    elif behaviour == "nested-cgroup":
        from supervisor.process._cgroup_mounts import own_cgroup_directory  # as a nested supervisor finds it

        own = own_cgroup_directory()
        assert own is not None
        nested = own / "nested" / "inner"
        nested.mkdir(parents=True)
        pid = spawn_daemon()
        (nested / "cgroup.procs").write_text(f"{pid}\n")
        print(f"ready {pid} {nested}", flush=True)
        wait_eof()
    elif behaviour == "escape-cgroup":
        print("ready", *escape_cgroup(bare=arg == "bare"), flush=True)
        wait_eof()
    elif behaviour == "ssh-agent":
        started = subprocess.run(["ssh-agent", "-s"], capture_output=True, text=True, check=True)
        ready(int(started.stdout.split("SSH_AGENT_PID=", 1)[1].split(";", 1)[0]))
        wait_eof()
    elif behaviour == "cgroup-view":
        view = next(line for line in Path("/proc/self/cgroup").read_text().splitlines() if line[:3] == "0::")
        print("ready", view, os.readlink("/proc/self/ns/cgroup"), flush=True)
        wait_eof()
    elif behaviour == "hold-stdout":
        subprocess.Popen(["sleep", "3600"], stdin=subprocess.DEVNULL)  # inherits stdout
        ready()
    else:
        sys.exit(f"unknown behaviour {behaviour!r}")


if __name__ == "__main__":
    main()
