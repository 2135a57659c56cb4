"""Configuration models shared by every provider kind (pydantic at the boundary).

A configured ``cwd`` is resolved against an explicit base directory passed in the
validation context (``{"base_dir": Path}``; the CLI passes the config file's folder)
and validated at load.  Unknown keys are errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import types
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from supervisor._public import home
from supervisor.process import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_STDERR_TAIL_BYTES,
    Confinement,
    ConfinementUnavailable,
    ContainmentMode,
    ContainmentUnavailable,
    CwdError,
    Limits,
    StderrMode,
    capability_name,
    check_confinement,
    check_containment,
    check_cpu,
    check_pids,
    detect_containment,
    limit_support,
    parse_memory,
    resolve_configured_cwd,
)
from supervisor.wire import DEFAULT_MAX_INFLIGHT_REQUESTS
from supervisor.workspace import WorkspaceKeep, WorkspaceMode

MAX_TIMER_MS = 2_147_483_647
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
DEFAULT_START_TIMEOUT_MS = 60_000
DEFAULT_IDLE_TIMEOUT_MS = 600_000


def resolve_executable(value: Any, info: ValidationInfo, what: str) -> Path | None:
    """A configured program path: relative to the config's base directory, and executable."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not str(value).strip():
        raise ValueError(f"must be a path to {what}")
    path = Path(value).expanduser()
    if not path.is_absolute():
        base = (info.context or {}).get("base_dir")
        if base is None:
            raise ValueError("a relative path needs a base directory")
        path = Path(base) / path
    path = Path(os.path.normpath(path))
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ValueError(f"is not an executable file: {path}")
    return path


def check_timer_ms(value: float) -> float:
    """``value`` if it is a positive, finite number of milliseconds a timer can wait (at most
    :data:`MAX_TIMER_MS`), else ``ValueError`` saying so: the check of every ``*_ms`` key of
    :class:`ProviderConfig`; a kind's own timer keys use it in a field validator."""
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0 or value > MAX_TIMER_MS:
        raise ValueError(f"must be a positive finite number no greater than {MAX_TIMER_MS}")
    return value


def _memory(value: Any) -> int | None:
    return None if value is None else parse_memory(value)


def _check_enforceable(key: str, mode: ContainmentMode, cgroup_root: Path | None) -> None:
    """Raise ``ValueError`` (why) unless the kernel limit ``key`` can be enforced for runs
    with this containment: never silently unlimited."""
    if mode == ContainmentMode.PROCESS_TREE:
        raise ValueError(
            "cannot be enforced in process-tree containment (only timeout_ms and stall_timeout_ms are)"
        )
    found = detect_containment(cgroup_root)
    if found.cgroup_base is None:
        raise ValueError(f"cannot be enforced: cgroup containment is not available here ({found.reason})")
    controller = {"memory_max": "memory", "pids_max": "pids", "cpu_max": "cpu"}[key]
    support = limit_support(found.cgroup_base)
    if controller not in support.where:
        raise ValueError(f"cannot be enforced here: {support.why_not.get(controller, 'no controller')}")


