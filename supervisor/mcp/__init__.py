"""``subagents mcp``: a stdio MCP server over the public API.  Importing this package
does not import the ``mcp`` SDK; :mod:`supervisor.mcp._server` does."""
