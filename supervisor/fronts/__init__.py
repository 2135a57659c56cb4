"""What the front-ends (``subagents run`` and ``chat``, ``batch``, ``mcp``) share: one run from
start to disposal, a conversation's turn loop, and what a parent does with a result.

Nothing here is public by its own path: callers import from :mod:`supervisor`.
"""
