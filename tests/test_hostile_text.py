"""Hostile child text never breaks a promise (it never reaches a diagnostic, and never crashes a
front-end): the real CLI, the scripted ACP child.

* A lone surrogate (the JSON escape ``\\ud800`` a JavaScript agent emits when it cuts an
  emoji in half) becomes U+FFFD in every output; nothing crashes.
* Invalid UTF-8 inside a frame is decoded with replacement characters; the answer is kept.
* A frame nested too deep is ``<stage>/protocol``, at once, like any other line that is not
  a JSON-RPC message.

The fuzz tests send what hypothesis draws (text with lone surrogates, raw invalid bytes)
through a real child into each output: the CLI's text and ``--json`` (with its span on the
console exporter), batch records, MCP results (``tests/mcp/test_hostile.py``) and log
records.  Every example starts real processes, so each draws several chunks at once and
the example count is a third of the profile's.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from supervisor import Registry, StderrMode, SubagentRequest
from supervisor.providers.acp import Config as AcpConfig
from supervisor.providers.acp import Provider as AcpProvider
from tests.test_cli import ACP_CHILD

SESSION = "hostile-session"
_PROFILE = settings.default
FUZZ_EXAMPLES = max(3, (_PROFILE.max_examples if _PROFILE is not None else 15) // 3)
FUZZ = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: every step runs processes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def failure(stage: str, category: str) -> str:
    return f"Subagent failure (provider: ACP; stage: {stage}; category: {category})"


def chunk_frame(body: bytes) -> bytes:
    """An ``agent_message_chunk`` whose JSON text string is ``body`` (already escaped)."""
    return (
        b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"' + SESSION.encode() + b'",'
        b'"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"' + body + b'"}}}}'
    )


def frames_env(tmp_path: Path, frames: list[bytes], *, at: str = "prompt") -> dict[str, str]:
    """The scripted child's knobs: ``frames`` verbatim at ``at`` (raw bytes survive: the file
    holds them as ``surrogateescape`` text, the child writes them back as bytes)."""
    listed = tmp_path / "frames.json"
    listed.write_text(json.dumps([f.decode("utf-8", "surrogateescape") for f in frames]), encoding="ascii")
    return {
        "ACP_CHILD_SESSION_ID": SESSION,
        "ACP_CHILD_TEXT": "",
        "ACP_CHILD_FRAMES_AT": at,
        "ACP_CHILD_FRAMES_FILE": str(listed),
    }


def run_cli(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", *args, "t", "--", *ACP_CHILD],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        env={**os.environ, **env},
    )


def no_traceback(proc: subprocess.CompletedProcess[bytes]) -> str:
    """The CLI's stderr, which must be UTF-8 and carry no traceback."""
    errors = proc.stderr.decode("utf-8")  # strict: a lone surrogate would not have encoded
    assert "Traceback" not in errors, errors
    return errors


# -- a lone surrogate ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["text", "json"])
def test_a_lone_surrogate_from_the_child_is_u_fffd_in_the_cli_output(tmp_path: Path, mode: str) -> None:
    """Before: ``UnicodeEncodeError`` in the CLI's report, no result printed, exit 1."""
    frames = [chunk_frame(rb"half an emoji: \ud83d"), chunk_frame(rb" and a low half \ude00 alone")]
    proc = run_cli(tmp_path, *(["--json"] if mode == "json" else []), env=frames_env(tmp_path, frames))
    no_traceback(proc)
    assert proc.returncode == 0
    expected = "half an emoji: \ufffd and a low half \ufffd alone"
    if mode == "json":
        document = json.loads(proc.stdout.decode("utf-8"))
        assert (document["stop_reason"], document["output"]) == ("completed", expected)
    else:
        assert proc.stdout.decode("utf-8") == expected + "\n"


