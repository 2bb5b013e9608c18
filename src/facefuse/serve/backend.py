"""The seam between the HTTP app and whatever runs the models: a :class:`FusionBackend`.

Why: the same FastAPI app (routes, errors, limits, metrics, web page) serves from one process or from a Ray Serve
cluster. The routes parse and answer; the backend admits, queues and runs the work. Two implementations exist:
:class:`LocalBackend` (one Fuser, the :class:`RequestScheduler`'s bounded queue and thread pool — the default) and
``facefuse.serve.ray.RayBackend`` (deployment handles). Both raise the same errors: QUEUE_FULL (429 with
Retry-After), DEADLINE_EXCEEDED (504), NOT_READY (503), and :class:`ClientGone` when the client went away.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import numpy as np

from ..config import StoreConfig
from ..errors import ErrorCode, FacefuseError
from ..pipeline import Fuser
from . import work
from .scheduler import Outcome, RequestScheduler
from .http_errors import public
from .metrics import ServiceMetrics
from .settings import ServeSettings

log = logging.getLogger("facefuse.serve")

Disconnected = Callable[[], Awaitable[None]]


class FusionBackend(Protocol):
    """What the routes need; ``deadline`` is a :func:`time.monotonic` time, ``disconnected`` returns when the
    client has gone."""

    async def start(self, metrics: ServiceMetrics) -> None:
        """Begin loading/connecting in the background; ``readiness`` says when it is done."""

    async def stop(self) -> None: ...

    def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` shows once every part is ready; raises NOT_READY (with the reason) before."""

    async def fuse(self, asked: work.FuseRequest, *, deadline: float,
                   disconnected: Disconnected) -> Outcome[work.FuseAnswer]: ...

    async def detect(self, asked: work.DetectRequest, *, deadline: float,
                     disconnected: Disconnected) -> Outcome[dict[str, Any]]: ...

    async def models(self) -> dict[str, Any]: ...


def not_ready(created: float, load_error: FacefuseError | None, still: str = "the models are still loading"
              ) -> FacefuseError:
    """NOT_READY saying why: the load failure (kept, so /readyz keeps explaining it) or how long loading has taken."""
    if load_error is not None:  # the full error (paths, pip output) is in the log, not in answers
        cause = public(load_error)
        return FacefuseError(ErrorCode.NOT_READY, f"the models failed to load ({cause.code.value})",
                             cause.hint, {"cause": {"code": cause.code.value, "message": cause.message}})
    return FacefuseError(ErrorCode.NOT_READY, still, "retry in a second",
                         {"loading_for_s": round(time.monotonic() - created, 2)})


def load_fuser(settings: ServeSettings, store: StoreConfig, timed: Callable[[str, float], None], *,
               threads: int | None = None, engine: bool = True, warmup: bool = True) -> Fuser:
    """Build the Fuser and its engine, and run the detector once so the first request does not pay for it.

    ``timed(component, seconds)`` receives each part's load time; ``threads`` pins ONNX Runtime's threads (a Ray
    replica's CPU share) instead of dividing the cores among the service's workers. A Ray analysis replica skips
    the engines, a fusion replica the warm-up.
    """
    start = time.perf_counter()
    fuser = Fuser(settings.fuser_config(store, threads=threads))
    timed("analyzer", time.perf_counter() - start)
    for name in settings.engines if engine else ():  # only these: a request can never make the server load a model
        start = time.perf_counter()
        fuser.engine(name)
        timed(f"engine_{name}", time.perf_counter() - start)
    if engine:
        start = time.perf_counter()
        fuser.segmenter()  # shipped in the package; None where the licence setting forbids it
        timed("segmenter", time.perf_counter() - start)
    if warmup:
        start = time.perf_counter()
        fuser.analyzer.analyze(np.full((192, 192, 3), 128, np.uint8))
        timed("warmup", time.perf_counter() - start)
    return fuser


def load_error(exc: Exception) -> FacefuseError:
    """A load failure as the error /readyz reports (an unexpected one is logged with its traceback)."""
    if isinstance(exc, FacefuseError):
        log.error("models could not be loaded: %s", exc)
        return exc
    log.error("models could not be loaded", exc_info=exc)
    return FacefuseError(ErrorCode.INTERNAL, f"loading the models failed ({exc})", "see the server log for the cause")


class LocalBackend:
    """The single process: one shared Fuser, loaded in a worker thread, fed by the :class:`RequestScheduler`.

    Models load in the background so ``/healthz`` answers at once while ``/readyz`` and the ``/v1`` routes say 503
    NOT_READY until loading finishes — or keep saying why it failed (for example a model that is not cached and
    cannot be fetched offline), instead of the process dying with a traceback.
    """

    def __init__(self, settings: ServeSettings, store: StoreConfig) -> None:
        self.settings = settings
        self.store = store
        self.created = time.monotonic()
        self.fuser: Fuser | None = None
        self.scheduler: RequestScheduler | None = None
        self.load_error: FacefuseError | None = None
        self.ready_after_s: float | None = None
        self._loading: asyncio.Future[None] | None = None

    async def start(self, metrics: ServiceMetrics) -> None:
        settings = self.settings
        self.scheduler = RequestScheduler(workers=settings.workers, max_batch=settings.max_batch,
                                          max_wait_ms=settings.max_wait_ms, queue_size=settings.queue_size,
                                          deadline_s=settings.deadline_s, metrics=metrics)
        self.scheduler.start()
        self._loading = asyncio.get_running_loop().run_in_executor(None, self._load, metrics)

    def _load(self, metrics: ServiceMetrics) -> None:
        try:
            fuser = load_fuser(self.settings, self.store, lambda part, s: metrics.model_load.labels(part).set(s))
        except Exception as exc:
            self.load_error = load_error(exc)
            return
        self.fuser = fuser
        self.ready_after_s = time.monotonic() - self.created
        metrics.ready.set(1)
        log.info("models ready in %.2f s", self.ready_after_s)

    async def stop(self) -> None:
        if self.scheduler:
            await self.scheduler.stop()
        if self._loading:
            await asyncio.gather(self._loading, return_exceptions=True)  # a load in progress finishes first

    def _ready(self) -> tuple[Fuser, RequestScheduler]:
        if self.fuser is None or self.scheduler is None:
            raise not_ready(self.created, self.load_error)
        return self.fuser, self.scheduler

    def readiness(self) -> dict[str, Any]:
        _, scheduler = self._ready()
        return {"ready_after_s": round(self.ready_after_s or 0.0, 3),
                "queue": {"pending": scheduler.pending, "size": self.settings.queue_size}}

    async def fuse(self, asked: work.FuseRequest, *, deadline: float,
                   disconnected: Disconnected) -> Outcome[work.FuseAnswer]:
        fuser, scheduler = self._ready()
        return await scheduler.run(lambda: work.fuse(fuser, asked), deadline=deadline, disconnected=disconnected)

    async def detect(self, asked: work.DetectRequest, *, deadline: float,
                     disconnected: Disconnected) -> Outcome[dict[str, Any]]:
        fuser, scheduler = self._ready()
        return await scheduler.run(lambda: work.detect_report(fuser, asked.image, asked.role),
                                 deadline=deadline, disconnected=disconnected)

    async def models(self) -> dict[str, Any]:
        fuser, _ = self._ready()
        return work.models_report(fuser, self.settings.engines)
