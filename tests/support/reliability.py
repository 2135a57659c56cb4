"""What the reliability tests share: scripted children, the run-tag oracle, the closed grammar.

Nothing here sleeps.  A test that must act while a child sits inside a stage waits for the
child's own announcement: a marker line the child writes to its stderr at that stage, which
the supervisor drains into the host log (``stderr = "log"``) where :class:`Marks` sees it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio

from machines import QUIESCENT
from machines.acp import ACP_TOOL_KINDS, ACP_VOCABULARY
from machines.claude_code import CLAUDE_CODE_VOCABULARY
from machines.codex import CODEX_PERMISSION_REQUESTS, CODEX_VOCABULARY
from machines.dsh_sdk import DSH_SDK_VOCABULARY
from supervisor import Run
from supervisor._diagnostic import MAX_DIAGNOSTIC_BYTES, bound_diagnostic
from supervisor.providers import acp, dsh_sdk
from tests.conftest import CHILDREN, PYTHON, TESTS
from tests.conftest import tagged as tagged

ACP_CHILD = CHILDREN / "acp_child.py"
FAKE_DSH = CHILDREN / "fake_dsh_runtime.py"
FAKE_CLI = TESTS / "claude_code" / "fake_cli.py"

# Small graces keep stubborn children cheap; an exit is still observed well within them.
GRACES: dict[str, Any] = {"dispose_eof_grace_ms": 300, "dispose_grace_ms": 1000}

LADDER_STATES = frozenset({"running", "eof-wait", "term-wait", "kill-wait", "gone", "survived"})


# -- scripted children ----------------------------------------------------------------------


def acp_child(knobs: Mapping[str, str] | None = None, **keys: Any) -> acp.Config:
    """An ``acp`` config running the scripted ACP child with ``ACP_CHILD_<knob>`` values."""
    env: dict[str, str | None] = {f"ACP_CHILD_{k}": v for k, v in (knobs or {}).items()}
    env.update(keys.pop("env", {}))
    settings: dict[str, Any] = {**GRACES, "stderr": "log", **keys}
    return acp.Config(command=PYTHON, args=["-I", str(ACP_CHILD)], env=env, **settings)


def dsh_fake(knobs: Mapping[str, str] | None = None, **keys: Any) -> dsh_sdk.Config:
    """A ``dsh-sdk`` config running the fake DSH runtime with ``FAKE_DSH_<knob>`` values."""
    env: dict[str, str | None] = {f"FAKE_DSH_{k}": v for k, v in (knobs or {}).items()}
    env.update(keys.pop("env", {}))
    settings: dict[str, Any] = {**GRACES, "stderr": "log", "shutdown_timeout_ms": 300, **keys}
    return dsh_sdk.Config(command=PYTHON, args=[str(FAKE_DSH)], env=env, **settings)


_scripts = itertools.count()


def fake_claude(root: Path, script: Mapping[str, Any], **keys: Any) -> Any:
    """A ``claude-code`` provider whose CLI is the scripted fake (needs the claude-code extra)."""
    from supervisor.providers.claude_code import Config, Provider

    root.mkdir(parents=True, exist_ok=True)
    executable = root / "claude"
    if not executable.exists():
        executable.write_text(f'#!/bin/sh\nexec "{PYTHON}" -I "{FAKE_CLI}" "$@"\n', encoding="utf-8")
        executable.chmod(0o755)
    script_file = root / f"script-{next(_scripts)}.json"
    script_file.write_text(json.dumps(script), encoding="utf-8")
    env: dict[str, str | None] = {"FAKE_CLAUDE_SCRIPT": str(script_file)}
    env.update(keys.pop("env", {}))
    settings: dict[str, Any] = {**GRACES, "stderr": "log", **keys}
    return Provider(Config(cli_path=executable, env=env, **settings))


# -- waiting on a child's own announcement --------------------------------------------------


class Marks(logging.Handler):
    """Sets an event when a host-log record (a drained stderr line) carries its marker."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._events: dict[str, anyio.Event] = {}

    def event(self, marker: str) -> anyio.Event:
        """The event for ``marker`` (create it from the event loop, before the child may write it)."""
        return self._events.setdefault(marker, anyio.Event())

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        for marker, event in self._events.items():
            if marker in text:
                event.set()


