"""Mechanisms shared by the hand-written provider clients: the one JSON-RPC core, the one
bound on the child's unanswered requests and the one frame parser (lenient UTF-8, bounded
depth), beside the core's one UTF-8 text cap, text cleaner (no lone surrogates) and package
version (re-exported here for the clients).  (The one line reader and frame bound live in
the process layer: :class:`supervisor.process.LineReader`.)"""

from __future__ import annotations

from supervisor._version import package_version as client_version
from supervisor.common._clean import clean_text as clean_text
from supervisor.common._text import TRUNCATED_MARK as TRUNCATED_MARK
from supervisor.common._text import CappedText as CappedText
from supervisor.common._text import cap_text as cap_text
from supervisor.common._text import utf8_prefix as utf8_prefix
from supervisor.wire._frames import MAX_FRAME_DEPTH as MAX_FRAME_DEPTH
from supervisor.wire._frames import FrameTooDeep as FrameTooDeep
from supervisor.wire._frames import decode_frame as decode_frame
from supervisor.wire._frames import parse_frame as parse_frame
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
    "MAX_FRAME_DEPTH",
    "TRUNCATED_MARK",
    "CappedText",
    "CloseOnce",
    "FrameTooDeep",
    "FrameWriter",
    "InboundRequests",
    "Pending",
    "PendingRequests",
    "RequestId",
    "cap_text",
    "clean_text",
    "client_version",
    "decode_frame",
    "encode_frame",
    "is_request_id",
    "parse_frame",
    "utf8_prefix",
)
