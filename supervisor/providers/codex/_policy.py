"""The request policy: how each app-server request is answered without granting authority.

Command and file approvals are cancelled when ``cancel`` is offered, else declined;
permissions grant nothing; user input gets empty answers; MCP elicitations are
declined.  Any other request is not served (the run fails).  Each answer comes with
the closed terms of the unattended decision it records.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from supervisor.providers.codex._protocol import (
    ApprovalResponse,
    ElicitationResponse,
    PermissionsResponse,
    UserInputResponse,
)

__all__ = ["Answer", "answer_request"]


@dataclass(frozen=True, slots=True)
class Answer:
    response: Mapping[str, Any]
    request: str
    """The permission line's ``request`` term."""
    decision: str
    """The permission line's ``decision`` term."""


def answer_request(method: str, params: Mapping[str, Any]) -> Answer | None:
    """The answer to one server request; None for a request this client does not serve."""
    if method in ("item/commandExecution/requestApproval", "item/fileChange/requestApproval"):
        offered = params.get("availableDecisions")
        cancel = isinstance(offered, list) and "cancel" in offered
        kind = "command approval" if method.startswith("item/commandExecution") else "file approval"
        response = ApprovalResponse(decision="cancel" if cancel else "decline").wire()
        return Answer(response, kind, "cancelled" if cancel else "declined")
    if method == "item/permissions/requestApproval":
        return Answer(PermissionsResponse().wire(), "permission grant", "denied")
    if method == "item/tool/requestUserInput":
        return Answer(UserInputResponse().wire(), "user input", "empty response")
    if method == "mcpServer/elicitation/request":
        return Answer(ElicitationResponse().wire(), "MCP elicitation", "declined")
    return None
