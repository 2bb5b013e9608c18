"""HTTP endpoints: parse, queue the CPU work through the request scheduler, answer. No fusion logic lives here."""

from __future__ import annotations

import base64
import secrets
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..analysis.select import select_faces
from ..analysis.types import ImageAnalysis
from ..errors import ErrorCode, FacefuseError
from ..imageio import MEDIA_TYPES, declared_pixels, output_format
from ..pipeline import FusionResult
from .negotiation import image_format_wanted
from .openapi import fuse_request_body, request_body
from .state import ServiceState
from .uploads import DetectJSON, FuseJSON, FuseOptionsIn, parse_detect, parse_fuse
from .web import CONTENT_SECURITY_POLICY, WEB_DIR


def service(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


def require_key(request: Request) -> None:
    """Bearer API key, compared in constant time; a no-op when the service has no key configured."""
    key = service(request).settings.api_key
    if key is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), key.get_secret_value().encode()):
        raise FacefuseError(ErrorCode.UNAUTHORIZED, "missing or wrong API key",
                            "send the header 'Authorization: Bearer <key>' with the key the operator gave you")


api = APIRouter(prefix="/v1", dependencies=[Depends(require_key)], tags=["fusion"])
ops = APIRouter(tags=["operations"])


async def _disconnect(request: Request) -> None:
    """Returns when the client has gone (the body is already read, so the next ASGI message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _server_timing(timings_ms: dict[str, float]) -> str:
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in timings_ms.items())


@api.post("/fuse", summary="Fuse the source face into the target photo",
          openapi_extra=fuse_request_body((FuseOptionsIn, FuseJSON)))
async def fuse(request: Request) -> Response:
    state = service(request)
    fuser, scheduler = state.require_ready()
    settings = state.settings
    async with state.uploads.body(request, settings.max_body_bytes, settings.upload_timeout_s) as body:
        deadline = time.monotonic() + settings.deadline_s  # from here: a slow upload has its own timeout
        # a large JSON body must not stall the loop
        upload = await run_in_threadpool(parse_fuse, request, body, state.fuse_models, state.defaults)
        as_image, accepted_format = image_format_wanted(request.headers.get("accept", ""))
        fmt = output_format(upload.encoding.output_format or accepted_format or "jpeg")

        def work() -> tuple[FusionResult, bytes, float]:
            result = fuser.fuse(upload.source, upload.target, upload.options)
            start = time.perf_counter()
            data = result.encode(fmt, upload.encoding.quality)
            return result, data, (time.perf_counter() - start) * 1000

        pixels = declared_pixels(upload.source) + declared_pixels(upload.target)
        async with state.pixels.hold(pixels, deadline):
            outcome = await scheduler.run(work, deadline=deadline, disconnected=lambda: _disconnect(request))
    result, data, encode_ms = outcome.value
    timings = {"queue": outcome.queued_ms, **result.timings_ms, "encode": encode_ms}
    state.metrics.observe_stages(timings)
    request_id = request.state.request_id
    headers = {"Server-Timing": _server_timing(timings)}
    if as_image:
        headers["Content-Disposition"] = f'inline; filename="fused-{request_id}.{fmt.lower()}"'
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)
    return JSONResponse({"image_base64": base64.b64encode(data).decode(), "format": fmt.lower(),
                         "media_type": MEDIA_TYPES[fmt], **result.to_dict(),
                         "timings_ms": {k: round(v, 2) for k, v in timings.items()}, "request_id": request_id},
                        headers=headers)


def quality_verdict(analysis: ImageAnalysis, role: str) -> dict[str, Any]:
    """Would this photo be accepted as-is? Same rule and wording as fusion (the largest face and the gate)."""
    try:
        select_faces(analysis, "largest", allow_all=False)
    except FacefuseError as exc:
        reason = exc if role == "image" else exc.about(role)
        return {"accepted": False, "code": reason.code.value, "message": reason.message, "hint": reason.hint}
    return {"accepted": True, "code": None, "message": "the photo can be used", "hint": ""}


@api.post("/detect", summary="Faces and the quality verdict of one photo, without fusing",
          openapi_extra=request_body("Detect", {"image": "the photo"}, DetectJSON, DetectJSON))
async def detect(request: Request) -> Response:
    state = service(request)
    fuser, scheduler = state.require_ready()
    settings = state.settings
    async with state.uploads.body(request, settings.max_body_bytes, settings.upload_timeout_s) as body:
        deadline = time.monotonic() + settings.deadline_s
        upload = await run_in_threadpool(parse_detect, request, body)

        def work() -> dict[str, Any]:
            analysis = fuser.analyze(upload.image, upload.role)
            return {**analysis.to_dict(with_landmarks=False), "verdict": quality_verdict(analysis, upload.role)}

        async with state.pixels.hold(declared_pixels(upload.image), deadline):
            outcome = await scheduler.run(work, deadline=deadline, disconnected=lambda: _disconnect(request))
    report = outcome.value
    report["timings_ms"] = {"queue": round(outcome.queued_ms, 2), **report["timings_ms"]}
    state.metrics.observe_stages(report["timings_ms"])
    return JSONResponse({**report, "request_id": request.state.request_id},
                        headers={"Server-Timing": _server_timing(report["timings_ms"])})


@api.get("/models", summary="Models known to this server and which are loaded")
async def models(request: Request) -> dict[str, Any]:
    state = service(request)
    fuser, _ = state.require_ready()
    return {
        "detector": fuser.config.analysis.detector,
        "engine": state.settings.engines[0],
        "engines": state.settings.engines,
        "providers": fuser.runtime.providers,
        "models": [{"name": e.name, "task": e.task.value, "licence": e.licence_note,
                    "commercial_use": e.commercial_use, "default": e.default,
                    "cached": fuser.store.cached_path(e.name).exists(), "description": e.description}
                   for e in fuser.store.registry],
    }


@ops.get("/v1/options", summary="The fusion options a request may set, as JSON Schema (what the web page's "
                                 "controls are built from)", tags=["fusion"])
async def options(request: Request) -> dict[str, Any]:
    state = service(request)
    form, _ = state.fuse_models
    return {"schema": form.model_json_schema(), "engines": state.settings.engines}


@ops.get("/healthz", summary="The process is up")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@ops.get("/readyz", summary="The models are loaded and requests are accepted")
async def readyz(request: Request) -> dict[str, Any]:
    state = service(request)
    state.require_ready()
    return {"status": "ready", "ready_after_s": round(state.ready_after_s or 0.0, 3),
            "queue": {"pending": state.scheduler.pending if state.scheduler else 0,
                      "size": state.settings.queue_size}}


@ops.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    return Response(service(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@ops.get("/", include_in_schema=False)
async def index() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY})
