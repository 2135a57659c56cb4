#!/usr/bin/env python3
"""A local Ray cluster on 127.0.0.1 for the tests and benchmarks: a head and N worker nodes.

Run as its own process (``python ray_cluster.py TEMP_DIR N [HEAD_CPUS]``; the head has 1
CPU unless told otherwise, e.g. 0 to keep tasks off it); it prints one JSON line
``{"address": ..., "nodes": [{"node_id": ..., "raylet_pid": ...}, ...]}`` (the head first)
once every node has joined, then reads commands on stdin, one per line:

- ``kill N``: kill worker node N (1-based) at once, as a crashed machine would go, then
  add a fresh worker node in its place (answers ``killed`` and the new node's facts);
- ``add``: add a worker node (answers ``added``);
- ``quit`` or EOF: shut the whole cluster down and exit.

Every node has 1 CPU and a 100 MiB object store, and keeps to loopback: the caller must
set ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in the environment (it is inherited by every
Ray process), or Ray advertises the host's outward address.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

OBJECT_STORE_BYTES = 100 * 1024 * 1024


def describe(node: Any) -> dict[str, Any]:
    return {"node_id": node.node_id, "raylet_pid": node.all_processes["raylet"][0].process.pid}


def main() -> int:
    base, workers = sys.argv[1], int(sys.argv[2])
    head_cpus = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    # A shell's background job ignores SIGINT and every Ray process would inherit that,
    # and ``ray.cancel`` raises KeyboardInterrupt in a task through the SIGINT handler.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.environ["RAY_TMPDIR"] = base  # Ray's default temp dir and address file live under it
    temp_dir = os.path.join(base, "ray")
    os.makedirs(temp_dir, exist_ok=True)
    from ray.cluster_utils import Cluster

    node_args: dict[str, Any] = {
        "num_cpus": 1,
        "object_store_memory": OBJECT_STORE_BYTES,
        "node_ip_address": "127.0.0.1",
    }
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node_args, "num_cpus": head_cpus, "temp_dir": temp_dir, "include_dashboard": False},
    )
    nodes: list[Any] = [cluster.head_node]
    for _ in range(workers):
        nodes.append(cluster.add_node(**node_args))
    cluster.wait_for_nodes()
    facts = {
        "address": cluster.address,
        "nodes": [
            {"node_id": n.node_id, "raylet_pid": n.all_processes["raylet"][0].process.pid} for n in nodes
        ],
    }
    sys.stdout.write(json.dumps(facts) + "\n")
    sys.stdout.flush()
    try:
        for line in sys.stdin:
            command = line.split()
            if command[:1] == ["kill"]:
                index = int(command[1])
                cluster.remove_node(nodes[index], allow_graceful=False)
                nodes[index] = cluster.add_node(**node_args)
                cluster.wait_for_nodes()
                sys.stdout.write("killed " + json.dumps(describe(nodes[index])) + "\n")
                sys.stdout.flush()
            elif command[:1] == ["add"]:
                nodes.append(cluster.add_node(**node_args))
                cluster.wait_for_nodes()
                sys.stdout.write("added\n")
                sys.stdout.flush()
            elif command[:1] == ["quit"]:
                break
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]
    return 0


if __name__ == "__main__":
    sys.exit(main())
