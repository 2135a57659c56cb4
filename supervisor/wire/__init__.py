"""Mechanisms shared by the hand-written provider clients: the one JSON-RPC core and the
one bound on the child's unanswered requests, beside the core's one UTF-8 text cap and
package version (re-exported here for the clients).  (The one line
reader and frame bound live in the process layer: :class:`supervisor.process.LineReader`.)"""

from __future__ import annotations

from supervisor._text import TRUNCATED_MARK as TRUNCATED_MARK
from supervisor._text import CappedText as CappedText
from supervisor._text import cap_text as cap_text
from supervisor._text import utf8_prefix as utf8_prefix
from supervisor._version import package_version as client_version
from supervisor.wire._rpc import DEFAULT_MAX_INFLIGHT_REQUESTS as DEFAULT_MAX_INFLIGHT_REQUESTS
from supervisor.wire._rpc import CloseOnce as CloseOnce
from supervisor.wire._rpc import FrameWriter as FrameWriter
from supervisor.wire._rpc import InboundRequests as InboundRequests
from supervisor.wire._rpc import Pending as Pending
from supervisor.wire._rpc import PendingRequests as PendingRequests
from supervisor.wire._rpc import RequestId as RequestId
from supervisor.wire._rpc import encode_frame as encode_frame
from supervisor.wire._rpc import is_request_id as is_request_id

__all__ = (
    "DEFAULT_MAX_INFLIGHT_REQUESTS",
    "TRUNCATED_MARK",
    "CappedText",
    "CloseOnce",
    "FrameWriter",
    "InboundRequests",
    "Pending",
    "PendingRequests",
    "RequestId",
    "cap_text",
    "client_version",
    "encode_frame",
    "is_request_id",
    "utf8_prefix",
)
