"""The one UTF-8 text cap: collected output never exceeds its byte limit.

Every provider collects the child's answer text under ``max_output_bytes``.  Output
over the cap keeps the longest prefix that fits together with the mark
``\\n[output truncated]``, so a reader can tell a cut answer from a short one; the mark
is inside the limit, and a code point is never split.  A limit too small to hold the
mark keeps a bare prefix.
"""

from __future__ import annotations

TRUNCATED_MARK = "\n[output truncated]"
_MARK_BYTES = len(TRUNCATED_MARK.encode("utf-8"))


def _encode(text: str) -> bytes:
    # A lone surrogate (possible in decoded JSON) must not make counting raise.
    return text.encode("utf-8", "surrogatepass")


def utf8_prefix(text: str, limit: int) -> str:
    """The longest prefix of ``text`` of at most ``limit`` UTF-8 bytes."""
    data = _encode(text)
    if len(data) <= limit:
        return text
    return data[: max(limit, 0)].decode("utf-8", "ignore")


def cap_text(text: str, limit: int | None) -> str:
    """``text`` when it fits in ``limit`` bytes (None: no limit), else a marked prefix."""
    if limit is None or len(_encode(text)) <= limit:
        return text
    return _marked(text, limit)


def _marked(text: str, limit: int) -> str:
    if limit < _MARK_BYTES:
        return utf8_prefix(text, limit)
    return utf8_prefix(text, limit - _MARK_BYTES) + TRUNCATED_MARK


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
            return _marked(joined, self._limit)
        return joined
