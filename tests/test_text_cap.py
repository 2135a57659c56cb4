"""The one UTF-8 text cap every provider collects output under."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from supervisor.wire import TRUNCATED_MARK, CappedText, cap_text

MARK_BYTES = len(TRUNCATED_MARK.encode())


def test_text_that_fits_is_untouched() -> None:
    assert cap_text("héllo", 6) == "héllo"
    assert cap_text("anything", None) == "anything"
    text = CappedText(6, separator="\n\n")
    text.add("a")
    text.add("b")
    assert text.text == "a\n\nb"
    assert not text.truncated


def test_output_over_the_cap_ends_with_the_mark_within_the_cap() -> None:
    capped = cap_text("é" * 100, 41)
    assert capped.endswith(TRUNCATED_MARK)
    assert capped == "é" * 11 + TRUNCATED_MARK  # 22 bytes of text, never half a code point
    assert len(capped.encode()) <= 41


def test_a_limit_smaller_than_the_mark_keeps_a_bare_prefix() -> None:
    assert cap_text("añswer", 3) == "añ"


@given(parts=st.lists(st.text(max_size=30), max_size=8), limit=st.integers(min_value=0, max_value=80))
def test_collected_parts_stay_within_the_cap(parts: list[str], limit: int) -> None:
    collected = CappedText(limit)
    for part in parts:
        collected.add(part)
    whole = "".join(parts)
    text = collected.text
    assert len(text.encode("utf-8", "surrogatepass")) <= limit
    if len(whole.encode("utf-8", "surrogatepass")) <= limit:
        assert text == whole
        assert not collected.truncated
    else:
        assert collected.truncated
        if limit >= MARK_BYTES:
            assert text.endswith(TRUNCATED_MARK)
            assert whole.startswith(text.removesuffix(TRUNCATED_MARK))
        else:
            assert whole.startswith(text)