def test_a_task_with_a_lone_surrogate_reaches_the_child_as_u_fffd(tmp_path: Path) -> None:
    """The parent's own text obeys the same rule: a task argument with a byte that is not
    UTF-8 (``surrogateescape`` in argv) reaches the child, and the answer, as U+FFFD."""
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor.cli", "run", "--json", b"task \xff end", "--", *ACP_CHILD],
        cwd=tmp_path,
        capture_output=True,
        timeout=120,
        env={**os.environ, "ACP_CHILD_ECHO_PROMPT": "1", "ACP_CHILD_TEXT": ""},
    )
    no_traceback(proc)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["output"] == "prompt=task \ufffd end\n"


# -- invalid UTF-8 and frames nested too deep -------------------------------------------------


def test_invalid_utf8_inside_a_frame_is_replaced_and_the_answer_kept(tmp_path: Path) -> None:
    """Before: the whole run failed as ``prompt/protocol`` and the good answer was lost."""
    frames = [chunk_frame(b"good \xff\xfe answer"), chunk_frame(b", cut \xe2\x82")]
    proc = run_cli(tmp_path, "--json", env=frames_env(tmp_path, frames))
    no_traceback(proc)
    assert proc.returncode == 0
    document = json.loads(proc.stdout)
    assert (document["stop_reason"], document["diagnostic"]) == ("completed", None)
    assert document["output"] == "good \ufffd\ufffd answer, cut \ufffd"


@pytest.mark.parametrize(
    ("at", "frame"),
    [
        ("initialize", b"[" * 100_000 + b"]" * 100_000),
        ("prompt", b"[" * 100_000 + b"]" * 100_000),
        ("prompt", chunk_frame(b'", "deep": ' + b"[" * 900 + b"]" * 900 + b', "x": "')),
    ],
    ids=["100000-deep-at-initialize", "100000-deep-in-the-prompt", "a-chunk-900-deep"],
)
def test_a_frame_nested_too_deep_is_a_protocol_failure_at_once(tmp_path: Path, at: str, frame: bytes) -> None:
    """Before: ``<stage>/transport`` (the decoder's RecursionError, or the SDK's when it
    deep-copied a frame that did parse, broke the connection)."""
    env = frames_env(tmp_path, [frame], at=at)
    proc = run_cli(tmp_path, "--json", "--start-timeout", "600", env=env)
    no_traceback(proc)
    assert proc.returncode == 1
    document = json.loads(proc.stdout)
    stage = "initialize" if at == "initialize" else "prompt"
    assert (document["diagnostic"], document["quiescent"]) == (failure(stage, "protocol"), True)


def test_a_frame_just_within_the_depth_bound_is_used(tmp_path: Path) -> None:
    from supervisor.wire import MAX_FRAME_DEPTH

    # the chunk's own nesting is 4 (frame, params, update, content): the extra value fills the rest
    extra = MAX_FRAME_DEPTH - 4
    frame = chunk_frame(b'ok", "extra": ' + b"[" * extra + b"]" * extra + b', "x": "')
    proc = run_cli(tmp_path, "--json", env=frames_env(tmp_path, [frame]))
    no_traceback(proc)
    assert (proc.returncode, json.loads(proc.stdout)["output"]) == (0, "ok")


# -- the fuzz: hostile text into every output ----------------------------------------------------

SURROGATES = st.integers(0xD800, 0xDFFF).map(chr)
TEXT = st.text(alphabet=st.one_of(st.characters(), SURROGATES), max_size=12)
RAW = st.binary(min_size=1, max_size=6).map(lambda data: bytes(byte | 0x80 for byte in data))


@dataclass(frozen=True)
class Hostile:
    """Chunks the child sends: each a JSON string body made of escaped text (lone surrogates
    become ``\\udXXX`` escapes, as JavaScript writes them) and raw bytes >= 0x80."""

    bodies: tuple[bytes, ...]

    @property
    def frames(self) -> list[bytes]:
        return [chunk_frame(body) for body in self.bodies]

    @property
    def expected(self) -> str:
        """What the parent must get: each frame decoded with U+FFFD for broken UTF-8, parsed,
        every lone surrogate U+FFFD."""
        texts = []
        for frame in self.frames:
            document: Any = json.loads(frame.decode("utf-8", "replace"))
            texts.append(document["params"]["update"]["content"]["text"])
        return clean("".join(texts))


