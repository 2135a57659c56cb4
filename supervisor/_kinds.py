"""Provider kinds, found through the ``subagent_supervisor.providers`` entry-point group.

A kind is registered by the distribution that ships it, exactly the same way for the
four built-in kinds as for a third party::

    [project.entry-points."subagent_supervisor.providers"]
    my-agent = "my_agent_provider:KIND"
    needs-sdk = "my_agent_provider.sdk:KIND [sdk]"   # needs an extra

The entry point names a :class:`ProviderKind`: the kind's TOML keys (``config``), how
to build a provider from them (``provider``), its closed vocabulary, the capabilities
it offers, its charts (``subagents diagrams`` draws them), optionally a readiness
check (``subagents doctor`` runs it) and a keyless example agent.  Every front-end
loops over the installed kinds; none names one.  Listing kinds reads only the installed distributions'
metadata; a kind's module is imported when that kind is first used, so an optional
SDK (or a slow import) is paid for only by the runs that need it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint
from typing import Any, Generic, TypeVar

from machines import Lifecycle, Vocabulary
from supervisor._config import ProviderConfig
from supervisor._errors import NoProvider, ProviderUnusable
from supervisor._handle import Provider
from supervisor._public import home
from supervisor._seam import NO_CAPABILITIES, Capabilities
from supervisor._unusable import distribution_text, unusable
from supervisor._version import DISTRIBUTION
from supervisor.common._entry_points import group_entry_points, normalize, normalized_name
from supervisor.common._logging import raw_failure

log = logging.getLogger("supervisor")

PROVIDERS_GROUP = "subagent_supervisor.providers"
"""The entry-point group every provider kind is registered in."""

ConfigT = TypeVar("ConfigT", bound=ProviderConfig)


@dataclass(frozen=True, slots=True)
class Readiness:
    """A kind's answer to ``subagents doctor``: whether what it needs is here.

    ``detail`` is one line for a person: what was found (``some-agent-sdk 1.2.3``) or
    what to do (``install the sdk extra, or set agent_path``).
    """

    ok: bool
    detail: str


@dataclass(frozen=True)
class ProviderKind(Generic[ConfigT]):
    """What a provider distribution registers under :data:`PROVIDERS_GROUP`."""

    config: type[ConfigT]
    """The pydantic model of the kind's TOML keys (extend :class:`ProviderConfig`)."""
    provider: Callable[[ConfigT, str | None], Provider]
    """``provider(config, name)``: a provider for one configured entry; raise
    :class:`~supervisor.ConfigurationError` for a problem found before anything spawns."""
    vocabulary: Vocabulary
    """The kind's closed diagnostic vocabulary (its label and stages)."""
    capabilities: Capabilities = NO_CAPABILITIES
    example: Callable[[], ConfigT] | None = None
    """A config that runs a built-in, keyless example agent (the CLI runs one when it is
    given neither a config file nor a command), or None when the kind ships no example."""
    charts: tuple[type[Lifecycle], ...] = ()
    """The kind's charts, the run's lifecycle first (``subagents diagrams`` draws them;
    its stages must be the vocabulary's)."""
    ready: Callable[[], Readiness] | None = None
    """A readiness check for ``subagents doctor`` (its SDK, its binary): cheap, no run."""
    gen_ai_provider: str | None = None
    """Telemetry's ``gen_ai.provider.name`` for the kind's runs (the GenAI conventions'
    well-known values: ``anthropic``, ``openai``, ...); None: the kind's own name."""

    def __post_init__(self) -> None:
        if self.charts and self.vocabulary.stages != self.charts[0].STAGES:
            raise ValueError(
                f"{self.vocabulary.label}: the first chart's stages are not the vocabulary's "
                "(read the vocabulary's stages from the chart: stages=Chart.STAGES)"
            )


@dataclass(frozen=True)
class InstalledKind:
    """One kind as the installed metadata declares it; :meth:`load` imports it."""

    name: str
    entry_point: EntryPoint

    @property
    def distribution(self) -> str | None:
        dist = self.entry_point.dist
        return None if dist is None else dist.name

    @property
    def extra(self) -> str | None:
        """The extra of its distribution the kind needs (``name = "mod:KIND [extra]"``)."""
        # ``EntryPoint.extras`` splits names at ``-``; read the declared value instead.
        _, bracket, rest = self.entry_point.value.partition("[")
        names = [n.strip() for n in rest.rstrip("] ").split(",") if n.strip()] if bracket else []
        return names[0] if names else None

    def load(self) -> ProviderKind[Any]:
        """The kind, imported; :class:`~supervisor.ProviderUnusable` (one line naming the
        distribution) when its module does not import or names no :class:`ProviderKind`."""
        what = f'provider kind "{self.name}"'
        try:
            loaded = self.entry_point.load()
        except Exception as exc:  # a plug-in's import error (or a warning made an error)
            raise unusable(what, distribution_text(self.entry_point.dist), "importing it", exc) from exc
        if not isinstance(loaded, ProviderKind):
            where = distribution_text(self.entry_point.dist)
            raise ProviderUnusable(f"{what}{where} cannot be used: its entry point names no ProviderKind")
        return loaded


