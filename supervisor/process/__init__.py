"""The process layer: spawn (environment, working directory), framing, the managed child,
its containment (a cgroup leaf, or the process-tree fallback), and the teardown ladder.
Nothing here knows about any protocol."""

from __future__ import annotations

from supervisor.process._cgroup import CgroupContainment as CgroupContainment
from supervisor.process._cgroup import host_group_name as host_group_name
from supervisor.process._cgroup import parse_host_group as parse_host_group
from supervisor.process._containment import Containment as Containment
from supervisor.process._containment import ContainmentMode as ContainmentMode
from supervisor.process._containment import ContainmentUnavailable as ContainmentUnavailable
from supervisor.process._containment import Detection as Detection
from supervisor.process._containment import Enclosure as Enclosure
from supervisor.process._containment import check_containment as check_containment
from supervisor.process._containment import containment_for as containment_for
from supervisor.process._containment import detect_containment as detect_containment
from supervisor.process._cwd import CwdError as CwdError
from supervisor.process._cwd import check_directory as check_directory
from supervisor.process._cwd import resolve_configured_cwd as resolve_configured_cwd
from supervisor.process._cwd import resolve_run_cwd as resolve_run_cwd
from supervisor.process._env import HOST_TAG_VARIABLE as HOST_TAG_VARIABLE
from supervisor.process._env import RUN_TAG_VARIABLE as RUN_TAG_VARIABLE
from supervisor.process._env import child_environment as child_environment
from supervisor.process._env import is_scrubbed as is_scrubbed
from supervisor.process._framing import DEFAULT_MAX_FRAME_BYTES as DEFAULT_MAX_FRAME_BYTES
from supervisor.process._framing import FrameTooLarge as FrameTooLarge
from supervisor.process._framing import LineReader as LineReader
from supervisor.process._host import HostIdentity as HostIdentity
from supervisor.process._host import host_is_alive as host_is_alive
from supervisor.process._host import this_host as this_host
from supervisor.process._keeper import keeper_pid as keeper_pid
from supervisor.process._keeper import register_run as register_run
from supervisor.process._keeper import unregister_run as unregister_run
from supervisor.process._managed import DEFAULT_STDERR_TAIL_BYTES as DEFAULT_STDERR_TAIL_BYTES
from supervisor.process._managed import ExitFacts as ExitFacts
from supervisor.process._managed import ManagedProcess as ManagedProcess
from supervisor.process._managed import SpawnFailed as SpawnFailed
from supervisor.process._managed import SpawnSpec as SpawnSpec
from supervisor.process._managed import StderrMode as StderrMode
from supervisor.process._managed import TeardownReport as TeardownReport
from supervisor.process._sweep import Reaped as Reaped
from supervisor.process._sweep import sweep as sweep
from supervisor.process._tree import ProcessTreeContainment as ProcessTreeContainment
from supervisor.process._tree import set_subreaper as set_subreaper
from supervisor.process._tree import subreaper_enabled as subreaper_enabled