def clean(text: str) -> str:
    """The oracle: every lone surrogate U+FFFD (written here, not imported from the code)."""
    return text.translate({code: "\ufffd" for code in range(0xD800, 0xE000)})


def _body(segments: list[str | bytes]) -> bytes:
    parts = [s if isinstance(s, bytes) else json.dumps(s)[1:-1].encode("ascii") for s in segments]
    return b"".join(parts)


HOSTILE = st.lists(
    st.lists(st.one_of(TEXT, RAW), min_size=1, max_size=6).map(_body), min_size=1, max_size=5
).map(lambda bodies: Hostile(tuple(bodies)))


@FUZZ
@given(hostile=HOSTILE)
def test_fuzz_the_cli_text_json_and_span_outputs(tmp_path: Path, hostile: Hostile) -> None:
    env = frames_env(tmp_path, hostile.frames)
    expected = hostile.expected
    text = run_cli(tmp_path, env=env)
    no_traceback(text)
    assert text.returncode == 0
    assert text.stdout.decode("utf-8") == (
        expected if expected.endswith("\n") or not expected else expected + "\n"
    )

    env.update({"OTEL_TRACES_EXPORTER": "console"})  # the span goes to stderr, encoded
    as_json = run_cli(tmp_path, "--json", "--otel", env=env)
    errors = no_traceback(as_json)
    assert as_json.returncode == 0
    assert json.loads(as_json.stdout.decode("utf-8"))["output"] == expected
    assert '"name": "invoke_agent acp"' in errors


class StrictUtf8File(logging.Handler):
    """A log file a shipper would read: strict UTF-8 (a lone surrogate cannot be written)."""

    def __init__(self, path: Path) -> None:
        super().__init__(logging.DEBUG)
        self.path = path
        self.failures: list[BaseException] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with self.path.open("a", encoding="utf-8", errors="strict") as file:
                file.write(self.format(record) + "\n")
        except Exception as exc:  # logging would print "--- Logging error ---" instead
            self.failures.append(exc)


@pytest.fixture
def strict_log(tmp_path: Path) -> Iterator[StrictUtf8File]:
    handler = StrictUtf8File(tmp_path / "host.log")
    logger = logging.getLogger("supervisor")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@FUZZ
@given(hostile=HOSTILE, method=TEXT.filter(str.strip))
def test_fuzz_the_log_records(
    tmp_path: Path, strict_log: StrictUtf8File, hostile: Hostile, method: str
) -> None:
    """An embedder logs ``supervisor`` at DEBUG to a strict UTF-8 file; the child sends hostile
    chunks and a notification whose method name is hostile text (the ACP SDK logs it with the
    child's text, routed to ``supervisor.child``).  Every record is written; none is lost."""
    notice = {"jsonrpc": "2.0", "method": "strange/" + method, "params": {"sessionId": SESSION}}
    strange = json.dumps(notice).encode()
    env: dict[str, str | None] = {**frames_env(tmp_path, [strange, *hostile.frames])}
    config = AcpConfig(command=sys.executable, args=["-I", ACP_CHILD[-1]], env=env, stderr=StderrMode.LOG)
    provider = AcpProvider(config)

    async def once() -> str:
        registry = Registry()
        registry.register(provider)
        async with registry.run(provider.name, SubagentRequest(task="t", parent_cwd=tmp_path)) as run:
            result = await run.result()
        return result.output

    before = strict_log.path.read_text(encoding="utf-8") if strict_log.path.exists() else ""
    output = anyio.run(once, backend="asyncio")
    assert output == hostile.expected
    assert strict_log.failures == []
    written = strict_log.path.read_text(encoding="utf-8")[len(before) :]
    assert "SDK:" in written  # the SDK's own record about the strange method is there
    assert clean(written) == written
