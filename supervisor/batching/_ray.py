"""Batches on Ray: one Ray task per run, the supervisor running inside the task.

Inside the task (:func:`remote_run`) the run goes through the same :func:`run_job` as a
local batch, so the record and the containment are the same; ``node`` is the worker
node's host name and ``ray_node`` its Ray node id (on one machine every node has the
same host name).

Cancellation.  ``ray.cancel`` raises KeyboardInterrupt in the task's main thread through
the SIGINT handler, which Ray may have left ignored; and an event loop blocked in the
kernel would not see it for as long as it sleeps.  So the task runs the event loop in a
second thread, sets the handler, and waits in the main thread in short slices: the
interrupt aborts the run, the main thread waits for the loop thread (the teardown
ladder, on this node) and only then lets the cancellation end the task.  The driver
waits for every cancelled task to report before it returns.

A task whose node or worker died yields ``{"id", "error": "worker lost"}``: the run may
have had side effects, so it is run again only with ``retry_lost``.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import anyio

from supervisor._abort import AbortSignal
from supervisor.batching._jobs import BatchError, BatchEvents, BatchJob, BatchRecord, Outcome, run_job
from supervisor.telemetry import _switch as _telemetry

log = logging.getLogger("supervisor")
WORKER_LOST = "worker lost"
TASK_FAILED = "the supervisor failed inside its Ray task"
# How long the driver waits for cancelled tasks to finish their teardown on their node.
CANCEL_BOUND_S = 60.0
_POLL_S = 0.05
_LOST_RETRIES = 3


@dataclass
class _LoopHandle:
    """What the task's main thread needs to abort the run living in the loop thread."""

    lock: threading.Lock
    abort: AbortSignal | None = None
    call: Callable[[Callable[[], None]], None] | None = None
    requested: bool = False


def remote_run(job: BatchJob) -> dict[str, Any] | None:
    """The body of a Ray task: run ``job`` here and return its record (None: cancelled)."""
    import ray

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
    node_id = ray.get_runtime_context().get_node_id()
    handle = _LoopHandle(threading.Lock())
    box: dict[str, Any] = {}
    done = threading.Event()

    def body() -> None:
        # Ray blocks SIGINT in its threads; the agent's processes should not inherit that.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

        async def main() -> BatchRecord | None:
            abort = AbortSignal()
            token = anyio.lowlevel.current_token()
            with handle.lock:
                handle.abort = abort
                handle.call = lambda fn: anyio.from_thread.run_sync(fn, token=token)
                if handle.requested:
                    abort.abort()
            return await run_job(job, abort, ray_node=node_id)

        try:
            # The driver's trace goes on here: the run's span nests under the batch's.
            traced = bool(job.trace) and _telemetry.configure_from_cli(True)
            try:
                with _telemetry.attached(job.trace):
                    box["record"] = anyio.run(main, backend="asyncio")
            finally:
                if traced:
                    _telemetry.shutdown()
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=body, name="subagents-batch-run", daemon=True)
    thread.start()
    try:
        while not done.wait(_POLL_S):
            pass
    except KeyboardInterrupt:  # ray.cancel: tear the run down here, then end as cancelled
        with handle.lock:
            handle.requested = True
            abort, call = handle.abort, handle.call
        if abort is not None and call is not None:
            call(abort.abort)
        thread.join()
        raise
    if "error" in box:
        raise box["error"]
    record: BatchRecord | None = box["record"]
    return None if record is None else record.model_dump()


def _connect(address: str) -> Any:
    import ray

    if not ray.is_initialized():
        # In a thread on purpose: Ray then leaves the CLI's own SIGTERM handling alone.
        ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR)
    return ray


async def ray_outcomes(
    next_job: Callable[[], BatchJob | BatchError | None],
    address: str,
    *,
    num_cpus: float,
    retry_lost: bool,
    abort: AbortSignal,
    events: BatchEvents,
) -> AsyncIterator[Outcome]:
    """Submit jobs as Ray tasks, keep the cluster's CPUs busy, yield records as tasks finish."""
    ray = await anyio.to_thread.run_sync(_connect, address)
    from ray.exceptions import RayError, RayTaskError, TaskCancelledError

    task = ray.remote(remote_run).options(
        num_cpus=num_cpus, max_retries=_LOST_RETRIES if retry_lost else 0, retry_exceptions=False
    )
    # Twice what the cluster can run at once: a node that frees a CPU finds the next task
    # already queued there instead of waiting for a round trip to this driver.
    capacity = float(ray.cluster_resources().get("CPU", 1))
    window = 2 * max(1, int(capacity / num_cpus))
    pending: dict[Any, str] = {}  # ObjectRef -> item id
    exhausted = False

    def outcome_of(ref: Any, item_id: str) -> Outcome | None:
        try:
            document = ray.get(ref)
        except TaskCancelledError:
            return None
        except RayTaskError as exc:
            if isinstance(exc.cause, KeyboardInterrupt | TaskCancelledError):
                return None
            log.error("batch item %s: its Ray task failed", item_id, exc_info=exc)
            return BatchError(id=item_id, error=TASK_FAILED)
        except RayError:
            return BatchError(id=item_id, error=WORKER_LOST)
        return None if document is None else BatchRecord.model_validate(document)

    def finish(ref: Any) -> Outcome | None:
        item_id = pending.pop(ref)
        outcome = outcome_of(ref, item_id)
        if outcome is None:
            events.cancelled(item_id)
        return outcome

    def wait_some(refs: list[Any]) -> list[Any]:
        ready, rest = ray.wait(refs, num_returns=1, timeout=_POLL_S * 4, fetch_local=True)
        if ready and rest:  # take every other one that is ready too
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0, fetch_local=True)
            ready += more
        return list(ready)

    def cancel_and_wait() -> None:
        refs = list(pending)
        for ref in refs:
            ray.cancel(ref)
        ray.wait(refs, num_returns=len(refs), timeout=CANCEL_BOUND_S)

    try:
        while True:
            while not exhausted and not abort.aborted and len(pending) < window:
                item = next_job()
                if item is None:
                    exhausted = True
                elif isinstance(item, BatchError):
                    yield item
                else:
                    events.started(item.id)
                    pending[task.remote(replace(item, trace=_telemetry.inject()))] = item.id
            if abort.aborted or not pending:
                break
            refs = list(pending)
            for ref in await anyio.to_thread.run_sync(wait_some, refs):
                outcome = finish(ref)
                if outcome is not None:
                    yield outcome
        if pending:  # aborted: cancel what runs, wait for each teardown, keep what finished
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(cancel_and_wait)
            for ref in list(pending):
                outcome = finish(ref)
                if outcome is not None:  # it finished before the cancellation reached it
                    yield outcome
    finally:
        if pending:  # the consumer stopped early: cancel the rest and wait for their teardown
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(cancel_and_wait)
