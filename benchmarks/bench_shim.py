"""What the spawn shim costs a spawn, against the interpreter's start (python -m benchmarks.bench_shim).

Each command is started ``BENCH_ROUNDS`` times (default 60), interleaved, and its CPU (user +
system, from ``wait4``) and wall time are taken; medians are printed.  The commands:

- ``/bin/true``: an ``exec`` alone;
- ``python -I -S`` running a compiled file that only ``execv``\\s ``/bin/true``: the floor of any
  Python shim (the interpreter's start; it never shuts down: the shim ``exec``\\s);
- ``python -I -S -c pass``: the same with the interpreter's shutdown;
- the Python shim with no step, then ``/bin/true``;
- the Python shim with a root child's steps in process-tree mode (a mount namespace, the read-only
  paths, every cgroup mount hidden, a private ``/dev/shm``, the bounding set dropped) and the
  parent-death signal, then ``/bin/true`` (as root; otherwise the parent-death signal alone);
- the compiled shim (``_shim.c``, built into the user's cache if it is not there yet) the same two
  ways, where it can be had.

CPU is steadier than wall time on a loaded machine; the load average is printed.
"""

from __future__ import annotations

import os
import py_compile
import statistics
import sys
import tempfile
import time
from pathlib import Path

from supervisor.process._confine import is_root, root_steps, shim_file, shim_python, view_steps
from supervisor.process._cshim import default_shim

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "60"))


def run(argv: list[str], devnull: int) -> tuple[float, float]:
    started = time.perf_counter()
    pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - started
    assert os.waitstatus_to_exitcode(status) == 0, (argv, status)
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    python = sys.executable
    with tempfile.TemporaryDirectory() as scratch:
        floor = Path(scratch) / "floor.py"
        floor.write_text('import posix\nposix.execv("/bin/true", ["/bin/true"])\n')
        compiled = str(py_compile.compile(str(floor), cfile=str(floor.with_suffix(".pyc")), doraise=True))
        steps = [f"pdeathsig={os.getpid()}"]
        if is_root():
            steps = ["ns=mount", *view_steps(None), *root_steps(frozenset()), *steps]
        which = "root child steps" if is_root() else "pdeathsig"
        shim = [shim_python(), "-I", "-S", shim_file()]
        commands: dict[str, list[str]] = {
            "exec /bin/true": ["/bin/true"],
            "python -I -S, exec /bin/true (floor)": [python, "-I", "-S", compiled],
            "python -I -S -c pass": [python, "-I", "-S", "-c", "pass"],
            "Python shim, no step": [*shim, "--", "/bin/true"],
            f"Python shim, {which}": [*shim, *steps, "--", "/bin/true"],
        }
        built = default_shim().path()
        if built is None:
            print(f"no compiled shim: {default_shim().reason}")
        else:
            commands["compiled shim, no step"] = [built, "--", "/bin/true"]
            commands[f"compiled shim, {which}"] = [built, *steps, "--", "/bin/true"]
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        wall: dict[str, list[float]] = {name: [] for name in commands}
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            print(f"load average before: {os.getloadavg()}; {ROUNDS} rounds; root: {is_root()}", flush=True)
            for argv in commands.values():  # warm the page cache
                run(argv, devnull)
            for _ in range(ROUNDS):
                for name, argv in commands.items():
                    used, took = run(argv, devnull)
                    cpu[name].append(used)
                    wall[name].append(took)
        finally:
            os.close(devnull)
    for name in commands:
        print(
            f"{name:<42} CPU median {statistics.median(cpu[name]) * 1000:6.2f} ms  "
            f"wall median {statistics.median(wall[name]) * 1000:6.2f} ms"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
