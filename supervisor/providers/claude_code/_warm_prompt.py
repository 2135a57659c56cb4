"""A warm CLI's first prompt, taken ahead and stopped by its own hook before any model turn.

A Claude Code CLI spends a session's first user message on work it does once: reading
the message off its input queue, its first attachments (the skills list, the
environment), its prompt hooks, the code of that path run for the first time.  A warm
child (no task yet) is sent one placeholder prompt that a ``UserPromptSubmit`` hook of
its own blocks: the CLI does that intake, then drops the prompt (it keeps nothing of it
in the conversation, sends the model nothing, counts no turn) and ends it with a result
message of no turn, which the warm-up reads.  The run's task is then the session's first
user message, with its attachments, as on a cold start.

The gate blocks only the first prompt it sees, and only when that prompt is the
placeholder (a per-child text with a random part): every other prompt, the run's task
and later turns, goes on as if no hook existed.  The hook is registered as failing
closed (``on_failure="block"``): a placeholder whose check failed is never sent on.
The CLI asks the hook at every user message of the session; the supervised transport
answers those asks itself, as it reads them (one hop, not the SDK's task per request).
"""

from __future__ import annotations

import secrets
from typing import Any

from claude_agent_sdk import HookContext, HookMatcher, ResultMessage
from claude_agent_sdk.types import HookEvent, SyncHookJSONOutput

BLOCK_REASON = "warm child setup (no task yet)"


def placeholder() -> str:
    """A warm child's placeholder prompt: fixed words and a random part no task carries."""
    return f"(warm child setup {secrets.token_hex(8)}: no task yet)"


def taken_without_a_turn(message: ResultMessage) -> bool:
    """Whether a result message ends a prompt the CLI took in without any model turn."""
    return message.num_turns == 0 and not message.is_error and not message.total_cost_usd


class PromptGate:
    """The ``UserPromptSubmit`` hook of a warm child: blocks its placeholder, once."""

    def __init__(self) -> None:
        self.text = placeholder()
        self._seen = False  # a prompt has reached the gate

    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        return {"UserPromptSubmit": [HookMatcher(hooks=[self.check], on_failure="block")]}

    async def check(
        self, hook_input: Any, tool_use_id: str | None, context: HookContext
    ) -> SyncHookJSONOutput:
        """The SDK's hook callback (the transport answers the CLI's asks itself, with
        :meth:`decide`: registering it is what makes the CLI ask)."""
        return self.decide(hook_input)

    def decide(self, hook_input: object) -> SyncHookJSONOutput:
        first, self._seen = not self._seen, True
        prompt = hook_input.get("prompt") if isinstance(hook_input, dict) else None
        if first and prompt == self.text:
            return {"decision": "block", "reason": BLOCK_REASON}
        return {}
