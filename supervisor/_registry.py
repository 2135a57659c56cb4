"""The provider registry and the one way to get a run: ``async with registry.run(...)``."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup

from machines import TransitionSink
from supervisor._abort import AbortSignal
from supervisor._errors import (
    DuplicateProvider,
    InvalidRequest,
    NoProvider,
    SubagentError,
    UnsupportedCapability,
)
from supervisor._handle import Provider, Run
from supervisor._public import home
from supervisor._seam import SessionPlan, SubagentRequest
from supervisor._unusable import distribution_of, unusable
from supervisor.journal import Journal
from supervisor.journal import _switch as _journal
from supervisor.run._resume import check_plan, not_resumable

if TYPE_CHECKING:
    from supervisor.run._warm import WarmKey, WarmPool

log = logging.getLogger("supervisor")

# (request field, capability field, name in the error text), in the order they are checked.
_CAPABILITY_CHECKS = (
    ("output_schema", "output_schema", "outputSchema"),
    ("max_depth", "depth_limit", "depthLimit"),
    ("tool_filter", "tool_filter", "toolFilter"),
    ("persona", "persona", "persona"),
    ("agent_options", "agent_options", "agentOptions"),
)


def require_asyncio() -> None:
    """Runs need asyncio itself, not just anyio: the process layer subclasses asyncio's
    ``SubprocessStreamProtocol`` and builds its ``Process`` by hand, and the ACP SDK
    speaks over asyncio streams.  Say so plainly instead of failing deep inside."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise InvalidRequest("subagent-supervisor runs on anyio's asyncio backend only") from None


async def _start(run: Run, task_group: TaskGroup, abort: AbortSignal | None, conversation: bool) -> None:
    """``run.start``; a one-shot start passes no ``conversation`` (a third-party run
    written before conversations existed takes none)."""
    if conversation:
        await run.start(task_group, abort, conversation=True)
    else:
        await run.start(task_group, abort)


def build_run(provider: Provider, request: SubagentRequest, **options: Any) -> Run:
    """``provider.create_run(request, **options)``, the one way every front-end builds a
    run: a plug-in whose run cannot be built (a run class with hooks left abstract, a
    constructor that raises) is :class:`ProviderUnusable`, one line naming its
    distribution, before anything spawns."""
    try:
        return provider.create_run(request, **options)
    except SubagentError:
        raise
    except Exception as exc:
        what = f'subagent provider "{provider.name}"'
        raise unusable(what, distribution_of(provider), "creating a run", exc) from exc


def _create(
    provider: Provider, request: SubagentRequest, trace: TransitionSink | None, session: SessionPlan | None
) -> Run:
    """``provider.create_run``, with the session plan only when there is one and the
    provider takes it: a provider of 0.3 takes no such keyword, and a plan without
    ``resume`` (a run id, ``keep``) is then not passed (the run mints its own id: read
    ``run.id``).  A plan with ``resume`` only reaches a kind that declares ``resume``."""
    if session is None or (session.resume is None and not _takes_session(provider)):
        return build_run(provider, request, trace=trace)
    return build_run(provider, request, trace=trace, session=session)


def journaled_run(
    provider: Provider, request: SubagentRequest, *, trace: TransitionSink | None = None
) -> Run:
    """:func:`build_run` for a front-end: a run of a kind that can resume, created while
    a journal is in use, opens its session so that it can be resumed later
    (``SessionPlan(keep=True)``)."""
    return _create(provider, request, trace, _journal.keep_plan(provider))


def build_run_with_plan(provider: Provider, request: SubagentRequest, session: SessionPlan | None) -> Run:
    """:func:`build_run` with ``session`` passed only as :func:`_create` would (a warm
    child of a journaled registry is opened with ``SessionPlan(keep=True)``)."""
    return _create(provider, request, None, session)


