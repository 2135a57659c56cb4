"""The four built-in provider kinds.

Each kind is a package of its own (config model, run, and the vocabulary and chart in
``machines/``) and is registered through the ``subagent_supervisor.providers`` entry
point in ``pyproject.toml``, exactly like a third-party provider: nothing outside this
package names them.  Each package exposes ``KIND`` (a :class:`~supervisor.ProviderKind`).
"""
