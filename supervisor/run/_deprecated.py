"""What a provider written against an earlier release may still say, and when it stops.

Each deprecation keeps working for one release with a :class:`DeprecationWarning` that
names the new spelling and the release that removes the old one (``docs/migration.md``
lists them all).  This module is the one place they live, so removing them in
:data:`REMOVED_IN` is deleting it and its two call sites.
"""

from __future__ import annotations

import warnings
from typing import Any

REMOVED_IN = "0.5"
"""The release that removes every deprecation listed here."""

OLD_HOOKS: dict[str, str] = {
    "_start": "handshake",
    "_drive": "drive",
    "_output": "partial_output",
    "_remote_cancel": "remote_cancel",
    "_before_ladder": "before_ladder",
    "_after_ladder": "after_ladder",
    "_teardown_facts": "teardown_facts",
}
"""0.2's hook names of ``ProviderRun`` -> the names since 0.3."""


def adopt_old_hooks(cls: type[Any]) -> None:
    """Let a run class written for 0.2 (hooks ``_start``, ``_drive``, ``_output``, ...)
    fill in the hooks of today: each old hook the class defines, and whose new name it
    does not define itself, becomes the new hook, with a warning at the old hook's line.

    Called from ``ProviderRun.__init_subclass__``, which runs before ``ABCMeta`` counts the
    abstract methods, so a 0.2 run class is concrete again.
    """
    for old, new in OLD_HOOKS.items():
        hook = cls.__dict__.get(old)
        if hook is None or new in cls.__dict__:
            continue
        code = getattr(hook, "__code__", None)
        warnings.warn_explicit(
            f"{cls.__qualname__}.{old}() is the 0.2 name of the provider hook {new}(): "
            f"rename it {new}() (the old name is removed in {REMOVED_IN})",
            DeprecationWarning,
            filename=code.co_filename if code is not None else "<unknown>",
            lineno=code.co_firstlineno if code is not None else 0,
            module=cls.__module__,
        )
        setattr(cls, new, hook)


def moved_to_provider(name: str) -> None:
    """Warn that ``supervisor.<name>`` (an authors' name 0.2 exported from ``supervisor``)
    lives in ``supervisor.provider`` now: once per name and process, at its first read.

    ``from supervisor import X`` reads ``supervisor.X`` twice (the import system first asks
    ``hasattr(supervisor, "X")``: is X a submodule to import?, then the statement reads the
    name); a second warning from one statement, or one per line that uses the name, tells
    nothing new.  The first read's warning points at the caller's line either way: counting
    ``stacklevel``, :mod:`warnings` passes over the import system's own frames.  A warning
    turned into an error (``-W error``) is raised again at the next read."""
    if name in _WARNED:
        return
    _WARNED.add(name)
    try:
        warnings.warn(
            f"supervisor.{name} is a provider author's name: import it from supervisor.provider "
            f"(importing it from supervisor is removed in {REMOVED_IN})",
            DeprecationWarning,
            stacklevel=3,
        )
    except BaseException:
        _WARNED.discard(name)
        raise


_WARNED: set[str] = set()
"""The moved names this process has warned about."""