def _takes_session(provider: Provider) -> bool:
    try:
        parameters = inspect.signature(provider.create_run).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "session" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _check_session(
    provider: Provider, request: SubagentRequest, session: SessionPlan | None, *, conversation: bool
) -> None:
    """A session plan's checks before anything spawns; a kind that cannot resume is
    ``ConversationOver`` ``not resumable`` (its label read from a run never started)."""
    if session is None:
        return
    check_plan(session, provider.capabilities, conversation=conversation)
    if session.resume is not None and not getattr(provider.capabilities, "resume", False):
        label = build_run(provider, request).vocabulary.label
        raise not_resumable(label, session.turns_before)


class Registry:
    """Providers by name.  Runs already handed out stay valid after ``unregister``.

    ``journal`` (a path, or a :class:`~supervisor.Journal`) writes every run this registry
    creates to that journal (so a conversation can be resumed by a later process); a journal
    that cannot be written says so once in the host log and the runs go on unjournaled.
    """

    def __init__(self, *, journal: Journal | str | os.PathLike[str] | None = None) -> None:
        self._providers: dict[str, Provider] = {}
        self._own_journal = journal is not None and not isinstance(journal, Journal)
        self._journal: Journal | None = (
            journal if journal is None or isinstance(journal, Journal) else Journal(journal)
        )
        self._warm: WarmPool | None = None  # made by the first prestart

    @property
    def journal(self) -> Journal | None:
        """The journal this registry's runs are written to, if any."""
        return self._journal

    async def __aenter__(self) -> Registry:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the warm children no run took (``prestart``); idempotent.  Runs already
        handed out are their callers' to dispose (this waits for them)."""
        warm = self._warm
        if warm is not None:
            await warm.aclose()
        if self._journal is not None:  # what is queued is committed (a journal opened here is closed)
            journal = self._journal
            await anyio.to_thread.run_sync(journal.close if self._own_journal else journal.flush)

    def force_kill_warm(self) -> None:
        """Skip the teardown graces of the warm children being ended (a second Ctrl-C)."""
        if self._warm is not None:
            self._warm.force_kill()

    async def prestart(self, name: str, count: int, *, cwd: str | os.PathLike[str] | None = None) -> None:
        """Keep ``count`` warm children of provider ``name`` for runs in ``cwd`` (the
        request's ``parent_cwd``; a configured ``cwd`` wins as for runs), and return once
        they are ready: spawned, handshake and session done.  A run with the same provider,
        config and resolved cwd then takes one and starts at its first prompt.

        ``count`` 0 ends them.  Bad input (a count below 0 or above the host ceiling, an
        unknown provider, a cwd that is not a directory) raises before anything spawns;
        a child that fails to start raises its ``StartFailed``.
        """
        from supervisor.run._warm import (
            WarmKey,
            WarmPool,
            _digest,
            check_count,
            check_cwd,
            unwarmable,
            warm_config,
        )

        provider = self.get(name)
        config = warm_config(provider)
        if config is None:
            raise InvalidRequest(f'subagent provider "{name}" cannot be prestarted')
        if (reason := unwarmable(config)) is not None:
            raise InvalidRequest(f'subagent provider "{name}" cannot be prestarted: {reason}')
        require_asyncio()
        resolved = check_cwd(cwd, config)
        with _journal.using(self._journal):  # journaled: the warm sessions are opened to be kept
            keep = _journal.keep_plan(provider) is not None
        key = WarmKey(name, _digest(config), resolved, keep)
        if self._warm is None:
            self._warm = WarmPool(build_run_with_plan)
        count = check_count(count, config, self._warm.kept_elsewhere(key))
        with _journal.using(self._journal):  # warm runs are journaled once taken and started
            await self._warm.prestart(key, provider, count)

    def warm_target(self, name: str, cwd: str | os.PathLike[str] | None = None) -> int:
        """How many warm children ``prestart`` keeps for provider ``name`` in ``cwd`` now
        (0 for a provider that cannot be prestarted)."""
        from supervisor.run._warm import WarmKey, _digest, check_cwd, warm_config

        config = warm_config(self.get(name))
        if config is None or self._warm is None:
            return 0
        with _journal.using(self._journal):
            keep = _journal.keep_plan(self.get(name)) is not None
        return self._warm.target(WarmKey(name, _digest(config), check_cwd(cwd, config), keep))

    async def acquire_run(
        self,
        name: str,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
        journaled: bool = False,
    ) -> Run:
        """:meth:`create_run`, except that when no warm child is ready but one of the
        same key is starting, this waits for it (it is ready no later than a cold start
        begun now).  ``journaled`` (a front-end's run): a kind that can resume opens its
        session to be resumed later when a journal is in use (``journaled_run``).
        Checks nothing: call :meth:`check` first."""
        with _journal.using(self._journal):  # the run's journal is fixed as it is handed out
            if journaled and session is None:
                session = _journal.keep_plan(self.get(name))
            key = self._warm_key(name, request, session)
            if key is not None:
                assert self._warm is not None
                run = await self._warm.claim(key, self.get(name), request, trace)
                if run is not None:
                    return run
            return self._create_run(name, request, trace, session)

    def _warm_key(self, name: str, request: SubagentRequest, session: SessionPlan | None) -> WarmKey | None:
        """The key of the warm children a run could take; None when it can take none (no
        warm children, a provider that cannot be prestarted, a plan beyond ``keep``)."""
        if self._warm is None:
            return None
        if session is not None and (session != SessionPlan(keep=True)):
            return None  # a run id or a session to resume: always a fresh child
        from supervisor.run._warm import warm_config, warm_key

        config = warm_config(self.get(name))
        if config is None:
            return None
        return warm_key(name, config, request.parent_cwd, keep=session is not None)

    def create_run(
        self,
        name: str,
        request: SubagentRequest,
        *,
        trace: TransitionSink | None = None,
        session: SessionPlan | None = None,
        journaled: bool = False,
    ) -> Run:
        """A run of provider ``name`` for ``request``, unstarted: a warm child of the same
        provider, config and cwd when one is ready (its ``start`` then publishes at once),
        else a fresh one.  A run with a session plan beyond ``keep`` is always a fresh one
        (a warm child has its own run id and a new session already).  ``journaled``: as
        for :meth:`acquire_run`.  Checks nothing: call :meth:`check` first."""
        with _journal.using(self._journal):  # the run's journal is fixed as it is built
            if journaled and session is None:
                session = _journal.keep_plan(self.get(name))
            return self._create_run(name, request, trace, session)

    def _create_run(
        self, name: str, request: SubagentRequest, trace: TransitionSink | None, session: SessionPlan | None
    ) -> Run:
        key = self._warm_key(name, request, session)
        if key is not None:
            assert self._warm is not None
            run = self._warm.take(key, self.get(name), request, trace)
            if run is not None:
                return run
        return _create(self.get(name), request, trace, session)

    def register(self, provider: Provider) -> None:
        if provider.name in self._providers:
            raise DuplicateProvider(f'a subagent provider named "{provider.name}" is already registered')
        self._providers[provider.name] = provider

    def unregister(self, name: str) -> None:
        self._providers.pop(name, None)

    def list(self) -> list[str]:
        return list(self._providers)

    def get(self, name: str) -> Provider:
        try:
            return self._providers[name]
        except KeyError:
            raise NoProvider(f'no subagent provider registered for "{name}"') from None

    def check(self, name: str, request: SubagentRequest, *, conversation: bool = False) -> Provider:
        """The checks made before anything spawns, in the contract's order (a
        conversation asked of a kind that cannot converse after the start-time options)."""
        provider = self.get(name)
        for field, capability, spelled in _CAPABILITY_CHECKS:
            if getattr(request, field) is not None and not getattr(provider.capabilities, capability):
                raise UnsupportedCapability(
                    f'subagent provider "{provider.name}" does not support the "{spelled}" capability'
                )
        if conversation and not getattr(provider.capabilities, "conversation", False):
            raise UnsupportedCapability(
                f'subagent provider "{provider.name}" does not support the "conversation" capability'
            )
        depth = request.max_depth
        if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
            raise InvalidRequest("subagent max_depth must be a non-negative integer")
        return provider

    async def start(
        self,
        name: str,
        request: SubagentRequest,
        *,
        task_group: TaskGroup,
        abort: AbortSignal | None = None,
        trace: TransitionSink | None = None,
        conversation: bool = False,
        session: SessionPlan | None = None,
    ) -> Run:
        """Lower level than :meth:`run`: the run's background work lives in ``task_group``.

        The caller must ``dispose()`` the returned run.
        """
        provider = self.check(name, request, conversation=conversation)
        _check_session(provider, request, session, conversation=conversation)
        require_asyncio()
        run = await self.acquire_run(name, request, trace=trace, session=session)
        await _start(run, task_group, abort, conversation)
        return run

    @asynccontextmanager
    async def resume(
        self,
        run_id: str,
        *,
        abort: AbortSignal | None = None,
        trace: TransitionSink | None = None,
    ) -> AsyncIterator[Run]:
        """Reopen a journaled conversation in a new child (a cold resume): the
        same provider, kind and config, in the same cwd, continuing the agent's own
        session; ``async with`` like :meth:`run`.

        The run keeps its id and is published idle without a turn: ``run.turn`` is the
        last journaled turn's number (an interrupted turn counted, and never sent again),
        the next ``send`` the one after.  Refused before anything spawns: a registry
        without a journal, or a run id it does not hold (``InvalidRequest``); a run a live
        process still holds (``InvalidRequest``); a provider no longer registered
        (``NoProvider``), of another kind or configured differently
        (``ConfigurationError``); a one-shot run, a run with no agent session id, or a
        kind that cannot resume (``ConversationOver``, reason ``not resumable``).  An
        agent that refuses the session is that ``ConversationOver`` too, after its child
        was rolled back; a start that fails for another reason is a ``StartFailed`` and
        the journal keeps the session id for another try.
        """
        from supervisor.journal._resume import plan_resume

        if self._journal is None:
            raise InvalidRequest("resuming a run needs a journal: Registry(journal=...)")
        plan = plan_resume(self._journal, run_id, lookup=self.get, probe=build_run)
        async with self.run(
            plan.provider, plan.request, abort=abort, trace=trace, conversation=True, session=plan.session
        ) as run:
            yield run

    @asynccontextmanager
    async def run(
        self,
        name: str,
        request: SubagentRequest,
        *,
        abort: AbortSignal | None = None,
        trace: TransitionSink | None = None,
        conversation: bool = False,
        session: SessionPlan | None = None,
    ) -> AsyncIterator[Run]:
        """Start and publish a run; leaving the block disposes it (shielded).

        Leaving while the run is still in flight is a local cancellation.  With
        ``conversation=True`` the child is kept after the first turn (the request's
        task) for more turns: ``await run.send(task)``.

        ``session`` plans the agent's session: ``run_id`` gives the run that id, and
        ``resume`` (with ``conversation=True``, for a kind whose capabilities declare
        ``resume``) continues that agent session in the new child instead of opening one:
        the run is published idle, without a turn (the request's task is not sent;
        ``run.turn`` is ``turns_before``, the next ``send`` the turn after).  A kind or an
        agent that cannot resume it raises ``ConversationOver`` (reason ``not
        resumable``) before any task is sent; a start that fails for another reason is a
        ``StartFailed`` as ever (the session may still be resumed later).
        """
        provider = self.check(name, request, conversation=conversation)
        _check_session(provider, request, session, conversation=conversation)
        require_asyncio()
        run = await self.acquire_run(name, request, trace=trace, session=session)
        try:
            async with anyio.create_task_group() as tg:
                await _start(run, task_group=tg, abort=abort, conversation=conversation)
                try:
                    yield run
                finally:
                    await run.dispose()
        except BaseExceptionGroup as group:
            # The task group wraps what its body raised; callers expect the error itself.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from group.exceptions[0].__cause__
            raise


home("supervisor", Registry)