def _discover() -> dict[str, InstalledKind]:
    """This distribution's kinds first, then the others; within each, the kinds that
    need no extra first, then by name.  A name registered twice keeps the first.  Only the
    distributions that declare the group are parsed (see ``group_entry_points``)."""
    own_name = normalize(DISTRIBUTION)

    def order(point: EntryPoint) -> tuple[bool, bool, str]:
        own = point.dist is not None and normalized_name(point.dist) == own_name
        return (not own, "[" in point.value, point.name)

    found: dict[str, InstalledKind] = {}
    for point in sorted(group_entry_points(PROVIDERS_GROUP), key=order):
        found.setdefault(point.name, InstalledKind(point.name, point))
    return found


@functools.cache
def installed_kinds() -> dict[str, InstalledKind]:
    """Every installed provider kind by name (read once per process)."""
    return _discover()


def kind(name: str) -> ProviderKind[Any]:
    """The installed kind ``name``, loaded; :class:`~supervisor.NoProvider` when none is."""
    try:
        installed = installed_kinds()[name]
    except KeyError:
        raise NoProvider(f'no subagent provider kind "{name}" is installed') from None
    return installed.load()


def create_provider(name: str, config: ProviderConfig, provider_name: str | None = None) -> Provider:
    """A provider of kind ``name`` for ``config`` (the embedding API's one-liner)."""
    return kind(name).provider(config, provider_name)


def loaded_kinds() -> Iterator[tuple[str, ProviderKind[Any] | None]]:
    """Every installed kind, loaded, in order; None for one whose module cannot be
    imported here (a broken or half-installed distribution: the front-ends say so)."""
    for name, installed in installed_kinds().items():
        try:
            loaded: ProviderKind[Any] | None = installed.load()
        except Exception as exc:  # a third party's import error must not take a front-end down
            log.warning("provider kind %s could not be loaded", name)
            raw_failure("provider kind %s: the raw load failure", name, exc=exc)
            loaded = None
        yield name, loaded


_KIND_NAMES: dict[int, tuple[Vocabulary, str, str]] = {}
"""id -> (the vocabulary, kept alive; its kind's name; its ``gen_ai.provider.name``)."""


def _kind_facts(vocabulary: Vocabulary) -> tuple[Vocabulary, str, str]:
    known = _KIND_NAMES.get(id(vocabulary))
    if known is not None and known[0] is vocabulary:
        return known
    found = next(((n, k) for n, k in loaded_kinds() if k is not None and k.vocabulary is vocabulary), None)
    if found is None:
        facts = (vocabulary, "unknown", "unknown")
    else:
        name, loaded = found
        facts = (vocabulary, name, loaded.gen_ai_provider or name)
    _KIND_NAMES[id(vocabulary)] = facts
    return facts


def kind_name(vocabulary: Vocabulary) -> str:
    """The name of the installed kind whose vocabulary this is (``unknown`` when none is);
    telemetry's ``subagent.kind``, looked up once per vocabulary when a span is made."""
    return _kind_facts(vocabulary)[1]


def kind_gen_ai_provider(vocabulary: Vocabulary) -> str:
    """Telemetry's ``gen_ai.provider.name`` for runs of the kind whose vocabulary this is:
    what the kind declares (:attr:`ProviderKind.gen_ai_provider`), else the kind's name
    (``unknown`` when no installed kind has this vocabulary)."""
    return _kind_facts(vocabulary)[2]


def example_kind() -> tuple[str, ProviderKind[Any]] | None:
    """The kind whose keyless example agent runs when nothing is configured: the first
    installed kind that ships one (this distribution's kinds come first)."""
    for name, loaded in loaded_kinds():
        if loaded is not None and loaded.example is not None:
            return name, loaded
    return None


def example_config(example: ProviderKind[Any], **overrides: Any) -> ProviderConfig:
    """The kind's example config with ``overrides`` laid on top (validated again)."""
    assert example.example is not None
    keys = example.example().model_dump(exclude_unset=True)
    config: ProviderConfig = example.config.model_validate({**keys, **overrides})
    return config


home("supervisor", InstalledKind, installed_kinds, create_provider)
home("supervisor.provider", ProviderKind, Readiness)
