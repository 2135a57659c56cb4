"""A minimal MCP server (stdio, newline-delimited JSON-RPC 2.0, stdlib only) for the codex tests.

It offers one tool, ``ask``.  Calling it makes the server send an ``elicitation/create``
request to its client (the Codex app-server, which forwards it to *its* client as
``mcpServer/elicitation/request``); the tool's result then reports the action the
elicitation was answered with, e.g. ``elicitation answered: decline``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

ELICITATION_ID = "elicit-1"


def send(frame: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **frame}) + "\n")
    sys.stdout.flush()


def main() -> None:
    pending_call: Any = None
    for line in sys.stdin:
        if not line.strip():
            continue
        frame = json.loads(line)
        method = frame.get("method")
        if method == "initialize":
            version = frame.get("params", {}).get("protocolVersion", "2025-06-18")
            send(
                {
                    "id": frame["id"],
                    "result": {
                        "protocolVersion": version,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "codex-test-elicitation", "version": "0.0.0"},
                    },
                }
            )
        elif method == "tools/list":
            tool = {
                "name": "ask",
                "description": "Ask the user a question.",
                "inputSchema": {"type": "object"},
            }
            send({"id": frame["id"], "result": {"tools": [tool]}})
        elif method == "tools/call":
            pending_call = frame["id"]
            schema = {"type": "object", "properties": {"choice": {"type": "string"}}, "required": ["choice"]}
            send(
                {
                    "id": ELICITATION_ID,
                    "method": "elicitation/create",
                    "params": {"message": "Pick one", "requestedSchema": schema},
                }
            )
        elif frame.get("id") == ELICITATION_ID and method is None:
            answer = frame.get("result") or {}
            action = answer.get("action", "none") if isinstance(answer, dict) else "none"
            text = f"elicitation answered: {action}"
            send({"id": pending_call, "result": {"content": [{"type": "text", "text": text}]}})
        elif "id" in frame and method is not None:
            send({"id": frame["id"], "result": {}})


if __name__ == "__main__":
    main()
