"""Admission, grouping and off-loop execution of the CPU-heavy work of requests.

This schedules whole requests; it batches no tensors (each request runs the pipeline on its own worker thread).
Merging model inputs across requests is :mod:`facefuse.batching`'s job (``--batch-window-ms``).

Why this shape:

* Admission is bounded (``queue_size`` requests admitted but not started). A full queue answers 429 at once, so a
  burst degrades into fast refusals with ``Retry-After`` instead of a pile of connections that all time out.
* A scheduler task groups waiting requests into batches of up to ``max_batch``, waiting at most ``max_wait_ms`` for
  a batch to fill. A lone request therefore waits only ``max_wait_ms`` (2 ms by default), while a peak is handed to
  the workers in groups, and the batch-size histogram shows how bursty the traffic was.
* Work runs in a thread pool sized to the cores, never on the event loop, so health checks, metrics and 429s stay
  instant while every core is busy. ONNX Runtime releases the GIL, so threads give real parallelism; the runtime
  divides its own threads by the worker count (``RuntimeConfig.concurrency``) so they don't oversubscribe.
* At most ``ceil(workers / max_batch) + 1`` batches are in flight: enough to keep every worker busy with one batch
  formed ahead, few enough that work is not handed to the pool long before a worker can take it. A job whose client
  went away or whose deadline passed is dropped when a worker reaches it, before any work is done.
* Once no request has finished for ``IDLE_RELEASE_S`` and none waits or runs, the free pages the workers' arenas
  kept are handed back to the kernel (:func:`facefuse.allocator.release_freed_memory`): under load the process keeps
  freed blocks for the next request (no page faults), and a service left idle after a burst does not hold its peak.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..allocator import release_freed_memory
from ..errors import ErrorCode, FacefuseError
from .metrics import ServiceMetrics

T = TypeVar("T")
_RATE_WINDOW = 32  # completions the throughput is measured over
_RATE_MAX_AGE_S = 120.0  # older completions describe another load
_FIRST_GUESS_S = 1.0  # one job's duration before any was measured (a CPU fusion takes about that)
IDLE_RELEASE_S = 2.0  # quiet seconds after the last finished request before the freed pages go back


class ClientGone(Exception):
    """The client disconnected before its answer was ready; there is nobody to answer."""


@dataclass(eq=False)
class Job:
    """One request's unit of work and its bookkeeping (times from :func:`time.monotonic`)."""

    work: Callable[[], Any]
    deadline: float
    future: asyncio.Future[Any]
    admitted: float = field(default_factory=time.monotonic)
    started: float | None = None
    abandoned: str | None = None  # why nobody waits for the result any more: "disconnected" or "deadline"


def deadline_exceeded(budget_s: float, details: dict[str, Any]) -> FacefuseError:
    """The 504 every backend gives when the answer is not ready within the request's deadline; ``budget_s`` is the
    configured deadline (``--deadline-ms``), which is what the client can act on."""
    return FacefuseError(ErrorCode.DEADLINE_EXCEEDED, f"no answer within the {budget_s * 1000:.0f} ms deadline",
                         "the server is busy: retry later, or send smaller photos", details)


@dataclass(frozen=True)
class Outcome(Generic[T]):
    value: T
    queued_ms: float


