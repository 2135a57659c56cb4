"""The echo child: says ``ready``, reads one task line, answers ``echo: <task>``.

The task ``fail`` makes it exit with status 3 instead of answering; the task ``hang``
makes it wait for a ``cancel`` line, answer ``cancelled`` and wait for stdin to close.
"""

import sys

print("ready", flush=True)
task = sys.stdin.readline().strip()
if task == "fail":
    sys.exit(3)
if task == "hang":
    if sys.stdin.readline().strip() == "cancel":
        print("cancelled", flush=True)
    sys.stdin.read()
    sys.exit(0)
print(f"echo: {task}", flush=True)
sys.stdin.read()  # until the supervisor closes stdin
