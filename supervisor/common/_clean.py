"""Text every output can encode: a lone surrogate becomes U+FFFD.

A Python ``str`` may hold a lone surrogate (U+D800..U+DFFF) that no UTF-8 output can
encode: JSON decoders turn the escape ``\\ud800`` into one (JavaScript agents emit it
when they cut an emoji in half), and ``surrogateescape`` turns undecodable bytes into
``\\udc80``..``\\udcff``.  Writing such a string to a terminal, a JSON document, a record,
an MCP result, a span or a log raises ``UnicodeEncodeError``.

So child text is cleaned once, where it enters what the parent gets: the seam's
:class:`~supervisor.SubagentResult` (every provider's output, every path), the request's
task on the way in, and the few front-end outputs that echo a caller's own text (batch
ids).  Logging cleans its records with a filter.  Each lone surrogate becomes one U+FFFD;
text without one is returned as the same object (the common case costs one ``isascii``
or one strict encode, about 2 ms per MB of non-ASCII text).
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (``text`` itself when it has none)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(REPLACEMENT, text)
    return text
