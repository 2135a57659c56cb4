"""Nothing the child controls reaches a terminal or an INFO+ log record unasked.

Every hostile path below makes the ACP SDK (or the provider) log or raise with the
child's text in hand.  Through the real CLI: stderr and stdout carry none of it, with
or without ``--json``; only ``--verbose`` shows it.  Through the embedding API: the
root logger's handlers are the same after a run as before, nothing reaches stderr, no
record at INFO or above carries the child's text, and the text is on
``supervisor.child`` at DEBUG for whoever asks.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import CHILDREN, PYTHON
from tests.test_cli import ACP_CHILD, subagents

SECRET = "sk-secret-hygiene-4711"


def frames(*items: object) -> str:
    return json.dumps(list(items))


def notification(method: str, params: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": method, "params": params}


# name -> the scripted child's knobs; each makes the SDK log (or raise with) child text
HOSTILE: dict[str, dict[str, str]] = {
    "unknown notification method": {
        "FRAMES_AT": "prompt",
        "FRAMES": frames(notification(SECRET, {})),
    },
    "bad notification params": {
        "FRAMES_AT": "prompt",
        "FRAMES": frames(notification("session/update", {"sessionId": SECRET, "update": {"x": SECRET}})),
    },
    "bad request params": {
        "FRAMES_AT": "prompt",
        "FRAMES": frames(
            {"jsonrpc": "2.0", "id": 7, "method": "session/request_permission", "params": {"x": SECRET}}
        ),
    },
    "unknown request method": {
        "FRAMES_AT": "prompt",
        "FRAMES": frames({"jsonrpc": "2.0", "id": 8, "method": SECRET, "params": {}}),
    },
    "garbage line": {"FRAMES_AT": "prompt", "FRAMES": frames(f"{SECRET} is not JSON")},
    "not JSON-RPC": {"FRAMES_AT": "initialize", "FRAMES": frames({"secret": SECRET})},
    "error answer": {"ERROR_AT": "initialize", "ERROR_TEXT": SECRET},
    "error answer to the prompt": {"ERROR_AT": "prompt", "ERROR_TEXT": SECRET},
    "malformed session id": {"NEW_SESSION_RESULT": json.dumps({"sessionId": {"x": SECRET}})},
    "out-of-vocabulary stop reason": {"STOP": SECRET},
    "exit at startup": {"EXIT_AT": "start", "STDERR_TEXT": SECRET},
    "stdin closed at startup": {"CLOSE_STDIN_AT": "start", "STDERR_TEXT": SECRET},
    "exit in the prompt": {"EXIT_AT": "prompt", "STDERR_TEXT": SECRET},
}

# the cases whose child text is logged at all (the others are answered to the child, or carry none)
LOGGED = {
    "unknown notification method",
    "bad notification params",
    "garbage line",
    "not JSON-RPC",
    "error answer",
    "error answer to the prompt",
    "malformed session id",
    "out-of-vocabulary stop reason",
    "exit at startup",  # its stderr, drained in ``log`` mode
    "stdin closed at startup",
    "exit in the prompt",
}


def child_env(knobs: dict[str, str]) -> list[str]:
    args: list[str] = []
    for key, value in knobs.items():
        args += ["--env", f"ACP_CHILD_{key}={value}"]
    return args


@pytest.mark.parametrize("json_flag", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_cli_prints_no_child_text(tmp_path: Path, case: str, json_flag: bool) -> None:
    flags = ["--json"] if json_flag else []
    proc = subagents("run", *flags, *child_env(HOSTILE[case]), "hi", "--", *ACP_CHILD, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert SECRET not in proc.stderr
    assert SECRET not in proc.stdout
    assert "Traceback" not in proc.stderr
    assert "ERROR:root" not in proc.stderr
    if json_flag:
        json.loads(proc.stdout)  # stdout is the one document, nothing else


def test_verbose_shows_the_child_text(tmp_path: Path) -> None:
    knobs = HOSTILE["unknown notification method"]
    proc = subagents("run", "--verbose", *child_env(knobs), "hi", "--", *ACP_CHILD, cwd=tmp_path)
    assert proc.returncode == 0
    assert f"SDK: Unhandled error while handling notification method={SECRET}" in proc.stderr


def test_unknown_method_fails_nothing(tmp_path: Path) -> None:
    knobs = HOSTILE["unknown notification method"]
    proc = subagents("run", *child_env(knobs), "hi", "--", *ACP_CHILD, cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (0, "hello from acp_child\n")


EMBEDDER = textwrap.dedent(
    """
    import json, logging, sys
    from pathlib import Path
    import anyio
    from supervisor import Registry, StartFailed, SubagentRequest
    from supervisor.providers.acp import Config, Provider

    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append((record.name, record.levelno, record.getMessage(), self.format(record)))

    keep = Keep(logging.DEBUG)
    keep.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger().setLevel(logging.DEBUG)
    logging.getLogger().addHandler(keep)  # the embedder's own configuration
    before = list(logging.getLogger().handlers)

    async def main():
        registry = Registry()
        config = Config(
            command=sys.argv[1], args=sys.argv[2:], env=json.loads(sys.stdin.read()), stderr="log"
        )
        registry.register(Provider(config))
        request = SubagentRequest(task="hi", parent_cwd=Path.cwd())
        texts = []
        try:
            async with registry.run("acp", request) as run:
                result = await run.result()
            texts += [result.output, str(result.diagnostic)]
        except StartFailed as exc:
            texts.append(str(exc))
        return texts

    texts = anyio.run(main, backend="asyncio")
    after = list(logging.getLogger().handlers)
    print(json.dumps({
        "same_handlers": before == after,
        "texts": texts,
        "loud": [r for r in records if r[1] >= logging.INFO],
        "child_debug": [r for r in records if r[0] == "supervisor.child" and r[1] == logging.DEBUG],
    }))
    """
)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_an_embedders_logging_is_untouched(tmp_path: Path, case: str) -> None:
    env = {f"ACP_CHILD_{k}": v for k, v in HOSTILE[case].items()}
    script = tmp_path / "embedder.py"
    script.write_text(EMBEDDER, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script), PYTHON, "-I", str(CHILDREN / "acp_child.py")],
        cwd=tmp_path,
        input=json.dumps(env),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["same_handlers"] is True
    assert proc.stderr == ""
    assert all(SECRET not in text for text in report["texts"])
    assert [r for r in report["loud"] if SECRET in r[3]] == []
    if case in LOGGED:  # the child's text is there for whoever enables supervisor.child at DEBUG
        assert any(SECRET in r[3] for r in report["child_debug"]), report["child_debug"]


def test_the_sdk_keeps_its_own_logging_outside_a_run() -> None:
    """The stand-in routes only our connections' records; other users of the SDK are untouched."""
    import acp.connection

    from supervisor.common import _sdk_logging
    from supervisor.providers.acp._run import ACP_SDK_MODULES

    _sdk_logging.route_sdk_logging(ACP_SDK_MODULES, "logging")
    stand_in = vars(acp.connection)["logging"]
    assert isinstance(stand_in, _sdk_logging.RoutedLogging)
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    keep = Keep()
    logging.getLogger().addHandler(keep)
    try:
        stand_in.error("outside %s", "a run")
        with _sdk_logging.sdk_logging_routed():
            stand_in.error("inside %s", "a run")
    finally:
        logging.getLogger().removeHandler(keep)
    assert [(r.name, r.levelno, r.getMessage()) for r in seen] == [("root", logging.ERROR, "outside a run")]
