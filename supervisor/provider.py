"""The provider authors' surface: everything needed to write a provider kind.

Callers (who run subagents) import from :mod:`supervisor`; authors (who add a kind of
agent, in a distribution of their own) import from here, the way anyio's users and
its backend authors meet in ``anyio`` and ``anyio.abc``.  The four built-in kinds are
written with the same names.

A kind is five things, registered as one :class:`ProviderKind` under the entry-point
group :data:`PROVIDERS_GROUP`:

* a **chart**: the run's stages and the typed facts that move it, built from a
  transition table with :func:`build_lifecycle` and :func:`common_rows` (the rows every
  kind shares: rollback, cancellation, dispose, late facts); its target for a settled
  run is :data:`SETTLED`;
* a closed **vocabulary** (:class:`Vocabulary`, with :class:`ClosedField`,
  :class:`IntegerField`, :class:`DecisionField`): everything its diagnostic lines may
  say.  It must name the categories the base run itself emits (``unknown`` and its
  ``start_timeout_category``), or it is refused when it is built;
* a **config** model extending :class:`ProviderConfig` (or :class:`CommandConfig` for a
  child that is a configured command): the kind's TOML keys;
* a **run** extending :class:`ProviderRun`, built from one :class:`RunContext`, that
  fills in the hooks ``handshake()``, ``drive()`` and ``partial_output()`` (and, if the
  protocol has them, ``remote_cancel()``, ``before_ladder()``, ``after_ladder()``,
  ``teardown_facts()``).  Failures are closed facts: ``self.failure(category)`` builds
  a :class:`FailureFacts` checked against the vocabulary; raise :class:`StepFailed`
  with them, before or after publication.  ``drive()`` runs one turn: the turn's text is
  ``self.task`` (the request's task in turn 1);
* for a kind that **converses** (``Capabilities(conversation=True)`` on its provider and
  kind): a chart built with ``common_rows(..., turn_stage=<the stage a later turn
  enters>)``, which adds the turn loop (``settled -> idle -> turn stage``), and the run's
  hooks ``begin_turn()`` (reset per-turn state before a later turn), ``session_usable()``
  (may the session take another turn after this one?) and ``session_lost()`` (return
  once an idle session can take no more).  The base run does the rest: one turn at a
  time, the idle timeout, cancelled turns winding down, ending the conversation;
* **progress** (what ``run.progress`` and ``run.watch()`` show callers): as the
  protocol reports it, the run calls ``self.note_tool_call(call_id, kind, status)``,
  ``self.note_plan(statuses)``, ``self.note_permission(decision)``,
  ``self.note_answer_bytes(n)`` and ``self.note_usage(usage)``: closed values only
  (kinds from the run's ``tool_kinds``, default :data:`TOOL_KINDS`, anything else
  counted as ``other``; statuses from :data:`TOOL_CALL_STATUSES` and
  :data:`PLAN_STATUSES`, decisions from :data:`PERMISSION_DECISIONS`, anything else
  dropped), never a title, a path, a command or any other child text.  Each note is a
  few dictionary operations: call them for every update the child sends;
* a **provider** (the :class:`Provider` protocol: ``name``, ``capabilities``,
  ``inherits_parent_context``, ``create_run``), optionally a **readiness check** for
  ``subagents doctor`` (:class:`Readiness`) and an **example** config.

The base run keeps every promise of the seam for every kind, whatever the hooks do:
publication, abort and cancellation, one settlement, ``max_output_bytes`` on the
result's output, the 4096-byte diagnostic bound, rollback and dispose over the whole
process tree, the audit trail, telemetry; a hook or a task on the run's task group that
raises settles the run as an ``unknown`` failure and the tree is taken down before any
error goes further.

Helpers for the child itself: :class:`ManagedProcess` (spawned with
``ProviderRun.spawn_child`` from ``ProviderRun.spawn_spec``), :class:`LineReader` (the
frame-bounded line reader), :func:`child_environment` (the scrubbed environment), and
the one UTF-8 text cap (:class:`CappedText`, :func:`cap_text`, :func:`utf8_prefix`).
A kind that sets the child's environment itself keeps :data:`RUN_TAG_VARIABLE` in it (the
supervisor finds a run's strays by it); a reader of its own bounds a frame at
:data:`DEFAULT_MAX_FRAME_BYTES` unless configured otherwise.  A provider that takes a
``tree`` (a :class:`Containment`) passes it to its :class:`RunContext`: tests model a tree
that survives SIGKILL with it.

Config helpers: :func:`resolve_executable` (a configured program path, relative to the
config's folder, checked executable) and :func:`check_timer_ms` (the check of every
``*_ms`` key) for a kind's own keys, in pydantic field validators.

Where the child's text goes: never into a record at INFO or above.  :func:`raw_failure`
logs a failure whose text may quote the child at DEBUG on ``supervisor.child``; a protocol
SDK that logs what the child sent is made safe with :func:`route_sdk_logging` (once, on
the SDK's modules) and :func:`sdk_logging_routed` (around the connection: the tasks the SDK
starts inside log to ``supervisor.child`` at DEBUG; any other use of the SDK in the process
keeps its own logging).  :func:`first_of` waits for whichever of several things happens
first (``session_lost()``: the child exits *or* its wire ends).

The framing and JSON-RPC tools the built-in clients use, the same objects: a frame is
read with :class:`LineReader` (at most ``max_frame_bytes``, else :class:`FrameTooLarge`)
and parsed with :func:`parse_frame` (invalid UTF-8 becomes U+FFFD, as
:func:`decode_frame` does for a text line; a frame nested deeper than
:data:`MAX_FRAME_DEPTH` raises :class:`FrameTooDeep`, which a kind reports as
``<stage>/protocol``); :func:`encode_frame` writes one compact JSON line and
:class:`FrameWriter` one frame at a time; :class:`PendingRequests` of :class:`Pending`
match answers to requests by id (:data:`RequestId`, :func:`is_request_id`);
:class:`CloseOnce` ends a connection once with its first reason; and
:class:`InboundRequests` bounds the child's unanswered requests
(:data:`DEFAULT_MAX_INFLIGHT_REQUESTS`).  ``docs/authors.md`` shows them at work.
"""