class RequestScheduler:
    """Bounded queue → scheduler forming groups of requests ("batches") → thread pool; ``run`` is what a request
    handler awaits."""

    def __init__(self, *, workers: int, max_batch: int, max_wait_ms: float, queue_size: int, deadline_s: float,
                 metrics: ServiceMetrics) -> None:
        self.workers = workers
        self.deadline_s = deadline_s
        self.max_batch = max_batch
        self.max_wait_s = max_wait_ms / 1000.0
        self.queue_size = queue_size
        self.metrics = metrics
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._lock = threading.Lock()  # guards _pending and Job.started/abandoned across loop and workers
        self._pending = 0  # admitted and not started (in the queue, in a forming batch, or waiting in the pool)
        self._lanes = asyncio.Semaphore(math.ceil(workers / max_batch) + 1)
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="facefuse-worker")
        self._scheduler: asyncio.Task[None] | None = None
        self._batches: set[asyncio.Task[None]] = set()
        self._service_s: float | None = None  # running estimate of one job's duration (before any backlog)
        self._running = 0
        self._backlogged: deque[float] = deque(maxlen=_RATE_WINDOW)  # ends of jobs finished with others waiting
        self._idle_release: asyncio.TimerHandle | None = None  # the hand-back due once the service stays quiet

    def start(self) -> None:
        self._scheduler = asyncio.get_running_loop().create_task(self._schedule(), name="facefuse-scheduler")

    async def stop(self) -> None:
        if self._idle_release is not None:
            self._idle_release.cancel()
        if self._scheduler:
            self._scheduler.cancel()
            await asyncio.gather(self._scheduler, return_exceptions=True)
        while not self._queue.empty():
            job = self._queue.get_nowait()
            if not job.future.done():
                job.future.set_exception(FacefuseError(ErrorCode.NOT_READY, "the server is shutting down",
                                                       "retry in a moment"))
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def pending(self) -> int:
        return self._pending

    def throughput(self) -> float:
        """Jobs finished per second, observed while others were waiting (the workers were saturated then, so this
        is what the machine really drains under load, contention included); before any backlog was seen, the
        workers divided by one job's duration."""
        ends = [t for t in self._backlogged if t > time.monotonic() - _RATE_MAX_AGE_S]
        if len(ends) >= 2 and ends[-1] > ends[0]:
            return (len(ends) - 1) / (ends[-1] - ends[0])
        return self.workers / max(self._service_s or _FIRST_GUESS_S, 1e-3)

    def retry_after_s(self) -> int:
        """Seconds until the work admitted now (waiting and running) has likely drained, at the observed rate."""
        return max(1, math.ceil((self._pending + self._running) / self.throughput()))

    async def run(self, work: Callable[[], T], *, deadline: float,
                  disconnected: Callable[[], Awaitable[None]] | None = None) -> Outcome[T]:
        """Run ``work`` in the pool; raises QUEUE_FULL (full), DEADLINE_EXCEEDED or :class:`ClientGone`."""
        watcher = asyncio.ensure_future(disconnected()) if disconnected else None
        try:
            if watcher is not None:
                await asyncio.sleep(0)  # one turn of the loop: the watcher of a client known to be gone finishes
                if watcher.done():  # never admitted: a worker must not pick it up before the watcher has run
                    self.metrics.dropped.labels("disconnected").inc()
                    raise ClientGone()
            job = self._admit(work, deadline)
            waiting: set[asyncio.Future[Any]] = {job.future} | ({watcher} if watcher else set())
            done, _ = await asyncio.wait(waiting, timeout=max(0.0, deadline - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            if watcher:
                watcher.cancel()
        if job.future in done:
            queued = ((job.started or job.admitted) - job.admitted) * 1000
            return Outcome(job.future.result(), queued)
        reason = "disconnected" if watcher in done else "deadline"
        self._abandon(job, reason)
        raise self._abandoned_error(job, reason)

    def _abandoned_error(self, job: Job, reason: str) -> Exception:
        if reason == "disconnected":
            return ClientGone()
        return deadline_exceeded(self.deadline_s, {"started": job.started is not None})

    def _admit(self, work: Callable[[], Any], deadline: float) -> Job:
        if self._pending >= self.queue_size:
            self.metrics.rejected.inc()
            raise FacefuseError(ErrorCode.QUEUE_FULL, f"the server is busy ({self._pending} requests waiting)",
                                f"retry after {self.retry_after_s()} s",
                                {"retry_after_s": self.retry_after_s(), "queue_size": self.queue_size})
        job = Job(work, deadline, asyncio.get_running_loop().create_future())
        # a result or error nobody waits for any more must not be logged as "never retrieved"
        job.future.add_done_callback(lambda f: f.cancelled() or f.exception())
        with self._lock:
            self._pending += 1
            pending = self._pending
        self.metrics.queue_depth.set(pending)
        self._queue.put_nowait(job)
        return job

    def _abandon(self, job: Job, reason: str) -> None:
        with self._lock:
            if job.abandoned is None:
                job.abandoned = reason  # if a worker already started it, the result is simply discarded

    async def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._lanes.acquire()
            batch = [await self._queue.get()]
            close_at = loop.time() + self.max_wait_s
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                    continue
                except asyncio.QueueEmpty:
                    pass
                remaining = close_at - loop.time()
                if remaining <= 0:
                    break
                try:
                    batch.append(await asyncio.wait_for(self._queue.get(), remaining))
                except asyncio.TimeoutError:
                    break
            self.metrics.batch_size.observe(len(batch))
            task = loop.create_task(self._run_batch(batch))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)

    async def _run_batch(self, batch: list[Job]) -> None:
        try:
            await asyncio.gather(*(self._run_job(job) for job in batch))
        finally:
            self._lanes.release()

    async def _run_job(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        try:
            value = await loop.run_in_executor(self._pool, self._execute, job)
        except BaseException as exc:
            if not job.future.done():
                job.future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            if not job.future.done():
                job.future.set_result(value)
        finally:
            if self._idle_release is not None:
                self._idle_release.cancel()
            self._idle_release = loop.call_later(IDLE_RELEASE_S, self._release_if_idle, loop)

    def _release_if_idle(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer's end: the pages go back on a worker thread if nothing has been admitted since."""
        self._idle_release = None
        stopped = self._scheduler is None or self._scheduler.done()  # (the pool is shut down with it)
        if not stopped and self._pending == 0 and self._running == 0:
            loop.run_in_executor(self._pool, release_freed_memory)

    def _execute(self, job: Job) -> Any:
        """Runs in a worker thread: skip abandoned or late jobs, else do the work and keep the timing estimate."""
        dropped = self._claim(job)
        if dropped is not None:
            raise self._abandoned_error(job, dropped)  # answers a handler that is still waiting, if any
        start = time.monotonic()
        with self._lock:
            self._running += 1
        try:
            return job.work()
        finally:
            end = time.monotonic()
            with self._lock:
                self._running -= 1
                if self._pending > 0:
                    self._backlogged.append(end)
            took = end - start
            self._service_s = took if self._service_s is None else 0.8 * self._service_s + 0.2 * took

    def _claim(self, job: Job) -> str | None:
        """Mark ``job`` started; the reason when it must be dropped instead (it is then counted as dropped)."""
        now = time.monotonic()
        with self._lock:
            job.started = now
            self._pending -= 1
            pending = self._pending
            if job.abandoned is None and now >= job.deadline:
                job.abandoned = "deadline"
            reason = job.abandoned
        self.metrics.queue_depth.set(pending)
        self.metrics.queue_wait.observe(now - job.admitted)
        if reason is not None:
            self.metrics.dropped.labels(reason).inc()
        return reason
