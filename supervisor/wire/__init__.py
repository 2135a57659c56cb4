"""Mechanisms shared by the hand-written provider clients: the one UTF-8 text cap and the
one JSON-RPC core.  (The one line reader and frame bound live in the process layer:
:class:`supervisor.process.LineReader`.)"""

from __future__ import annotations

from supervisor.wire._rpc import CloseOnce as CloseOnce
from supervisor.wire._rpc import FrameWriter as FrameWriter
from supervisor.wire._rpc import Pending as Pending
from supervisor.wire._rpc import PendingRequests as PendingRequests
from supervisor.wire._rpc import RequestId as RequestId
from supervisor.wire._rpc import encode_frame as encode_frame
from supervisor.wire._rpc import is_request_id as is_request_id
from supervisor.wire._text import TRUNCATED_MARK as TRUNCATED_MARK
from supervisor.wire._text import CappedText as CappedText
from supervisor.wire._text import cap_text as cap_text
from supervisor.wire._text import utf8_prefix as utf8_prefix
from supervisor.wire._version import client_version as client_version

__all__ = (
    "TRUNCATED_MARK",
    "CappedText",
    "CloseOnce",
    "FrameWriter",
    "Pending",
    "PendingRequests",
    "RequestId",
    "cap_text",
    "client_version",
    "encode_frame",
    "is_request_id",
    "utf8_prefix",
)