from __future__ import annotations

from machines import SETTLED as SETTLED
from machines import ClosedField as ClosedField
from machines import CommonEvent as CommonEvent
from machines import DecisionField as DecisionField
from machines import IntegerField as IntegerField
from machines import Lifecycle as Lifecycle
from machines import Transition as Transition
from machines import TransitionSink as TransitionSink
from machines import Vocabulary as Vocabulary
from machines import build_lifecycle as build_lifecycle
from machines import common_rows as common_rows
from supervisor._config import CommandConfig as CommandConfig
from supervisor._config import ProviderConfig as ProviderConfig
from supervisor._config import check_timer_ms as check_timer_ms
from supervisor._config import config_digest as config_digest
from supervisor._config import resolve_executable as resolve_executable
from supervisor._diagnostic import MAX_DIAGNOSTIC_BYTES as MAX_DIAGNOSTIC_BYTES
from supervisor._diagnostic import FailureFacts as FailureFacts
from supervisor._diagnostic import bound_diagnostic as bound_diagnostic
from supervisor._diagnostic import join_lines as join_lines
from supervisor._errors import ConfigurationError as ConfigurationError
from supervisor._handle import Provider as Provider
from supervisor._handle import Run as Run
from supervisor._kinds import PROVIDERS_GROUP as PROVIDERS_GROUP
from supervisor._kinds import ProviderKind as ProviderKind
from supervisor._kinds import Readiness as Readiness
from supervisor._seam import NO_CAPABILITIES as NO_CAPABILITIES
from supervisor._seam import PERMISSION_DECISIONS as PERMISSION_DECISIONS
from supervisor._seam import PLAN_STATUSES as PLAN_STATUSES
from supervisor._seam import TOOL_CALL_STATUSES as TOOL_CALL_STATUSES
from supervisor._seam import TOOL_KINDS as TOOL_KINDS
from supervisor._seam import Capabilities as Capabilities
from supervisor._seam import SessionPlan as SessionPlan
from supervisor._seam import StopReason as StopReason
from supervisor._seam import SubagentRequest as SubagentRequest
from supervisor._seam import SubagentResult as SubagentResult
from supervisor._seam import Usage as Usage
from supervisor.common._logging import raw_failure as raw_failure
from supervisor.common._sdk_logging import route_sdk_logging as route_sdk_logging
from supervisor.common._sdk_logging import sdk_logging_routed as sdk_logging_routed
from supervisor.common._text import TRUNCATED_MARK as TRUNCATED_MARK
from supervisor.common._text import CappedText as CappedText
from supervisor.common._text import cap_text as cap_text
from supervisor.common._text import utf8_prefix as utf8_prefix
from supervisor.common._waits import first_of as first_of
from supervisor.process import DEFAULT_MAX_FRAME_BYTES as DEFAULT_MAX_FRAME_BYTES
from supervisor.process import RUN_TAG_VARIABLE as RUN_TAG_VARIABLE
from supervisor.process import Containment as Containment
from supervisor.process import ExitFacts as ExitFacts
from supervisor.process import FrameTooLarge as FrameTooLarge
from supervisor.process import LineReader as LineReader
from supervisor.process import ManagedProcess as ManagedProcess
from supervisor.process import SpawnFailed as SpawnFailed
from supervisor.process import SpawnSpec as SpawnSpec
from supervisor.process import StderrMode as StderrMode
from supervisor.process import TeardownReport as TeardownReport
from supervisor.process import child_environment as child_environment
from supervisor.run._base import ProviderRun as ProviderRun
from supervisor.run._base import RunContext as RunContext
from supervisor.run._resume import NotResumable as NotResumable
from supervisor.run._state import StepFailed as StepFailed
from supervisor.wire import DEFAULT_MAX_INFLIGHT_REQUESTS as DEFAULT_MAX_INFLIGHT_REQUESTS
from supervisor.wire import MAX_FRAME_DEPTH as MAX_FRAME_DEPTH
from supervisor.wire import CloseOnce as CloseOnce
from supervisor.wire import FrameTooDeep as FrameTooDeep
from supervisor.wire import FrameWriter as FrameWriter
from supervisor.wire import InboundRequests as InboundRequests
from supervisor.wire import Pending as Pending
from supervisor.wire import PendingRequests as PendingRequests
from supervisor.wire import RequestId as RequestId
from supervisor.wire import decode_frame as decode_frame
from supervisor.wire import encode_frame as encode_frame
from supervisor.wire import is_request_id as is_request_id
from supervisor.wire import parse_frame as parse_frame

