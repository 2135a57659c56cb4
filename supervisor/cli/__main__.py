"""``python -m supervisor.cli``: the ``subagents`` command."""

from supervisor.cli._main import console

console()
