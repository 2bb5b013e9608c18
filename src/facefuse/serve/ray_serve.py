"""The service on Ray Serve: the same FastAPI app as ingress, analysis and fusion as separately scaled deployments.

Why this split: face analysis (decode → detect → 468 landmarks) and the fusion engine (warps, blends, encode) cost
about the same on a CPU, but only analysis has a model with a batch axis (FaceMesh). So analysis replicas merge
concurrent requests with ``@serve.batch`` and run the faces of all their photos as one FaceMesh batch, and each
deployment gets the replicas its own load asks for (``--autoscale``). A fusion's two photos are one call to the
analysis deployment (one admission, one FaceMesh batch), and their analyses go from the analysis replica to the
fusion replica through Ray's object store, not through the ingress.

The ingress is :func:`facefuse.serve.app.create_app` itself, with a :class:`RayBackend` in place of the in-process
one: routes, OpenAPI, error JSON, API key, body limits, ``/metrics`` and the web page are the same code.
Overload: each deployment's handle queue is bounded (``max_queued_requests`` = ``queue_size``); Ray's
``BackPressureError`` becomes QUEUE_FULL (429 + Retry-After), a missed deadline DEADLINE_EXCEEDED (504).

A client's mistake (a photo without a face, a bad option) travels back as a :class:`FacefuseError` value, not
as a raised exception, so replicas do not log a traceback for it; anything raised is a real fault.

Only this module imports Ray, and only ``--backend ray`` / :func:`ray_app` import this module.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Awaitable
from typing import Any, TypeVar

import cv2
from fastapi import FastAPI
from ray import serve
from ray.exceptions import RayTaskError
from ray.serve.exceptions import BackPressureError
from ray.serve.handle import DeploymentHandle, DeploymentResponse

from ..allocator import keep_freed_memory
from ..analysis.types import ImageAnalysis
from ..config import StoreConfig
from ..errors import ErrorCode, FacefuseError
from ..pipeline import source_photo_error
from . import work
from .app import create_app
from .backend import Disconnected, load_error, load_fuser, not_ready
from .scheduler import ClientGone, Outcome, deadline_exceeded
from .metrics import ServiceMetrics
from .settings import ServeSettings

log = logging.getLogger("facefuse.serve")

ANALYSIS = "Analysis"  # the pipeline's decode … landmarks
FUSION = "Fusion"  # gate … encode
INGRESS = "Facefuse"

T = TypeVar("T")


class _Replica:
    """One replica's models: loaded once from the store, ONNX Runtime and OpenCV pinned to the replica's CPUs."""

    def __init__(self, settings: ServeSettings, store: StoreConfig | None, *, engine: bool) -> None:
        start = time.monotonic()
        store = store or StoreConfig.from_env()  # this node's FACEFUSE_HOME / FACEFUSE_MODEL_MIRROR
        self.threads = max(1, math.floor(settings.num_cpus_per_replica))
        cv2.setNumThreads(self.threads)  # OpenCV's pool would otherwise take every core of the node
        keep_freed_memory()  # a replica owns its worker process (facefuse.allocator)
        self.load_s: dict[str, float] = {}
        try:
            self.fuser = load_fuser(settings, store, self.load_s.__setitem__, threads=self.threads, engine=engine,
                                    warmup=not engine)
        except Exception as exc:
            raise load_error(exc) from None  # Ray reports the replica's failed start with this message
        self.ready_after_s = time.monotonic() - start

    def ready(self) -> dict[str, Any]:
        """Called by the ingress: answers once this replica has loaded its models."""
        return {"ready_after_s": round(self.ready_after_s, 3), "threads": self.threads, "pid": os.getpid(),
                "load_s": {part: round(s, 3) for part, s in self.load_s.items()}}


class AnalysisDeployment(_Replica):
    """The pipeline's decode … landmarks slice (:meth:`Fuser.analyze_many`), with concurrent requests merged into
    one FaceMesh batch; detect requests also run the gate (:meth:`Fuser.detect`)."""

    def __init__(self, settings: ServeSettings, store: StoreConfig | None) -> None:
        super().__init__(settings, store, engine=False)
        self._analyze_batch.set_max_batch_size(settings.max_batch)
        self._analyze_batch.set_batch_wait_timeout_s(settings.max_wait_ms / 1000.0)
        self.batch_sizes: Counter[int] = Counter()  # requests per model batch → how many such batches

    @serve.batch
    async def _analyze_batch(self, requests: list[list[work.DetectRequest]]
                             ) -> list[list[ImageAnalysis | FacefuseError]]:
        """Each item is one request's photos (a fusion's two, a detection's one); all go through one FaceMesh run."""
        self.batch_sizes[len(requests)] += 1
        flat = [(asked.image, asked.role, asked.options) for photos in requests for asked in photos]
        found = await asyncio.to_thread(self.fuser.analyze_many, flat)
        answers, first = [], 0
        for photos in requests:
            answers.append(found[first:first + len(photos)])
            first += len(photos)
        return answers

    async def analyze(self, photos: list[work.DetectRequest]) -> list[ImageAnalysis | FacefuseError]:
        """One request's photos, analysed together: one admission, so a fusion is never half refused."""
        return await self._analyze_batch(photos)

    async def detect(self, asked: work.DetectRequest) -> dict[str, Any] | FacefuseError:
        (found,) = await self._analyze_batch([asked])
        return found if isinstance(found, FacefuseError) else work.detect_report(self.fuser, found, asked.role)

    def models(self, engines: list[str]) -> dict[str, Any]:
        return work.models_report(self.fuser, engines)

    def stats(self) -> dict[str, Any]:
        """This replica's model batches: {requests in the batch: how many batches}."""
        return {"pid": os.getpid(), "batch_sizes": dict(self.batch_sizes)}


