"""One JSON frame from a child: decoded leniently, parsed strictly, depth bounded.

* Invalid UTF-8 inside a frame is the child's text being broken, not the protocol: the
  bytes are decoded with U+FFFD replacement characters and the frame is used (a good
  answer is never lost for a broken byte in a chunk).
* A frame nested deeper than :data:`MAX_FRAME_DEPTH` is refused as a protocol fault
  (:class:`FrameTooDeep`).  Python's JSON decoder raises ``RecursionError`` at about a
  thousand levels, and frames a few hundred levels deep parse but then exhaust the
  stack in whoever walks them next (a protocol SDK deep-copies and validates every
  frame), which would surface as a broken connection.  No protocol frame needs a
  hundred levels.
* Anything else that is not JSON raises ``ValueError`` as ``json.loads`` does; what a
  non-JSON line means is each protocol's rule.
"""

from __future__ import annotations

import json
from typing import Any

from supervisor._public import home

MAX_FRAME_DEPTH = 100
"""The deepest nesting of arrays and objects a frame may have."""


class FrameTooDeep(ValueError):
    """A frame nested deeper than :data:`MAX_FRAME_DEPTH` (or too deep to parse at all)."""

    def __init__(self) -> None:
        super().__init__(f"a frame nested deeper than {MAX_FRAME_DEPTH} levels")


def decode_frame(line: bytes) -> str:
    """The frame's text; invalid UTF-8 becomes U+FFFD."""
    return line.decode("utf-8", "replace")


def parse_frame(line: bytes | str) -> Any:
    """The JSON value of one frame.  Raises :class:`FrameTooDeep` for a frame nested too
    deep, ``ValueError`` for one that is not JSON."""
    text = decode_frame(line) if isinstance(line, bytes) else line
    try:
        value = json.loads(text)
    except RecursionError:
        raise FrameTooDeep from None
    # Depth can only exceed the bound if there are that many openers (a C-speed count).
    if text.count("[") + text.count("{") > MAX_FRAME_DEPTH and _too_deep(value):
        raise FrameTooDeep
    return value


def _too_deep(value: object) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > MAX_FRAME_DEPTH:
                    return True
                stack.append((child, depth + 1))
    return False


home("supervisor.provider", FrameTooDeep, decode_frame, parse_frame)
