"""The one line reader (``supervisor.process.LineReader``) that every provider frames with."""

from __future__ import annotations

import asyncio
import itertools
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor.process import FrameTooLarge, LineReader


class Chunks:
    """A stream that hands out exactly the given chunks, one per read."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    async def read(self, n: int) -> bytes:
        return self._chunks.pop(0) if self._chunks else b""


async def read_all(chunks: list[bytes], max_frame_bytes: int) -> list[bytes]:
    reader = LineReader(cast(asyncio.StreamReader, Chunks(chunks)), max_frame_bytes)
    lines: list[bytes] = []
    while (line := await reader.read_line()) is not None:
        lines.append(line)
    return lines


@settings(max_examples=60, deadline=None)
@given(
    lines=st.lists(st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=12), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=8),
)
def test_whole_lines_whatever_the_chunking(lines: list[str], cuts: list[int]) -> None:
    data = b"".join(line.encode("utf-8", "surrogatepass") + b"\n" for line in lines)
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[start:end] for start, end in itertools.pairwise(points) if end > start]
    got = asyncio.run(read_all(chunks, max_frame_bytes=1 << 10))
    assert got == [line.encode("utf-8", "surrogatepass") for line in lines]


def test_the_frame_bound_and_a_final_unterminated_line() -> None:
    assert asyncio.run(read_all([b"12345\n", b"abc"], max_frame_bytes=5)) == [b"12345", b"abc"]
    with pytest.raises(FrameTooLarge):
        asyncio.run(read_all([b"123456\n"], max_frame_bytes=5))
    with pytest.raises(FrameTooLarge):
        asyncio.run(read_all([b"1234", b"567", b"89"], max_frame_bytes=5))