class FusionDeployment(_Replica):
    """The rest of the list — gate … encode, the source's slice included — on analyses handed over by
    :class:`AnalysisDeployment` replicas; it receives the options, never the photos' bytes."""

    def __init__(self, settings: ServeSettings, store: StoreConfig | None) -> None:
        super().__init__(settings, store, engine=True)

    async def fuse(self, photos: list[ImageAnalysis | FacefuseError],
                   asked: work.FuseSpec) -> work.FuseAnswer | FacefuseError:
        *sources, target = photos
        for index, source in enumerate(sources):
            if isinstance(source, FacefuseError):
                return source_photo_error(source, index, len(sources))
        if isinstance(target, FacefuseError):
            return target
        try:
            return await asyncio.to_thread(work.fuse_analysed, self.fuser, sources, target, asked)
        except FacefuseError as exc:
            return exc


class RayBackend:
    """The :class:`~facefuse.serve.backend.FusionBackend` of the Ray ingress: requests go to deployment handles.

    Readiness: a background task asks every deployment's ``ready`` (each load of models happens in the replicas'
    constructors); ``/readyz`` is 200 only while all of them answer.
    """

    RECHECK_S = 10.0

    def __init__(self, settings: ServeSettings, analysis: DeploymentHandle, fusion: DeploymentHandle) -> None:
        self.settings = settings
        self.handles = {ANALYSIS: analysis, FUSION: fusion}
        self.created = time.monotonic()
        self.parts: dict[str, dict[str, Any]] = {}
        self.problem: FacefuseError | None = None
        self.ready_after_s: float | None = None
        self._service_s = 0.2  # running estimate of one request's duration, for Retry-After
        self._watcher: asyncio.Task[None] | None = None
        self._metrics: ServiceMetrics | None = None

    async def start(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics
        self._watcher = asyncio.get_running_loop().create_task(self._watch(), name="facefuse-readiness")

    async def stop(self) -> None:
        if self._watcher:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)

    async def _watch(self) -> None:
        assert self._metrics is not None
        while True:
            try:
                answers = await asyncio.wait_for(
                    asyncio.gather(*(handle.ready.remote() for handle in self.handles.values())), self.RECHECK_S)
            except Exception as exc:  # a deployment without a running replica: not ready, and say which error
                cause = _unwrap(exc)
                self.problem = cause if isinstance(cause, FacefuseError) else None
                self.parts = {}
                self._metrics.ready.set(0)
                log.warning("a Ray deployment is not ready: %s", cause)
            else:
                self.parts = dict(zip(self.handles, answers))
                self.problem = None
                if self.ready_after_s is None:
                    self.ready_after_s = time.monotonic() - self.created
                    log.info("every deployment ready after %.2f s", self.ready_after_s)
                self._metrics.ready.set(1)
            await asyncio.sleep(self.RECHECK_S if self.parts else 0.5)

    def readiness(self) -> dict[str, Any]:
        if not self.parts:
            raise not_ready(self.created, self.problem, "the Ray deployments are still starting")
        return {"ready_after_s": round(self.ready_after_s or 0.0, 3), "backend": "ray", "deployments": self.parts,
                "queue": {"size": self.settings.queue_size}}

    async def fuse(self, asked: work.FuseRequest, *, deadline: float,
                   disconnected: Disconnected) -> Outcome[work.FuseAnswer]:
        self.readiness()
        analysis, fusion = self.handles[ANALYSIS], self.handles[FUSION]
        photos = analysis.analyze.remote([*(work.DetectRequest(source, "source", asked.options)
                                            for source in asked.sources),
                                          work.DetectRequest(asked.target, "target")])
        fused = fusion.fuse.remote(photos, asked.spec)  # the analyses travel replica to replica, the bytes stay here
        start = time.monotonic()
        answer = await self._wait(fused, [photos], deadline, disconnected)
        return Outcome(answer, self._queued_ms(start, answer.timings_ms["total"] + answer.timings_ms["encode"]))

    async def detect(self, asked: work.DetectRequest, *, deadline: float,
                     disconnected: Disconnected) -> Outcome[dict[str, Any]]:
        self.readiness()
        start = time.monotonic()
        report = await self._wait(self.handles[ANALYSIS].detect.remote(asked), [], deadline, disconnected)
        return Outcome(report, self._queued_ms(start, sum(report["timings_ms"].values())))

    async def models(self) -> dict[str, Any]:
        self.readiness()
        report: dict[str, Any] = await self.handles[ANALYSIS].models.remote(self.settings.engines)
        return report

    def _queued_ms(self, start: float, work_ms: float) -> float:
        """Time not spent working: waiting in Ray's queues and moving data between replicas."""
        wall = time.monotonic() - start
        self._service_s = 0.8 * self._service_s + 0.2 * wall
        return max(0.0, wall * 1000 - work_ms)

    async def _wait(self, response: DeploymentResponse, also: list[DeploymentResponse], deadline: float,
                    disconnected: Disconnected) -> Any:
        """The response's value, or the request's error; on a deadline or a gone client every call is cancelled."""
        result = asyncio.ensure_future(_resolve(response))
        watcher = asyncio.ensure_future(disconnected())
        try:
            done, _ = await asyncio.wait({result, watcher}, timeout=max(0.0, deadline - time.monotonic()),
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if result in done:
            try:
                value = result.result()
            except Exception as exc:
                raise self._error(exc) from None
            if isinstance(value, FacefuseError):
                raise value
            return value
        result.cancel()
        for call in {response, *also}:
            call.cancel()
        if watcher in done:
            raise ClientGone()
        raise deadline_exceeded(self.settings.deadline_s, {"backend": "ray"})

    def _error(self, exc: Exception) -> Exception:
        cause = _unwrap(exc)
        if isinstance(cause, BackPressureError):
            assert self._metrics is not None
            self._metrics.rejected.inc()
            replicas = self.settings.autoscale_range[1] if self.settings.autoscale_range else self.settings.replicas
            queued = int(cause.args[0]) if cause.args else self.settings.queue_size  # (num_queued, max_queued, ...)
            retry = max(1, math.ceil(queued * self._service_s / replicas))
            return FacefuseError(ErrorCode.QUEUE_FULL, f"the server is busy ({queued} requests waiting)",
                                 f"retry after {retry} s",
                                 {"retry_after_s": retry, "queue_size": self.settings.queue_size})
        return cause


async def _resolve(response: Awaitable[T]) -> T:
    return await response


def _unwrap(exc: BaseException) -> BaseException:
    """The error a replica raised, as a plain exception (Ray wraps it, once per hop between deployments)."""
    while isinstance(exc, RayTaskError) and exc.cause is not None:
        exc = exc.cause
    if isinstance(exc, FacefuseError):
        return FacefuseError(exc.code, exc.message, exc.hint, exc.details)
    return exc


@serve.ingress()
class Ingress:
    """The HTTP entry: ``create_app`` built in the replica, its backend pointing at the two deployments."""

    def __init__(self, settings: ServeSettings, store: StoreConfig | None, analysis: DeploymentHandle,
                 fusion: DeploymentHandle) -> None:
        self.settings = settings
        self.store = store
        self.backend = RayBackend(settings, analysis, fusion)

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(self.settings, store=self.store, backend=self.backend)


def _scaling(settings: ServeSettings, target_ongoing: int) -> dict[str, Any]:
    bounds = settings.autoscale_range
    if bounds is None:
        return {"num_replicas": settings.replicas}
    return {"autoscaling_config": {"min_replicas": bounds[0], "max_replicas": bounds[1],
                                   "initial_replicas": bounds[0], "target_ongoing_requests": target_ongoing}}


def ray_app(settings: ServeSettings | dict[str, Any] | None = None,
            store: StoreConfig | None = None) -> serve.Application:
    """The Ray Serve application: ``serve.run(ray_app(settings))``, or as an application builder for
    ``serve run facefuse.serve.ray_serve:ray_app replicas=2`` and Serve config files (``args`` is a dict of
    ``ServeSettings`` fields; unset ones come from ``FACEFUSE_*`` variables, as for ``facefuse serve``).

    ``store`` (the model cache and mirror) is read on each node from its own ``FACEFUSE_*`` variables unless given.
    Replicas reserve ``num_cpus_per_replica`` CPUs each; an analysis replica takes up to ``max_ongoing_requests`` =
    2 × ``max_batch`` requests (a batch running, the next one forming), a fusion replica one per CPU thread.
    """
    if not isinstance(settings, ServeSettings):
        settings = ServeSettings(**{"backend": "ray", **(settings or {})})
    actor = {"num_cpus": settings.num_cpus_per_replica}
    batch = settings.max_batch
    analysis = serve.deployment(AnalysisDeployment).options(
        name=ANALYSIS, ray_actor_options=actor, max_ongoing_requests=2 * batch, max_queued_requests=settings.queue_size,
        **_scaling(settings, batch)).bind(settings, store)
    fusion_slots = max(1, math.floor(settings.num_cpus_per_replica))
    fusion = serve.deployment(FusionDeployment).options(
        name=FUSION, ray_actor_options=actor, max_ongoing_requests=fusion_slots,
        max_queued_requests=settings.queue_size, **_scaling(settings, fusion_slots)).bind(settings, store)
    # the ingress parses and forwards: it reserves no CPU, is not autoscaled (--replicas of it), and admits many
    # requests, so refusals are the deployments' bounded queues answering 429 in the API's JSON, not the proxy's 503
    ingress = serve.deployment(Ingress).options(
        name=INGRESS, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=max(100, 4 * settings.queue_size),
        num_replicas=settings.replicas)
    return ingress.bind(settings, store, analysis, fusion)
