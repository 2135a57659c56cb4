"""Mechanisms shared by the hand-written provider clients: the one UTF-8 text cap and the
one JSON-RPC core.  (The one line reader and frame bound live in the process layer:
:class:`supervisor.process.LineReader`.)"""

from __future__ import annotations

from supervisor.wire._text import TRUNCATED_MARK as TRUNCATED_MARK
from supervisor.wire._text import CappedText as CappedText
from supervisor.wire._text import cap_text as cap_text
from supervisor.wire._text import utf8_prefix as utf8_prefix
from supervisor.wire._version import client_version as client_version

__all__ = ("TRUNCATED_MARK", "CappedText", "cap_text", "client_version", "utf8_prefix")
