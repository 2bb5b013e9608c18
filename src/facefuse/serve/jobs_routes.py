"""``/v1/jobs``: batch jobs over HTTP — submit the source (one photo or several of the person) and many photos (or one video), poll, download, cancel.

Parsing and answering only; the jobs themselves live in :mod:`facefuse.jobs`. The router brings its own lifespan
(open the store, start the runner, resume what a killed process left; stop the runner on shutdown), so the app
factory only includes it. Same API key, body limit and error shape as every ``/v1`` route.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from ..errors import ErrorCode, FacefuseError
from ..imageio import check_header, declared_pixels, output_format
from ..jobs import IntakeLimits, JobKind, JobOptions, JobRecord, JobRunner, JobState, JobStore, classify_targets
from ..jobs.intake import is_video, is_zip
from ..jobs.metrics import JobMetrics
from ..jobs.space import JobSpace, estimate_bytes
from ..pipeline import MAX_SOURCE_PHOTOS, check_source_count, source_photo_error
from ..schema import invalid_options
from ..video.options import VideoOptions
from .backend import LocalBackend
from .openapi import VIDEO_FIELDS, job_request_body
from .routes import require_key, service
from .state import ServiceState
from .uploads import (
    FuseOptionsIn,
    _media_type,
    _text_fields,
    _unsupported_body,
    form_values,
    fusion_request,
    multipart_parts,
    unique_fields,
)

_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
_PAGE = 100  # items a job answer lists unless asked otherwise: a 10,000-photo job answers in ~20 KB, not 5 MB
_MAX_PAGE = 1000
_MEDIA = {"result.zip": "application/zip", "result.mp4": "video/mp4"}


@dataclass
class JobService:
    store: JobStore
    runner: JobRunner
    limits: IntakeLimits
    space: JobSpace


@asynccontextmanager
async def jobs_lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = service_of(app)
    backend = state.backend
    if not isinstance(backend, LocalBackend):  # jobs run on this process's Fuser and disk; Ray replicas have neither
        app.state.jobs = None
        yield
        return
    settings = state.settings
    store = JobStore(settings.jobs_root(state.store.home), settings.job_retention_hours * 3600)
    space = JobSpace(store, settings.job_max_disk_bytes)
    runner = JobRunner(store, lambda: backend.fuser, workers=settings.job_workers,
                       video_workers=settings.job_video_workers, space=space,
                       metrics=JobMetrics(state.metrics.registry, store),
                       clean_every_s=min(60.0, settings.job_retention_hours * 3600 / 4))
    runner.start()
    app.state.jobs = JobService(store, runner, settings.intake_limits(), space)
    try:
        yield
    finally:
        await asyncio.to_thread(runner.stop)
        store.close()


def service_of(app: FastAPI) -> Any:
    return app.state.service


def _jobs(request: Request) -> JobService:
    jobs: JobService | None = request.app.state.jobs
    if jobs is None:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "batch jobs are not available on the Ray Serve backend",
                            "send the photos to /v1/fuse one by one (they spread over the replicas), or run batch "
                            "jobs on a single-process `facefuse serve`", {"backend": "ray"})
    return jobs



jobs_api = APIRouter(prefix="/v1/jobs", dependencies=[Depends(require_key)], tags=["jobs"], lifespan=jobs_lifespan)


@dataclass(frozen=True)
class JobUpload:
    sources: tuple[bytes, ...]  # the source photo, then any other photos of the same person
    targets: list[tuple[str, bytes]]
    options: JobOptions


def parse_job(request: Request, body: bytes, state: ServiceState, max_items: int) -> JobUpload:
    """multipart/form-data: the ``source`` file (repeat the field for up to :data:`MAX_SOURCE_PHOTOS` photos of the
    same person, as in ``POST /v1/fuse``), ``targets`` files (repeat the field), and the option fields of
    ``POST /v1/fuse`` (validated by the same request model, from the same server defaults); booleans are
    ``true``/``false`` only, in the video fields too."""
    media_type = _media_type(request)
    if media_type != "multipart/form-data":
        raise _unsupported_body(media_type)
    form_model = state.fuse_models[0]
    fields_allowed = len(form_model.model_fields) + len(VIDEO_FIELDS) + MAX_SOURCE_PHOTOS  # options and sources
    parts = multipart_parts(body, request.headers["content-type"], max_parts=max_items + fields_allowed)
    targets = [(p.filename or f"target-{i + 1}", bytes(p.data)) for i, p in enumerate(parts) if p.name == "targets"]
    for part in parts:
        if part.name == "targets" and not part.filename and not _sniffable(bytes(part.data)):
            raise FacefuseError(ErrorCode.BAD_REQUEST, "a 'targets' field holds text, not a file",
                                "send each photo, zip or video as a file", {"field": "targets"})
    sources = tuple(bytes(part.data) for part in parts if part.name == "source")
    if not sources:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the 'source' photo is missing",
                            "send it as a file field named 'source'", {"field": "source"})
    check_source_count(len(sources))
    for index, source in enumerate(sources):  # a job whose source is no photo could only fail: refused now
        try:
            check_header(source, state.settings.image_limits())
        except FacefuseError as exc:
            raise source_photo_error(exc.about("source"), index, len(sources)) from None
    texts = _text_fields(unique_fields([p for p in parts if p.name not in ("targets", "source")]), ())
    # the request fields of `facefuse video`, checked by their own model; photo jobs ignore them
    video = VideoOptions(**form_values(VideoOptions, {name: texts.pop(name) for name in list(texts)
                                                      if name in VIDEO_FIELDS}))
    try:
        given = form_model.model_validate(form_values(form_model, texts))
    except ValidationError as exc:
        raise invalid_options(exc, form_model) from None
    fusion, encoding = fusion_request(given, state.defaults)
    options = JobOptions(fusion, output_format(encoding.output_format or "jpeg"), encoding.quality, video)
    return JobUpload(sources, targets, options)


def _sniffable(data: bytes) -> bool:
    """Whether a part without a file name is still a photo, zip or video (some clients send files that way)."""
    return declared_pixels(data) > 0 or is_zip(data) or is_video(data)


def admit(jobs: JobService, upload: JobUpload) -> JobRecord:
    """Classifies the targets, reserves the job's disk (its inputs and estimated outputs, 507 when they do not fit)
    and writes it; the reservation is given back if writing fails."""
    kind, targets = classify_targets(upload.targets, jobs.limits)
    options, size = upload.options, None
    if kind is JobKind.VIDEO:
        from ..video.io import inspect_video  # FFmpeg's libraries load only when a video arrives

        size = inspect_video(targets[0][1])
        if size.duration_s is None:  # a clip that does not say how long it is stops at the limit
            video = options.video
            end = min(video.end or math.inf, video.start + jobs.limits.max_video_s)
            options = replace(options, video=video.model_copy(update={"end": end}))
    job_id = jobs.store.new_id()
    jobs.space.reserve(job_id, estimate_bytes(kind, upload.sources, [data for _, data in targets],
                                              options.image_format, size))
    try:
        return jobs.store.create(kind, options.to_dict(), upload.sources, targets, job_id)
    except BaseException:
        jobs.space.release(job_id)
        raise


def job_view(request: Request, record: JobRecord, jobs: JobService, offset: int = 0,
             limit: int = _PAGE) -> dict[str, Any]:
    """The job with one page of its items, their counts and the first ``limit`` failed ones."""
    photos = record.kind is JobKind.PHOTOS
    items = jobs.store.items(record.id, offset, limit) if photos else []
    errors = jobs.store.items(record.id, 0, limit, state="failed") if photos else []
    counts = jobs.store.item_counts(record.id)
    view = record.to_dict(items, errors)
    view["items_page"] = {"offset": offset, "limit": limit, "total": sum(counts.values())}
    view["summary"] = counts
    view["result_url"] = (str(request.url_for("job_result", job_id=record.id).path)
                          if record.state is JobState.DONE else None)
    return view


def _record(jobs: JobService, job_id: str) -> JobRecord:
    record = jobs.store.get(job_id) if _JOB_ID.match(job_id) else None
    if record is None:
        raise FacefuseError(ErrorCode.NOT_FOUND, f"no job '{job_id}'",
                            "use the id POST /v1/jobs answered; deleted jobs are gone", {"job_id": job_id})
    return record


@jobs_api.post("", status_code=202, summary="Start a batch job: one source into many photos, or into a video",
               description="multipart/form-data: `source` (a photo; repeat the field for up to "
                           f"{MAX_SOURCE_PHOTOS} photos of the same person), `targets` (repeat the field: photos, zips of "
                           "photos, or exactly one video) and the options of `POST /v1/fuse`; video jobs also take "
                           "the fields of `facefuse video` (`start`, `end`, `every_n`, `crf`, `codec`…). Limits are server "
                           "settings: `--max-body-mb`, `--job-max-items`, `--job-max-unzipped-mb`, "
                           "`--job-max-disk-mb`; finished jobs are kept `--job-retention-hours`.",
               responses={202: {"description": "the job, queued; poll `GET /v1/jobs/{id}`"}},
               openapi_extra=job_request_body(FuseOptionsIn, IntakeLimits().max_items))
async def create_job(request: Request) -> JSONResponse:
    state = service(request)
    state.require_ready()
    jobs, settings = _jobs(request), state.settings
    # the body counts against the service's upload budget until the job's files are written
    async with state.uploads.body(request, settings.max_body_bytes) as body:
        upload = await run_in_threadpool(parse_job, request, body, state, jobs.limits.max_items)
        record = await run_in_threadpool(admit, jobs, upload)
    jobs.runner.submit(record.id, record.kind)
    view = await run_in_threadpool(job_view, request, record, jobs)
    return JSONResponse(view, status_code=202, headers={"Location": f"/v1/jobs/{record.id}"})


@jobs_api.get("/{job_id}", summary="A job's state, progress (%, frames/s, ETA), a page of its items and the "
                                   "counts of all of them")
async def get_job(request: Request, job_id: str,
                  offset: int = Query(0, ge=0, le=2**31, description="first item of the page"),
                  limit: int = Query(_PAGE, ge=1, le=_MAX_PAGE, description="items (and failed items) shown")
                  ) -> dict[str, Any]:
    jobs = _jobs(request)
    # the database calls wait for a worker's write: off the event loop, so health checks never queue behind them
    return await run_in_threadpool(lambda: job_view(request, _record(jobs, job_id), jobs, offset, limit))


@jobs_api.get("/{job_id}/result", name="job_result", summary="The finished job's video, or a zip of its photos",
              responses={200: {"content": {"application/zip": {}, "video/mp4": {}}}})
async def job_result(request: Request, job_id: str) -> FileResponse:
    jobs = _jobs(request)
    record = _record(jobs, job_id)
    if record.state is JobState.EXPIRED:
        raise FacefuseError(ErrorCode.JOB_EXPIRED, "the job expired and its result was deleted",
                            "start the job again", {"job_id": job_id})
    path = jobs.store.result_path(record)
    if record.state is not JobState.DONE or path is None:
        raise FacefuseError(ErrorCode.JOB_NOT_DONE, f"the job is {record.state.value}, it has no result",
                            "poll GET /v1/jobs/{id} until its state is 'done'" if record.state.value in
                            ("queued", "running") else "see the job's 'error' and start it again",
                            {"job_id": job_id, "state": record.state.value})
    name = f"facefuse-{job_id[:12]}{path.suffix}"
    inline = record.kind is JobKind.VIDEO  # plays in the page; a zip is a download
    return FileResponse(path, media_type=_MEDIA[path.name], filename=name,
                        content_disposition_type="inline" if inline else "attachment")


@jobs_api.delete("/{job_id}", summary="Cancel the job if it is still running, and delete it with its files",
                 description="Afterwards the job no longer exists: `GET /v1/jobs/{id}` answers 404.")
async def delete_job(request: Request, job_id: str) -> dict[str, Any]:
    jobs = _jobs(request)
    record = _record(jobs, job_id)
    before = await run_in_threadpool(jobs.runner.delete, record.id)
    if before is None:  # deleted by another request meanwhile
        raise FacefuseError(ErrorCode.NOT_FOUND, f"no job '{job_id}'", "deleted jobs are gone", {"job_id": job_id})
    return {"id": job_id, "state": "deleted", "was": before.value, "deleted_at": time.time()}
