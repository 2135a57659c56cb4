"""The echo child: says ``ready``, reads one task line, answers ``echo: <task>``.

The task ``fail`` makes it exit with status 3 instead of answering; the task ``latin-1``
makes it answer in Latin-1 (not UTF-8).
"""

import sys

print("ready", flush=True)
task = sys.stdin.readline().strip()
if task == "fail":
    sys.exit(3)
if task == "latin-1":  # an answer that is not UTF-8
    sys.stdout.buffer.write(b"echo: caf\xe9\n")
    sys.stdout.flush()
else:
    print(f"echo: {task}", flush=True)
sys.stdin.read()  # until the supervisor closes stdin
