"""The warm child's prompt gate: it blocks its own placeholder, first and only; a CLI that
took the placeholder as a turn anyway has its warm child ended (the scripted fake CLI)."""

from __future__ import annotations

from typing import Any

import pytest
from claude_agent_sdk import ResultMessage

from supervisor import Registry
from supervisor.providers.claude_code._warm_prompt import BLOCK_REASON, PromptGate, taken_without_a_turn
from tests.claude_code.conftest import FakeCli, result_message

pytestmark = pytest.mark.anyio

BLOCK = {"decision": "block", "reason": BLOCK_REASON}


async def asked(gate: PromptGate, prompt: object) -> Any:
    return await gate.check({"hook_event_name": "UserPromptSubmit", "prompt": prompt}, None, {"signal": None})


async def test_the_gate_blocks_its_placeholder_when_it_is_the_first_prompt_and_passes_the_rest() -> None:
    gate = PromptGate()
    assert await asked(gate, gate.text) == BLOCK
    assert await asked(gate, "the task") == {}
    assert await asked(gate, gate.text) == {}  # a later prompt, whatever its text, is a task's


async def test_a_first_prompt_that_is_not_the_placeholder_passes_and_opens_the_gate_for_good() -> None:
    gate = PromptGate()
    assert await asked(gate, "the task") == {}
    assert await asked(gate, gate.text) == {}
    assert await asked(PromptGate(), None) == {}


def test_each_gate_has_a_placeholder_of_its_own() -> None:
    first, second = PromptGate(), PromptGate()
    assert first.text != second.text
    assert first.text.startswith("(warm child setup ")


def test_the_gate_fails_closed() -> None:
    (matcher,) = PromptGate().hooks()["UserPromptSubmit"]
    assert matcher.on_failure == "block"


def result(num_turns: int, *, is_error: bool = False, cost: float | None = 0) -> ResultMessage:
    return ResultMessage(
        subtype="success",
        duration_ms=1,
        duration_api_ms=0,
        is_error=is_error,
        num_turns=num_turns,
        session_id="s",
        total_cost_usd=cost,
    )


def test_only_a_result_of_no_turn_no_error_and_no_cost_is_a_dropped_placeholder() -> None:
    assert taken_without_a_turn(result(0))
    assert taken_without_a_turn(result(0, cost=None))
    assert not taken_without_a_turn(result(1))
    assert not taken_without_a_turn(result(0, is_error=True))
    assert not taken_without_a_turn(result(0, cost=0.0002))


async def test_a_warm_child_whose_cli_took_its_placeholder_as_a_turn_is_ended(fake_cli: FakeCli) -> None:
    """The fake asks no hook and answers the placeholder with a turn: the warm-up reads that
    result (it is never a run's) and ends the CLI's input, so the child dies and is never
    handed out with that turn in its session."""
    script = {
        "initialize_extra": {"hook_on_failure_supported": True, "hooks_applied": True},
        "steps": [{"emit": result_message(result="a turn", num_turns=1, total_cost_usd=0.01)}],
    }
    registry = Registry()
    registry.register(fake_cli.provider(script))
    async with registry:
        await registry.prestart("claude-code", 1, cwd=fake_cli.work)
        assert fake_cli.seen("eof") != []  # its input ended after its one prompt, before it was ready
    (prompt, *_) = fake_cli.seen("prompt")
    assert prompt.startswith("(warm child setup ")
