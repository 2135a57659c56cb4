"""The one UTF-8 text cap: text never exceeds its byte limit, and a cut is marked.

Two bounds use it.  The child's answer is collected under ``max_output_bytes`` (the
providers' :class:`CappedText`, and the base run once more on every result), marked
``\\n[output truncated]``; a diagnostic is bounded to 4096 bytes, marked
``\\n[diagnostic truncated]`` (:func:`supervisor.provider.bound_diagnostic`).  Text over
the cap keeps the longest prefix that fits together with the mark, so a reader can tell
a cut text from a short one; the mark is inside the limit, and a code point is never
split.  A limit too small to hold the mark keeps a bare prefix.
"""

from __future__ import annotations

from supervisor._public import home

TRUNCATED_MARK = "\n[output truncated]"


def _encode(text: str) -> bytes:
    # A lone surrogate (possible in decoded JSON) must not make counting raise.
    return text.encode("utf-8", "surrogatepass")


def _prefix(data: bytes, limit: int) -> str:
    """The longest whole-code-point prefix of encoded ``data`` within ``limit`` bytes."""
    cut = max(limit, 0)
    if cut >= len(data):
        return data.decode("utf-8", "surrogatepass")
    while cut > 0 and (data[cut] & 0xC0) == 0x80:  # never split a code point
        cut -= 1
    return data[:cut].decode("utf-8", "surrogatepass")


def utf8_prefix(text: str, limit: int) -> str:
    """The longest prefix of ``text`` of at most ``limit`` UTF-8 bytes."""
    data = _encode(text)
    return text if len(data) <= limit else _prefix(data, limit)


def cap_text(text: str, limit: int | None, *, mark: str = TRUNCATED_MARK) -> str:
    """``text`` when it fits in ``limit`` bytes (None: no limit), else a prefix ending in ``mark``."""
    if limit is None:
        return text
    data = _encode(text)
    if len(data) <= limit:
        return text
    return _marked(data, limit, mark)


def _marked(data: bytes, limit: int, mark: str) -> str:
    mark_bytes = len(_encode(mark))
    if limit < mark_bytes:
        return _prefix(data, limit)
    return _prefix(data, limit - mark_bytes) + mark


class CappedText:
    """Text collected part by part under ``limit`` UTF-8 bytes (None: unbounded).

    ``separator`` goes between parts (counted like text).  Once a part did not fit,
    :attr:`truncated` is set, later parts are dropped, and :attr:`text` ends with the
    mark.
    """

    __slots__ = ("_limit", "_parts", "_separator", "_size", "truncated")

    def __init__(self, limit: int | None, *, separator: str = "") -> None:
        if limit is not None and limit < 0:
            raise ValueError("the output limit must be non-negative")
        self._limit = limit
        self._separator = separator
        self._parts: list[str] = []
        self._size = 0
        self.truncated = False

    def add(self, text: str) -> None:
        if not text or self.truncated:
            return
        if self._parts and self._separator:
            text = self._separator + text
        size = len(_encode(text))
        if self._limit is not None and self._size + size > self._limit:
            # keep what fits (the mark is applied when the text is read)
            text = utf8_prefix(text, self._limit - self._size)
            size = len(_encode(text))
            self.truncated = True
        self._parts.append(text)
        self._size += size

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        joined = self._parts[0] if self._parts else ""
        if self.truncated and self._limit is not None:
            return _marked(_encode(joined), self._limit, TRUNCATED_MARK)
        return joined


home("supervisor.provider", CappedText, cap_text, utf8_prefix)
