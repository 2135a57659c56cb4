"""A child with a grandchild: prints ``ready <child pid> <grandchild pid>``, then answers each
task line with ``answer: <task>`` until stdin closes (the grandchild sleeps meanwhile)."""

from __future__ import annotations

import os
import subprocess
import sys

grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
print(f"ready {os.getpid()} {grandchild.pid}", flush=True)
for line in sys.stdin:
    print(f"answer: {line.strip()}", flush=True)
grandchild.kill()
grandchild.wait()