__all__ = (
    "DEFAULT_MAX_FRAME_BYTES",
    "DEFAULT_MAX_INFLIGHT_REQUESTS",
    "MAX_DIAGNOSTIC_BYTES",
    "MAX_FRAME_DEPTH",
    "NO_CAPABILITIES",
    "PERMISSION_DECISIONS",
    "PLAN_STATUSES",
    "PROVIDERS_GROUP",
    "RUN_TAG_VARIABLE",
    "SETTLED",
    "TOOL_CALL_STATUSES",
    "TOOL_KINDS",
    "TRUNCATED_MARK",
    "Capabilities",
    "CappedText",
    "CloseOnce",
    "ClosedField",
    "CommandConfig",
    "CommonEvent",
    "ConfigurationError",
    "Containment",
    "DecisionField",
    "ExitFacts",
    "FailureFacts",
    "FrameTooDeep",
    "FrameTooLarge",
    "FrameWriter",
    "InboundRequests",
    "IntegerField",
    "Lifecycle",
    "LineReader",
    "ManagedProcess",
    "NotResumable",
    "Pending",
    "PendingRequests",
    "Provider",
    "ProviderConfig",
    "ProviderKind",
    "ProviderRun",
    "Readiness",
    "RequestId",
    "Run",
    "RunContext",
    "SessionPlan",
    "SpawnFailed",
    "SpawnSpec",
    "StderrMode",
    "StepFailed",
    "StopReason",
    "SubagentRequest",
    "SubagentResult",
    "TeardownReport",
    "Transition",
    "TransitionSink",
    "Usage",
    "Vocabulary",
    "bound_diagnostic",
    "build_lifecycle",
    "cap_text",
    "check_timer_ms",
    "child_environment",
    "common_rows",
    "config_digest",
    "decode_frame",
    "encode_frame",
    "first_of",
    "is_request_id",
    "join_lines",
    "parse_frame",
    "raw_failure",
    "resolve_executable",
    "route_sdk_logging",
    "sdk_logging_routed",
    "utf8_prefix",
)