@contextlib.contextmanager
def marks() -> Iterator[Marks]:
    """Child stderr in ``log`` mode reaches the handler (the supervisor logs it at DEBUG)."""
    logger = logging.getLogger("supervisor")
    handler, level = Marks(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


# -- the oracle: every process on the machine carrying a run's tag -------------------------


def assert_quiescent(run: Run) -> None:
    """Disposed (or rolled back) to whole-tree quiescence, proven by scanning the process table."""
    assert run.quiescent is True
    assert run.state == QUIESCENT
    assert tagged(run.id) == [], f"run {run.id} left processes behind"


def assert_audit_consistent(run: Run) -> None:
    """Every entry names the run; the lifecycle and the ladder each form one unbroken chain."""
    entries = run.audit.entries
    assert all(entry.run_id == run.id for entry in entries)
    assert all(a.t <= b.t for a, b in itertools.pairwise(entries))
    lifecycle = [e for e in entries if e.source not in LADDER_STATES]
    ladder = [e for e in entries if e.source in LADDER_STATES]
    assert all(a.target == b.source for a, b in itertools.pairwise(lifecycle))
    assert all(a.target == b.source for a, b in itertools.pairwise(ladder))
    if lifecycle:
        assert lifecycle[0].source == run.vocabulary.stages[0]
        assert lifecycle[-1].target == run.state
    if ladder:
        assert ladder[0].source == "running"
    # turns: numbered from 1 (a cold resume: from the turns before it), never going back;
    # each ``turn_sent`` begins the next one
    resumed = [e.turn for e in lifecycle if e.event == "resumed"]
    first = resumed[0] if resumed else 1
    turns = [entry.turn for entry in entries]
    assert all(a <= b for a, b in itertools.pairwise(turns))
    if turns:
        assert turns[0] == first
        assert turns[-1] == run.turn
    assert [e.turn for e in lifecycle if e.event == "turn_sent"] == list(range(first + 1, run.turn + 1))


# -- the closed grammar of diagnostics ------------------------------------------------------

VOCABULARIES = {
    v.label: v for v in (ACP_VOCABULARY, DSH_SDK_VOCABULARY, CLAUDE_CODE_VOCABULARY, CODEX_VOCABULARY)
}


def _alternatives(values: Any) -> str:
    return "|".join(re.escape(str(v)) for v in sorted(values, key=lambda v: -len(str(v))))


_FAILURE = re.compile(
    rf"Subagent failure \(provider: (?P<provider>{_alternatives(VOCABULARIES)}); "
    r"stage: (?P<stage>[a-z-]+); category: (?P<category>[a-z-]+)"
    r"(?:; HTTP status: \d{1,5})?(?:; stop reason: (?:max_turn_requests|unknown))?"
    r"(?:; exit code: \d{1,3})?(?:; signal: SIG[A-Z0-9]+)?\)"
)
_PERMISSION = [
    re.compile(
        r"ACP unattended decision \(policy: (?:allow|reject); "
        rf"request: (?:{_alternatives([*ACP_TOOL_KINDS, 'unknown'])}); decision: (?:allowed|denied)\)"
    ),
    re.compile(
        r"Claude Code unattended decision \(mode: (?:dontAsk|acceptEdits|plan|bypassPermissions|default); "
        r"request: (?:tool permission|MCP elicitation|user dialog); decision: (?:denied|declined|cancelled)\)"
    ),
    re.compile(
        r"Codex unattended decision \(mode: (?:never|approve-for-me|dangerously-bypass-approvals-and-sandbox); "
        rf"request: (?:{_alternatives(CODEX_PERMISSION_REQUESTS)}); "
        r"decision: (?:cancelled|declined|denied|empty response|failed)\)"
    ),
]


def assert_closed(text: str | None) -> None:
    """``text`` is None or made only of the contract's fixed lines: no free text can hide in it."""
    if text is None:
        return
    for line in text.split("\n"):
        failure = _FAILURE.fullmatch(line)
        if failure is not None:
            vocabulary = VOCABULARIES[failure["provider"]]
            assert failure["stage"] in vocabulary.stages, line
            assert failure["category"] in vocabulary.categories, line
            continue
        assert any(p.fullmatch(line) for p in _PERMISSION), f"not a closed diagnostic line: {line!r}"


def assert_bounded(text: str | None) -> None:
    """The seam bound: None or 1..4096 UTF-8 bytes of valid text, a fixed point of the bound."""
    if text is None:
        return
    data = text.encode("utf-8")  # raises on a lone surrogate: the text must be valid UTF-8
    assert 0 < len(data) <= MAX_DIAGNOSTIC_BYTES
    assert data.decode("utf-8") == text
    assert bound_diagnostic(text) == text