def _scalar_kinds(annotation: Any) -> set[type]:
    """The scalar types an annotation admits (``float | None`` -> {float})."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return {arg for arg in typing.get_args(annotation) if arg in (int, float, bool)}
    return {annotation} if annotation in (int, float, bool) else set()


def strict_scalar(value: Any, annotation: Any) -> Any:
    """Numbers must be numbers and flags booleans: ``"3000"`` or ``true`` for a number is an error.

    pydantic's lax mode would coerce both; a config file with a quoted number is a
    mistake the user should hear about.  Enums and paths stay lax (TOML has no such types).
    """
    kinds = _scalar_kinds(annotation)
    if not kinds or value is None:
        return value
    if kinds == {bool}:
        if not isinstance(value, bool):
            raise ValueError("must be true or false")
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer" if kinds == {int} else "must be a number")
    return value


class ProviderConfig(BaseModel):
    """Keys every provider kind accepts."""

    # defer_build: the schema is built on first validation, not when a command imports it.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str | None = None
    cwd: Path | None = None
    env: dict[str, str | None] = Field(default_factory=dict)
    env_remove: list[str] = Field(default_factory=list)
    stderr: StderrMode = StderrMode.INHERIT
    dispose_eof_grace_ms: float = 6000
    dispose_grace_ms: float = 3000
    max_frame_bytes: int = Field(default=DEFAULT_MAX_FRAME_BYTES, gt=0)
    max_output_bytes: int = Field(default=DEFAULT_MAX_OUTPUT_BYTES, gt=0)
    stderr_tail_bytes: int = Field(default=DEFAULT_STDERR_TAIL_BYTES, gt=0)
    subreaper: bool = True
    start_timeout_ms: float = DEFAULT_START_TIMEOUT_MS
    idle_timeout_ms: float = DEFAULT_IDLE_TIMEOUT_MS
    """A conversation with no turn for this long is torn down (then a send raises
    ``ConversationOver``).  One-shot runs never idle."""
    warm_idle_ms: float = DEFAULT_IDLE_TIMEOUT_MS
    """A warm child (``Registry.prestart``) no run took for this long is ended."""
    max_inflight_requests: int = Field(default=DEFAULT_MAX_INFLIGHT_REQUESTS, gt=0)
    cgroup_root: Path | None = None
    containment: ContainmentMode = ContainmentMode.AUTO  # after cgroup_root: its check reads it
    # Limits (a limit that cannot be enforced here is a configuration error), after containment:
    # their checks read it.
    memory_max: Annotated[int | None, BeforeValidator(_memory)] = None
    """Bytes; a string takes a binary unit (``"512M"``, ``"2G"``)."""
    pids_max: int | None = None
    """Processes and threads of the run's tree."""
    cpu_max: float | None = None
    """CPUs (``0.5``: half of one CPU's time)."""
    timeout_ms: float | None = None
    """A turn's wall time, from spawn (or send) to settlement."""
    stall_timeout_ms: float | None = None
    """How long the child may write nothing on stdout while its whole tree uses no CPU."""
    # Confinement (what the child may read and write), in this order: the paths' checks read
    # ``confine``.
    confine: bool = False
    """The run's tree may write only in its workspace, its own TMPDIR and ``writable``, and
    read only the system, the workspace and ``readable`` (Landlock; an error where the
    kernel cannot enforce it)."""
    writable: list[Path] = Field(default_factory=list)
    """Folders (or files) a confined run may also write: an agent's own state folders."""
    readable: list[Path] = Field(default_factory=list)
    """Folders (or files) a confined run may also read and execute."""
    keep_capabilities: list[str] = Field(default_factory=list)
    """Capabilities a root child keeps beyond the default set (``net_raw``, ``sys_ptrace``...)."""
    # Workspaces (where the child works: the given cwd, or a worktree of its own).
    workspace: WorkspaceMode = WorkspaceMode.SHARED
    """``worktree``: the run gets a detached git worktree of its own at ``workspace_base``."""
    workspace_base: str = "HEAD"
    """The commit (any revision git resolves) a run's worktree is made at."""
    workspace_keep: WorkspaceKeep = WorkspaceKeep.CHANGED
    """``changed``: a worktree with changes is kept (and reported), an unchanged one removed."""

    @field_validator("containment")
    @classmethod
    def _containment_available(cls, value: ContainmentMode, info: ValidationInfo) -> ContainmentMode:
        """``containment = "cgroup"`` that cannot be had is an error now, before anything spawns."""
        try:
            check_containment(value, info.data.get("cgroup_root"))
        except ContainmentUnavailable as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("cgroup_root")
    @classmethod
    def _absolute_cgroup_root(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _strict_scalars(cls, value: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        field = cls.model_fields[info.field_name]
        if any(isinstance(meta, BeforeValidator) for meta in field.metadata):
            return value  # a key with a parser of its own (memory_max) is as strict as its parser
        return strict_scalar(value, field.annotation)

    @field_validator(
        "dispose_eof_grace_ms", "dispose_grace_ms", "start_timeout_ms", "idle_timeout_ms", "warm_idle_ms"
    )
    @classmethod
    def _positive_grace(cls, value: float) -> float:
        return check_timer_ms(value)

    @field_validator("timeout_ms", "stall_timeout_ms")
    @classmethod
    def _positive_timer(cls, value: float | None) -> float | None:
        return None if value is None else check_timer_ms(value)

    @field_validator("memory_max", "pids_max", "cpu_max")
    @classmethod
    def _enforceable(cls, value: Any, info: ValidationInfo) -> Any:
        """A kernel limit is checked now: in range, and enforceable with this containment here."""
        if value is None:
            return None
        assert info.field_name is not None
        if info.field_name == "pids_max":
            check_pids(value)
        elif info.field_name == "cpu_max":
            value = check_cpu(value)
        if "containment" in info.data:  # else the containment itself is already an error
            _check_enforceable(info.field_name, info.data["containment"], info.data.get("cgroup_root"))
        return value

    @field_validator("confine")
    @classmethod
    def _confinable(cls, value: bool) -> bool:
        """``confine = true`` that this kernel cannot enforce is an error now, never an open run."""
        if value:
            try:
                check_confinement()
            except ConfinementUnavailable as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("writable", "readable", mode="before")
    @classmethod
    def _confined_paths(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or value == []:
            return []
        if not isinstance(value, list):
            raise ValueError("must be a list of paths")
        if not info.data.get("confine"):
            raise ValueError("has effect only with confine = true")
        base = (info.context or {}).get("base_dir")
        paths = []
        for item in value:
            if not isinstance(item, str | os.PathLike) or not str(item).strip() or "\0" in str(item):
                raise ValueError("must be a list of paths")
            path = Path(item).expanduser()
            if not path.is_absolute():
                if base is None:
                    raise ValueError(f"a relative path needs a base directory: {item}")
                path = Path(base) / path
            path = Path(os.path.normpath(path))
            if not path.exists():
                raise ValueError(f"does not exist: {path}")
            paths.append(path)
        return paths

    @field_validator("workspace_base")
    @classmethod
    def _revision(cls, value: str) -> str:
        if not value.strip() or value.startswith("-") or any(c in value for c in "\0\n\r"):
            raise ValueError("must name a revision (a commit, a branch, a tag, HEAD)")
        return value

    @field_validator("keep_capabilities")
    @classmethod
    def _capabilities(cls, value: list[str]) -> list[str]:
        return sorted({capability_name(name) for name in value})

    @field_validator("cwd", mode="before")
    @classmethod
    def _resolve_cwd(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return None
        context = info.context or {}
        base = context.get("base_dir")
        if base is None:
            base = Path.cwd() if Path(str(value)).is_absolute() else None
        if base is None:
            raise ValueError("a relative cwd needs a base directory")
        try:
            return resolve_configured_cwd(str(value), Path(base))
        except CwdError as exc:
            raise ValueError(str(exc)) from None

    @property
    def eof_grace(self) -> float:
        return self.dispose_eof_grace_ms / 1000

    @property
    def term_grace(self) -> float:
        return self.dispose_grace_ms / 1000

    @property
    def start_timeout(self) -> float:
        return self.start_timeout_ms / 1000

    @property
    def limits(self) -> Limits:
        """The kernel limits of a run (memory, processes, CPU)."""
        return Limits(memory_max=self.memory_max, pids_max=self.pids_max, cpu_max=self.cpu_max)

    @property
    def confinement(self) -> Confinement | None:
        """The run's Landlock policy, or None (``confine = false``)."""
        if not self.confine:
            return None
        return Confinement(writable=tuple(self.writable), readable=tuple(self.readable))

    @property
    def idle_timeout(self) -> float:
        return self.idle_timeout_ms / 1000

    @property
    def warm_idle(self) -> float:
        return self.warm_idle_ms / 1000


class CommandConfig(ProviderConfig):
    """Kinds whose child is a configured command (the CLI's ``-- COMMAND ARGS...`` sets it)."""

    command: str
    args: list[str] = Field(default_factory=list)

    @field_validator("command")
    @classmethod
    def _command_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must name a program")
        return value


def config_digest(config: ProviderConfig) -> str:
    """A stable digest of a provider entry's configuration (sha256, hex).

    It tells whether a journaled run or a warm child was made with the same
    configuration as a later request.  The ``env`` entry contributes its names and
    whether each is set, never a value: a digest kept in the journal must not be a
    handle on a credential.  A change of an ``env`` value alone is therefore not seen.
    """
    data = config.model_dump(mode="json")
    data["env"] = sorted((name, value is not None) for name, value in config.env.items())
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


home("supervisor.provider", ProviderConfig, CommandConfig, config_digest, resolve_executable, check_timer_ms)
