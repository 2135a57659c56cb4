"""A plug-in that cannot be used says so in one line naming its distribution.

A third party's module that does not import, an entry point that names no kind, a run
class whose hooks are left abstract: each is :class:`~supervisor.ProviderUnusable`,
``provider kind "x" (distribution x-provider 1.0) cannot be used: <doing> raised
<Type>: <first line>``, never a traceback on a user's terminal.  The raw error goes to
the host log (``raw_failure``) and ``__cause__``.
"""

from __future__ import annotations

import logging
from importlib.metadata import Distribution, distribution, packages_distributions

from supervisor._errors import ProviderUnusable
from supervisor.common._logging import raw_failure

log = logging.getLogger("supervisor")


def distribution_text(dist: Distribution | None) -> str:
    if dist is None:
        return ""
    return f" (distribution {dist.name} {dist.version})"


def distribution_of(obj: object) -> str:
    """`` (distribution <name> <version>)`` for the installed distribution that ships
    ``obj``'s module, or an empty string (a provider defined in a script, or unknown)."""
    module = getattr(type(obj), "__module__", "") or ""
    top = module.partition(".")[0]
    try:
        names = packages_distributions().get(top, [])
        return distribution_text(distribution(names[0])) if names else ""
    except Exception:  # metadata is advisory here: the message goes without it
        return ""


def unusable(what: str, where: str, doing: str, exc: BaseException) -> ProviderUnusable:
    """One line: ``<what><where> cannot be used: <doing> raised <Type>: <first line>``.

    The text of ``exc`` is the plug-in's own code speaking (an import error, an abstract
    class), never a child's; it is cut to one line of at most 200 characters."""
    log.warning("%s%s cannot be used", what, where)
    raw_failure("%s: the raw failure", what, exc=exc)
    first = (str(exc).splitlines() or [""])[0]
    text = first if len(first) <= 200 else first[:199] + "…"
    reason = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return ProviderUnusable(f"{what}{where} cannot be used: {doing} raised {reason}")
