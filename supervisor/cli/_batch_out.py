"""Where a batch's records go: whole lines, or a clean stop.

Records are written with ``os.write`` on the file descriptor, not through a buffered
text file, so a write error is seen at the record that caused it and nothing is left
in a buffer to fail again when the file is closed.  In a file the batch opened itself
(``--out``), a record cut short by the error (a full filesystem takes what fits) is
cut off again (``ftruncate`` to where it began), so the file holds only whole records
and ``--resume`` finds exactly the runs that finished.  On stdout nothing is truncated
(the descriptor is not ours to rewind); a reader may see one torn last line.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path


class OutputFailed(Exception):
    """A record could not be written.  The text names the output and the OS reason."""


class RecordWriter:
    """Writes one record per line to a file descriptor; see the module docstring."""

    def __init__(self, fd: int, name: str, *, owned: bool) -> None:
        self._fd = fd
        self._name = name
        self._owned = owned  # a file opened here: ours to truncate and close

    @classmethod
    def to_stdout(cls) -> RecordWriter:
        sys.stdout.flush()
        return cls(sys.stdout.fileno(), "stdout", owned=False)

    @classmethod
    def to_file(cls, path: Path, *, resume: bool) -> RecordWriter:
        """Open ``path`` (truncated, or appended to with ``resume``); raises ``OSError``."""
        flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | (0 if resume else os.O_TRUNC)
        fd = os.open(path, flags, 0o666)
        writer = cls(fd, str(path), owned=True)
        try:
            end = os.lseek(fd, 0, os.SEEK_END)
            if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                writer._write_all(b"\n")  # a record torn by a crash must not swallow the next one
        except OSError:
            os.close(fd)
            raise
        return writer

    def write(self, line: str) -> None:
        """Write ``line`` and a newline, all of it; raises :class:`OutputFailed`."""
        data = (line + "\n").encode("utf-8")
        start = os.lseek(self._fd, 0, os.SEEK_CUR) if self._owned else None
        try:
            self._write_all(data)
        except OSError as exc:
            if start is not None:  # keep only whole records
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, start)
                    os.lseek(self._fd, start, os.SEEK_SET)
            reason = exc.strerror or type(exc).__name__
            raise OutputFailed(f"{self._name}: writing a record failed ({reason})") from exc

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._owned:
            os.close(self._fd)
            self._owned = False
