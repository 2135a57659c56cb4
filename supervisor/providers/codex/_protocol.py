"""The slice of the Codex app-server protocol (v2, codex 0.171.0) this provider speaks.

Pydantic models sit at the wire boundary only.  Outbound models forbid extra fields and
dump exactly what the generated JSON schema expects (the tests validate every frame
against ``codex app-server generate-json-schema`` of the pinned version).  Inbound
models are lenient about fields they do not use, strict about the ones they do: a
missing thread id, a non-string answer or an unknown message phase is a protocol fault,
never guessed around.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

__all__ = [
    "AgentMessageDelta",
    "AgentMessageItem",
    "ApprovalDecision",
    "ApprovalResponse",
    "ClientInfo",
    "ElicitationResponse",
    "ErrorNotification",
    "InitializeCapabilities",
    "InitializeParams",
    "InitializeResult",
    "ItemNotification",
    "PermissionsResponse",
    "StatusItem",
    "TextInput",
    "ThreadResumeParams",
    "ThreadResumeResult",
    "ThreadStartParams",
    "ThreadStartResult",
    "ThreadTokenUsage",
    "TurnCompleted",
    "TurnError",
    "TurnInterruptParams",
    "TurnInterruptResult",
    "TurnStartParams",
    "TurnStartResult",
    "UserInputResponse",
]

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
MessagePhase = Literal["commentary", "partial_answer", "final_answer"]
ApprovalPolicy = Literal["never", "on-request"]
ApprovalsReviewer = Literal["auto_review"]
SandboxMode = Literal["read-only", "workspace-write", "danger-full-access"]
ApprovalDecision = Literal["cancel", "decline"]


class _Out(BaseModel):
    """A frame (or part of one) this client sends; fields carry the protocol's own names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def wire(self) -> dict[str, Any]:
        """The JSON object to send: protocol field names, absent optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class _In(BaseModel):
    """A frame (or part of one) the app-server sends: unused fields are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


# -- requests this client sends ------------------------------------------------------------


class ClientInfo(_Out):
    name: str
    title: str | None = None
    version: str


class InitializeCapabilities(_Out):
    experimentalApi: bool = False
    requestAttestation: bool = False


class InitializeParams(_Out):
    clientInfo: ClientInfo
    capabilities: InitializeCapabilities = Field(default_factory=InitializeCapabilities)


class ThreadStartParams(_Out):
    cwd: str
    ephemeral: bool = True
    approvalPolicy: ApprovalPolicy
    approvalsReviewer: ApprovalsReviewer | None = None
    sandbox: SandboxMode | None = None


class ThreadResumeParams(_Out):
    """``thread/resume``: a thread kept on disk (not ephemeral), with today's permissions;
    its turns are not hydrated into the answer (the supervisor needs none of them)."""

    threadId: str
    cwd: str
    approvalPolicy: ApprovalPolicy
    approvalsReviewer: ApprovalsReviewer | None = None
    sandbox: SandboxMode | None = None
    excludeTurns: bool = True


class TextInput(_Out):
    type: Literal["text"] = "text"
    text: str
    text_elements: list[Any] = Field(default_factory=list)


class TurnStartParams(_Out):
    threadId: str
    input: list[TextInput]


class TurnInterruptParams(_Out):
    threadId: str
    turnId: str


# -- answers to the app-server's requests (none grants authority) ------------------------


class ApprovalResponse(_Out):
    """``item/commandExecution/requestApproval`` and ``item/fileChange/requestApproval``."""

    decision: ApprovalDecision


class _NoPermissions(_Out):
    """A ``GrantedPermissionProfile`` that grants nothing."""


class PermissionsResponse(_Out):
    """``item/permissions/requestApproval``: nothing granted, for this turn only."""

    permissions: _NoPermissions = Field(default_factory=_NoPermissions)
    scope: Literal["turn"] = "turn"


class UserInputResponse(_Out):
    """``item/tool/requestUserInput``: no answers."""

    answers: dict[str, Any] = Field(default_factory=dict)


class ElicitationResponse(_Out):
    """``mcpServer/elicitation/request``: declined, with no content."""

    action: Literal["decline"] = "decline"
    content: None = None
    meta: None = Field(default=None, alias="_meta")

    def wire(self) -> dict[str, Any]:
        # content and _meta are sent as explicit nulls, the shape MCP clients expect.
        return self.model_dump(by_alias=True, mode="json")


# -- results of this client's requests -----------------------------------------------------


class InitializeResult(_In):
    """Only its being an object matters; the fields are informational."""


class _Thread(_In):
    id: NonEmpty
    ephemeral: bool


class ThreadStartResult(_In):
    thread: _Thread


class ThreadResumeResult(_In):
    thread: _Thread


class _TurnRef(_In):
    id: NonEmpty


class TurnStartResult(_In):
    turn: _TurnRef


class TurnInterruptResult(_In):
    pass


# -- notifications ---------------------------------------------------------------------------


class TurnError(_In):
    """A failed turn's error.  ``message`` is child text: host log only."""

    message: str = ""
    codex_error_info: Any = Field(default=None, alias="codexErrorInfo")


class ErrorNotification(_In):
    error: TurnError
    will_retry: bool = Field(alias="willRetry")
    thread_id: str = Field(alias="threadId")
    turn_id: str = Field(alias="turnId")


class _Turn(_In):
    id: NonEmpty
    status: str
    error: TurnError | None = None


class TurnCompleted(_In):
    thread_id: str = Field(alias="threadId")
    turn: _Turn


class ItemNotification(_In):
    """``item/started`` and ``item/completed``; the item is parsed by type separately."""

    thread_id: str = Field(alias="threadId")
    turn_id: str = Field(alias="turnId")
    item: dict[str, Any]


class AgentMessageItem(_In):
    type: Literal["agentMessage"]
    id: str
    text: str
    phase: MessagePhase | None = None


class StatusItem(_In):
    """A ``commandExecution`` or ``fileChange`` item: only its status is used."""

    type: Literal["commandExecution", "fileChange"]
    id: str
    status: str


class ThreadTokenUsage(_In):
    """``thread/tokenUsage/updated``'s ``tokenUsage.total``: the thread's cumulative counts.

    ``inputTokens`` includes the cached ones; ``outputTokens`` includes reasoning.
    """

    input_tokens: int = Field(default=0, alias="inputTokens", strict=True)
    cached_input_tokens: int = Field(default=0, alias="cachedInputTokens", strict=True)
    output_tokens: int = Field(default=0, alias="outputTokens", strict=True)


class AgentMessageDelta(_In):
    thread_id: str = Field(alias="threadId")
    turn_id: str = Field(alias="turnId")
    item_id: str = Field(alias="itemId")
    delta: str
