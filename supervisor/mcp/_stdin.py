"""What the MCP server reads: the client's frames, with no lone surrogate left in them
(``_stdio`` hands every line it reads through :func:`clean_frame`).

A client may send the JSON escape ``\\ud800`` (a JavaScript client that cut an emoji in
half, or a hostile one).  The MCP SDK parses frames with pydantic, which refuses such an
escape, and then drops the whole frame without an answer: the client waits for ever.
So each line holding such an escape is parsed here first (Python's decoder accepts it),
every lone surrogate becomes U+FFFD, and the frame is handed on re-encoded.  Every other
line goes through untouched; a line that is not JSON at all is left for the SDK to refuse.

Invalid UTF-8 from the client becomes U+FFFD too (as the SDK's own reader does).
"""

from __future__ import annotations

import json
import re
from typing import Any

from supervisor.common._clean import clean_text

# An escape of a surrogate, high or low (a pair is harmless but rare enough to re-encode too).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def clean_frame(line: str) -> str:
    """``line`` with every lone surrogate in its JSON strings (keys too) made U+FFFD."""
    if not _SURROGATE_ESCAPE.search(line):
        return line
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return line
    text = json.dumps(_clean(value), ensure_ascii=False, separators=(",", ":"))
    return text + "\n" if line.endswith("\n") else text


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item) for item in value]
    return value
