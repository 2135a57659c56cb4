"""The echo child: says ``ready``, reads one task line, answers ``echo: <task>``.

The task ``fail`` makes it exit with status 3 instead of answering.
"""

import sys

print("ready", flush=True)
task = sys.stdin.readline().strip()
if task == "fail":
    sys.exit(3)
print(f"echo: {task}", flush=True)
sys.stdin.read()  # until the supervisor closes stdin
