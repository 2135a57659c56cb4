"""The journal: every run and turn written to one SQLite file as it happens, read back by
``subagents runs`` / ``show``, and the record a cold resume starts from.

A leaf the engine writes to through one narrow interface (:mod:`._switch` hands each run
an observer; the observer's hooks only queue rows for the writer thread); the front-ends
read it (:mod:`._read`).
"""

from supervisor.journal._store import Journal as Journal
from supervisor.journal._store import default_path as default_path

__all__ = ("Journal", "default_path")
