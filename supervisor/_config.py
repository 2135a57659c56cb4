"""Configuration models shared by every provider kind (pydantic at the boundary).

A configured ``cwd`` is resolved against an explicit base directory passed in the
validation context (``{"base_dir": Path}``; the CLI passes the config file's folder)
and validated at load.  Unknown keys are errors.
"""

from __future__ import annotations

import math
import os
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from supervisor._public import home
from supervisor.process import (
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_STDERR_TAIL_BYTES,
    ContainmentMode,
    ContainmentUnavailable,
    CwdError,
    StderrMode,
    check_containment,
    resolve_configured_cwd,
)
from supervisor.wire import DEFAULT_MAX_INFLIGHT_REQUESTS

MAX_TIMER_MS = 2_147_483_647
DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
DEFAULT_START_TIMEOUT_MS = 60_000


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


def _grace(value: float) -> float:
    if isinstance(value, bool) or not math.isfinite(value) or value <= 0 or value > MAX_TIMER_MS:
        raise ValueError(f"must be a positive finite number no greater than {MAX_TIMER_MS}")
    return value


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

    model_config = ConfigDict(extra="forbid", frozen=True)

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
    max_inflight_requests: int = Field(default=DEFAULT_MAX_INFLIGHT_REQUESTS, gt=0)
    cgroup_root: Path | None = None
    containment: ContainmentMode = ContainmentMode.AUTO  # after cgroup_root: its check reads it

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
        return strict_scalar(value, cls.model_fields[info.field_name].annotation)

    @field_validator("dispose_eof_grace_ms", "dispose_grace_ms", "start_timeout_ms")
    @classmethod
    def _positive_grace(cls, value: float) -> float:
        return _grace(value)

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


home("supervisor.provider", ProviderConfig, CommandConfig)
