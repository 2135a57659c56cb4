"""The app-server protocol schema, generated at test set-up from the pinned binary.

``codex app-server generate-json-schema --out DIR`` writes one JSON Schema (draft 7) per
message plus the unions ``ClientRequest``, ``ClientNotification``, ``ServerRequest``
and ``ServerNotification``.  :class:`ProtocolSchema` validates every frame of a recorded
transcript against them: each request and notification against its method's variant,
each response against the ``*Response`` schema of the request it answers.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import jsonschema

Direction = Literal["send", "recv"]
Frame = tuple[Direction, Mapping[str, Any]]

# Results of the requests this client sends, and of the server requests it answers.
CLIENT_RESULTS = {
    "initialize": "v1/InitializeResponse.json",
    "thread/start": "v2/ThreadStartResponse.json",
    "thread/resume": "v2/ThreadResumeResponse.json",
    "turn/start": "v2/TurnStartResponse.json",
    "turn/interrupt": "v2/TurnInterruptResponse.json",
}
SERVER_RESULTS = {
    "item/commandExecution/requestApproval": "CommandExecutionRequestApprovalResponse.json",
    "item/fileChange/requestApproval": "FileChangeRequestApprovalResponse.json",
    "item/permissions/requestApproval": "PermissionsRequestApprovalResponse.json",
    "item/tool/requestUserInput": "ToolRequestUserInputResponse.json",
    "mcpServer/elicitation/request": "McpServerElicitationRequestResponse.json",
    "item/tool/call": "DynamicToolCallResponse.json",
}


def generate(binary: Path, out: Path, codex_home: Path) -> Path:
    """Run the pinned binary's schema generator into ``out``."""
    codex_home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(codex_home),
        "CODEX_HOME": str(codex_home),
    }
    subprocess.run(
        [str(binary), "app-server", "generate-json-schema", "--out", str(out)],
        env=env,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


@dataclass
class ProtocolSchema:
    root: Path
    _validators: dict[tuple[str, str], Any] = field(default_factory=dict)

    def load(self, relative: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / relative).read_text(encoding="utf-8"))
        return data

    # -- what the schema lists ------------------------------------------------------------

    @cached_property
    def codex_error_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.load("v2/ErrorNotification.json")["definitions"]["CodexErrorInfo"]
        return info

    def codex_error_strings(self) -> set[str]:
        """Every string variant of ``CodexErrorInfo``."""
        found: set[str] = set()
        for option in self.codex_error_info["anyOf"]:
            if option.get("type") == "string" and "enum" in option:
                found.update(option["enum"])
        return found

    def codex_error_objects(self) -> dict[str, dict[str, Any]]:
        """Every single-key object variant of ``CodexErrorInfo``: key -> its payload schema."""
        found: dict[str, dict[str, Any]] = {}
        for option in self.codex_error_info["anyOf"]:
            if option.get("type") == "object" and option.get("required"):
                (key,) = option["required"]
                found[key] = option["properties"][key]
        return found

    def methods(self, union: str) -> set[str]:
        return {variant["properties"]["method"]["enum"][0] for variant in self.load(union)["oneOf"]}

    # -- validation -----------------------------------------------------------------------

    def _method_validator(self, union: str, method: str) -> Any:
        key = (union, method)
        if key not in self._validators:
            document = self.load(union)
            variants = [v for v in document["oneOf"] if v["properties"]["method"]["enum"] == [method]]
            assert variants, f"{method} is not in {union}"
            schema = {**variants[0], "definitions": document.get("definitions", {})}
            self._validators[key] = jsonschema.Draft7Validator(schema)
        return self._validators[key]

    def _file_validator(self, relative: str) -> Any:
        key = ("file", relative)
        if key not in self._validators:
            self._validators[key] = jsonschema.Draft7Validator(self.load(relative))
        return self._validators[key]

    def validate(self, frames: Iterable[Frame]) -> int:
        """Validate a transcript; returns how many frames were checked."""
        envelope = self._file_validator("JSONRPCMessage.json")
        ours: dict[object, str] = {}
        theirs: dict[object, str] = {}
        count = 0
        for direction, frame in frames:
            envelope.validate(frame)
            method = frame.get("method")
            if method is not None and "id" in frame:
                union = "ClientRequest.json" if direction == "send" else "ServerRequest.json"
                self._method_validator(union, method).validate(frame)
                (ours if direction == "send" else theirs)[frame["id"]] = method
            elif method is not None:
                union = "ClientNotification.json" if direction == "send" else "ServerNotification.json"
                self._method_validator(union, method).validate(frame)
            elif "result" in frame:
                pending = theirs if direction == "send" else ours
                answered = pending.pop(frame["id"])
                table = SERVER_RESULTS if direction == "send" else CLIENT_RESULTS
                self._file_validator(table[answered]).validate(frame["result"])
            count += 1
        return count
