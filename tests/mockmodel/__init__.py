"""A scriptable mock model server for driving real agent peers offline (stdlib only).

It speaks the OpenAI Responses API (`POST /v1/responses`, used by codex-acp and the Codex
app-server) and the Anthropic Messages API (`POST /v1/messages`, used by claude-agent-acp and the
Claude Code CLI) on 127.0.0.1, from a queue of scripted turns. See README.md beside this file.
"""

from .server import MockModelServer, MockServerError
from .turns import (
    Cut,
    EchoToolResult,
    Hang,
    HttpError,
    RecordedRequest,
    ScriptEntry,
    Shell,
    StreamFailure,
    Text,
    ToolCall,
    Turn,
    TurnFactory,
    Usage,
    WriteFile,
)

__all__ = [
    "Cut",
    "EchoToolResult",
    "Hang",
    "HttpError",
    "MockModelServer",
    "MockServerError",
    "RecordedRequest",
    "ScriptEntry",
    "Shell",
    "StreamFailure",
    "Text",
    "ToolCall",
    "Turn",
    "TurnFactory",
    "Usage",
    "WriteFile",
]
