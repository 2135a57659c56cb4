"""Secret fuzz: hypothesis-generated secrets, placed wherever a child or its parent's
environment can put text, never reach anything the supervisor reports.

Placements: ambient environment names matching the scrub pattern (``KEY``, ``PASSWORD``,
``SECRET``, ``TOKEN`` in any case, and ``DSH_*``); child stderr; JSON-RPC error messages
and data; stop reasons; tool titles and raw input; permission option names and tool
kinds; session ids; DSH turn-end payloads and malformed frames; Claude Code result
texts, error lists, denials and control requests; Codex turn errors.  The task text
carries the secret too.

Sinks: a child's environment (unless the name was given explicitly), the diagnostic
(which must also parse as the contract's closed lines), ``StartFailed`` and
``TeardownFailed`` text, ``supervisor.foreground_text``, ``supervisor.job_outcome(...)
.detail``, the audit trail, the run's ``repr`` and the CLI's ``--json`` document (and its
stderr).  The children never echo the secret into their answer text, so the answer needs
no exemption.  Every secret carries ``§`` (not ASCII, so never part of a fixed line) around
a drawn core of printable text, multibyte included.  Example counts stay small: each is a
real process.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from supervisor import (
    AbortSignal,
    StartFailed,
    SubagentRequest,
    SubagentResult,
    TeardownFailed,
    foreground_text,
    job_outcome,
    supervise,
)
from supervisor.process import ExitFacts, child_environment, is_scrubbed
from supervisor.provider import ProviderRun, RunContext
from supervisor.providers import acp, dsh_sdk
from supervisor.providers.acp import AcpRun
from tests.conftest import CHILDREN, PYTHON
from tests.support import require_module
from tests.support.reliability import (
    acp_child,
    assert_audit_consistent,
    assert_bounded,
    assert_closed,
    assert_quiescent,
    dsh_fake,
    fake_claude,
)
from tests.support.unkillable import UnkillableTree, phantom_process

pytestmark = pytest.mark.anyio

REAL = settings(max_examples=10, deadline=None, derandomize=True, database=None)
FEW = settings(max_examples=5, deadline=None, derandomize=True, database=None)

printable = st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp"))
secrets = st.text(printable, min_size=1, max_size=24).map(lambda core: f"§{core}§")

name_chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
credential_words = st.sampled_from(["KEY", "PASSWORD", "SECRET", "TOKEN"]).flatmap(
    lambda word: st.lists(st.booleans(), min_size=len(word), max_size=len(word)).map(
        lambda upper: "".join(c if u else c.lower() for c, u in zip(word, upper, strict=True))
    )
)
scrubbed_names = st.one_of(
    st.tuples(st.text(name_chars, max_size=6), credential_words, st.text(name_chars, max_size=6)).map(
        lambda parts: "".join(parts)
    ),
    st.tuples(st.sampled_from(["DSH_", "dsh_", "Dsh_"]), st.text(name_chars, max_size=8)).map(
        lambda parts: "".join(parts)
    ),
).filter(lambda name: name[0].isalpha() or name[0] == "_")


def check_reported(
    secret: str,
    run: ProviderRun[Any],
    result: SubagentResult | None = None,
    error: BaseException | None = None,
) -> None:
    """The secret is nowhere the supervisor reports; diagnostics are closed lines only."""
    assert secret not in repr(run)
    assert secret not in repr(run.audit.entries)
    assert secret not in json.dumps(run.audit.as_dicts(), ensure_ascii=False)
    assert_audit_consistent(run)
    if error is not None:
        text = str(error)
        assert secret not in text
        if isinstance(error, StartFailed | TeardownFailed):
            assert text == error.diagnostic
            assert_bounded(error.diagnostic)
            assert_closed(error.diagnostic)
    if result is not None:
        assert secret not in result.output
        assert secret not in (result.diagnostic or "")
        assert_bounded(result.diagnostic)
        assert_closed(result.diagnostic)
        assert secret not in foreground_text(result)
        assert secret not in (job_outcome(result).detail or "")


async def run_to_end(run: ProviderRun[Any]) -> tuple[SubagentResult | None, BaseException | None]:
    """The shared start -> result -> dispose sequence; what came out (a result, or the
    start/teardown error)."""
    with anyio.fail_after(60):
        outcome = await supervise(run, AbortSignal())
    return outcome.result, outcome.start_error or outcome.teardown_error


def request(secret: str) -> SubagentRequest:
    return SubagentRequest(task=f"the task {secret}", parent_cwd=Path.cwd())


# -- the environment ------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(ambient=st.dictionaries(scrubbed_names, secrets, min_size=1, max_size=4), explicit=st.data())
def test_ambient_credentials_never_reach_a_child_environment(
    ambient: dict[str, str], explicit: st.DataObject
) -> None:
    plain = {"PATH": "/usr/bin", "HOME": "/home/someone"}
    given_names = explicit.draw(st.lists(st.sampled_from(sorted(ambient)), unique=True, max_size=2))
    chosen = {name: f"explicit {name}" for name in given_names}
    env = child_environment(chosen, run_tag="tag", ambient={**plain, **ambient})
    for name, value in ambient.items():
        assert is_scrubbed(name)
        if name in chosen:
            assert env[name] == chosen[name]  # explicit wins, credential-shaped or not
        else:
            assert name not in env
            assert value not in env.values()
    assert {k: env[k] for k in plain} == plain


@REAL
@given(ambient=st.dictionaries(scrubbed_names, secrets, min_size=1, max_size=3), secret=secrets)
async def test_a_real_child_sees_no_ambient_credential(ambient: dict[str, str], secret: str) -> None:
    explicit_name = "CHILD_API_KEY"
    names = [*ambient, explicit_name]
    config = acp_child({"ECHO_ENV": ",".join(names), "TEXT": ""}, env={explicit_name: secret})
    with mock.patch.dict(os.environ, ambient):
        run = acp.Provider(config).create_run(request(secret))
        result, error = await run_to_end(run)
    assert error is None
    assert result is not None
    expected = "".join(f"{name} unset\n" for name in ambient) + f"{explicit_name}={secret}\n"
    assert result.output == expected  # the only secret a child gets is the one given explicitly
    assert_quiescent(run)


# -- ACP --------------------------------------------------------------------------------------


def acp_placement(placement: str, secret: str) -> dict[str, str]:
    """``ACP_CHILD_*`` knobs that put ``secret`` where ``placement`` says."""
    quiet_permission = {"PERMISSION": "execute", "QUIET_PERMISSION": "1"}
    options = [
        {"optionId": "yes", "name": secret, "kind": "allow_once"},
        {"optionId": "no", "name": secret, "kind": "reject_once"},
    ]
    return {
        "stderr": {"STDERR_TEXT": secret, "EXIT_AT": "prompt"},
        "error-at-initialize": {"ERROR_AT": "initialize", "ERROR_TEXT": secret},
        "error-at-new-session": {"ERROR_AT": "new-session", "ERROR_TEXT": secret},
        "error-at-prompt": {"ERROR_AT": "prompt", "ERROR_TEXT": secret},
        "stop-reason": {"STOP": secret},
        "denied-stop-reason": {**quiet_permission, "PERMISSION_DENIED_STOP": secret},
        "tool-title": {**quiet_permission, "TOOL_TITLE": secret, "STOP": "max_turn_requests"},
        "tool-raw-input": {**quiet_permission, "TOOL_RAW_INPUT": json.dumps({"command": secret})},
        "option-name": {**quiet_permission, "PERMISSION_OPTIONS": json.dumps(options), "STOP": "refusal"},
        "tool-kind": {"PERMISSION": secret.replace(",", ";"), "QUIET_PERMISSION": "1"},
        "session-id": {"SESSION_ID": secret, "SIGNAL_AT": "prompt"},
        "new-session-result": {"NEW_SESSION_RESULT": json.dumps({"sessionId": 7, "note": secret})},
        "prompt-result": {"PROMPT_RESULT": json.dumps({"stopReason": {"nested": secret}})},
    }[placement]


ACP_PLACEMENTS = [
    "stderr",
    "error-at-initialize",
    "error-at-new-session",
    "error-at-prompt",
    "stop-reason",
    "denied-stop-reason",
    "tool-title",
    "tool-raw-input",
    "option-name",
    "tool-kind",
    "session-id",
    "new-session-result",
    "prompt-result",
]


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(
    secret=secrets,
    placement=st.sampled_from(ACP_PLACEMENTS),
    policy=st.sampled_from(["reject", "allow"]),
    ambient=st.dictionaries(scrubbed_names, secrets, max_size=2),
)
async def test_acp_secrets_never_reach_a_report(
    secret: str, placement: str, policy: str, ambient: dict[str, str]
) -> None:
    config = acp_child(acp_placement(placement, secret), permission=policy)
    with mock.patch.dict(os.environ, ambient):
        run = acp.Provider(config).create_run(request(secret))
        result, error = await run_to_end(run)
    check_reported(secret, run, result, error)
    for value in ambient.values():
        check_reported(value, run, result, error)
    assert_quiescent(run)


# -- DSH SDK ----------------------------------------------------------------------------------

DSH_SCENARIOS: list[dict[str, str]] = [
    {"REASON": "error"},
    {"REASON": "aborted:hook"},
    {"REASON": "aborted:disposed"},
    {"REASON": "unknown-kind"},
    {"INIT_ERROR": "1"},
    {"PROMPT_ERROR": "1"},
    {"SHUTDOWN": "error"},
    {"MALFORMED_FRAMES": "1"},
    {"MALFORMED_EVENT": "1"},
    {"MESSAGE": "malformed"},
    {"GARBAGE_AT": "initialize", "CRASH_AT": "prompt"},
    {"STDERR": "startup noise", "EXIT_BEFORE_INIT": "4"},
]


@REAL
@given(
    secret=secrets,
    scenario=st.sampled_from(DSH_SCENARIOS),
    ambient=st.dictionaries(scrubbed_names, secrets, max_size=2),
)
async def test_dsh_secrets_never_reach_a_report(
    secret: str, scenario: dict[str, str], ambient: dict[str, str]
) -> None:
    knobs = {**scenario, "SECRET": secret}
    if scenario.get("REASON") == "unknown-kind":
        knobs["REASON"] = secret.replace(":", ";")  # an unknown turn-end kind, sent verbatim
    with mock.patch.dict(os.environ, ambient):
        run = dsh_sdk.Provider(dsh_fake(knobs)).create_run(request(secret))
        result, error = await run_to_end(run)
    check_reported(secret, run, result, error)
    for value in ambient.values():
        check_reported(value, run, result, error)
    assert_quiescent(run)


# -- Claude Code ------------------------------------------------------------------------------


def claude_script(placement: str, secret: str) -> dict[str, Any]:
    def result(subtype: str = "success", **extra: Any) -> dict[str, Any]:
        frame = {"type": "result", "subtype": subtype, "duration_ms": 1, "duration_api_ms": 1}
        return {"emit": {**frame, "is_error": subtype != "success", "num_turns": 1, **extra}}

    said: dict[str, Any] = {"type": "assistant", "parent_tool_use_id": None, "session_id": secret}
    said["message"] = {"role": "assistant", "model": "m", "content": [{"type": "text", "text": "said"}]}
    scripts: dict[str, dict[str, Any]] = {
        "error-result": {"steps": [result("error_during_execution", result=secret, errors=[secret])]},
        "unknown-subtype": {"steps": [result(secret, result=secret)]},
        "is-error-success": {"steps": [result("success", is_error=True, result=secret, session_id=secret)]},
        "denials": {"steps": [result("error_max_turns", permission_denials=[{"tool_name": secret}])]},
        "api-error-message": {"steps": [{"emit": {**said, "error": secret}}, result("error_max_budget_usd")]},
        "elicitation": {
            "steps": [
                {"request": {"subtype": "elicitation", "mcp_server_name": secret, "message": secret}},
                result("error_during_execution"),
            ]
        },
        "tool-permission": {
            "steps": [
                {"request": {"subtype": "can_use_tool", "tool_name": secret, "input": {"command": secret}}},
                result("error_during_execution"),
            ]
        },
        "stderr-then-crash": {"steps": [{"emit": said}, {"stderr": secret}, {"exit": 9}]},
        "garbage-at-start": {"on_initialize": [{"raw": "{" + secret}]},
        "exit-at-start": {"on_initialize": [{"stderr": secret}, {"exit": 3}]},
    }
    return scripts[placement]


@FEW
@given(
    secret=secrets,
    placement=st.sampled_from(
        [
            "error-result",
            "unknown-subtype",
            "is-error-success",
            "denials",
            "api-error-message",
            "elicitation",
            "tool-permission",
            "stderr-then-crash",
            "garbage-at-start",
            "exit-at-start",
        ]
    ),
)
async def test_claude_code_secrets_never_reach_a_report(secret: str, placement: str, workdir: Path) -> None:
    require_module("claude_agent_sdk")
    provider = fake_claude(workdir / "claude", claude_script(placement, secret))
    run = provider.create_run(request(secret))
    result, error = await run_to_end(run)
    check_reported(secret, run, result, error)
    assert_quiescent(run)


# -- Codex --------------------------------------------------------------------------------------


@FEW
@given(secret=secrets, info=st.sampled_from(["unauthorized", "other", {"httpConnectionFailed": {}}, None]))
async def test_codex_secrets_never_reach_a_report(secret: str, info: Any, workdir: Path) -> None:
    from tests.support.codex import agent_message, standin, turn_completed

    error = {"message": secret, "codexErrorInfo": info, "additionalDetails": secret}
    script = [agent_message("kept", "final_answer"), turn_completed("failed", error=error)]
    run = standin(workdir, script=script).create_run(request(secret))
    result, failure = await run_to_end(run)
    assert result is not None
    assert result.stop_reason == "error"
    check_reported(secret, run, result, failure)
    assert_quiescent(run)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("secrets")


# -- teardown failures ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def phantom() -> Iterator[int]:
    with phantom_process() as pid:
        yield pid


@settings(max_examples=4, deadline=None, derandomize=True, database=None)
@given(secret=secrets, at=st.sampled_from(["initialize", "prompt"]))
async def test_teardown_failures_carry_no_secret(secret: str, at: str, phantom: int) -> None:
    knobs = {"ERROR_AT": at, "ERROR_TEXT": secret, "STDERR_TEXT": secret}
    config = acp_child(knobs, dispose_eof_grace_ms=50, dispose_grace_ms=50)
    with mock.patch("supervisor.process._managed.DEFAULT_KILL_WAIT_SECONDS", 0.1):
        run = AcpRun(RunContext("acp", config, request(secret), tree=UnkillableTree(phantom)))
        result, error = await run_to_end(run)
    assert isinstance(error, TeardownFailed | StartFailed)
    check_reported(secret, run, result, error)
    assert run.quiescent is False
    # The child exits 0 on EOF, unless a loaded machine let the 50 ms EOF grace run out first
    # and SIGTERM ended it: the line carries whichever exit was observed.
    facts = run.exit_facts
    assert facts in (ExitFacts(exit_code=0, signal=None), ExitFacts(exit_code=None, signal="SIGTERM"))
    tail = f"exit code: {facts.exit_code}" if facts.exit_code is not None else f"signal: {facts.signal}"
    teardown = f"Subagent failure (provider: ACP; stage: teardown; category: process-exit; {tail})"
    assert str(error).endswith(teardown)


# -- the CLI's JSON -------------------------------------------------------------------------------

ACP_ARGV = [PYTHON, "-I", str(CHILDREN / "acp_child.py")]
CLI_PLACEMENTS = ["ERROR_AT=prompt", "STOP", "ERROR_AT=initialize", "STDERR_TEXT"]


@settings(max_examples=4, deadline=None, derandomize=True, database=None)
@given(
    secret=secrets,
    placement=st.sampled_from(CLI_PLACEMENTS),
    ambient=st.dictionaries(scrubbed_names, secrets, min_size=1, max_size=2),
)
def test_cli_json_carries_no_secret(
    secret: str, placement: str, ambient: dict[str, str], workdir: Path
) -> None:
    knobs = {"ECHO_ENV": ",".join(ambient), "TEXT": ""}
    if placement.startswith("ERROR_AT="):
        knobs.update(ERROR_AT=placement.removeprefix("ERROR_AT="), ERROR_TEXT=secret)
    elif placement == "STOP":
        knobs.update(STOP=secret)
    else:
        knobs.update(STDERR_TEXT=secret, EXIT_AT="prompt")
    args = [arg for name, value in knobs.items() for arg in ("--env", f"ACP_CHILD_{name}={value}")]
    proc = subprocess.run(
        [PYTHON, "-m", "supervisor.cli", "run", "--json", *args, f"task {secret}", "--", *ACP_ARGV],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **ambient},
    )
    assert proc.returncode == 1, proc.stderr
    document = json.loads(proc.stdout)
    for value in (secret, *ambient.values()):
        assert value not in proc.stdout
        assert value not in proc.stderr
    assert_bounded(document["diagnostic"])
    assert_closed(document["diagnostic"])
    if document["started"]:
        assert document["output"] == "".join(f"{name} unset\n" for name in ambient)
    assert document["quiescent"] is True
