"""HTTP endpoints: parse, hand the work to the service's backend (one process or Ray Serve), answer.

No fusion logic lives here, and nothing here knows which backend runs the models."""

from __future__ import annotations

import asyncio
import base64
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from ..errors import ErrorCode, FacefuseError
from ..imageio import OUTPUT_BY_PIL, declared_pixels, output_format
from .backend import Disconnected
from .negotiation import image_format_wanted
from .openapi import DetectAnswer, FuseAnswer, ModelsAnswer, fuse_request_body, request_body
from .state import ServiceState
from .uploads import DetectJSON, FuseJSON, FuseOptionsIn, parse_detect, parse_fuse
from .web import CONTENT_SECURITY_POLICY, WEB_DIR
from .work import DetectRequest, FuseRequest


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


@asynccontextmanager
async def _client_watch(request: Request) -> AsyncIterator[Disconnected]:
    """Watch for the client hanging up from the moment its body is read, not only once its work is queued: a
    client that left while its photos were being parsed or waited for pixel room is then already known to be gone
    when the scheduler admits its work (which is dropped instead of run). Yields what the backend awaits."""
    gone = asyncio.ensure_future(_disconnect(request))
    try:
        yield lambda: asyncio.shield(gone)
    finally:
        gone.cancel()


def _server_timing(timings_ms: dict[str, float]) -> str:
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in timings_ms.items())


@api.post("/fuse", summary="Fuse the source face into the target photo",
          openapi_extra=fuse_request_body((FuseOptionsIn, FuseJSON)))
async def fuse(request: Request) -> Response:
    state = service(request)
    backend = state.require_ready()
    settings = state.settings
    async with state.uploads.body(request, settings.max_body_bytes) as body, _client_watch(request) as gone:
        deadline = time.monotonic() + settings.deadline_s  # from here: a slow upload has its own timeout
        # a large JSON body must not stall the loop
        upload = await run_in_threadpool(parse_fuse, request, body, state.fuse_models, state.defaults)
        as_image, accepted_format = image_format_wanted(request.headers.get("accept", ""))
        fmt = output_format(upload.encoding.output_format or accepted_format or "jpeg")
        asked = FuseRequest(upload.sources, upload.target, upload.options, fmt, upload.encoding.quality)
        pixels = sum(declared_pixels(photo) for photo in (*upload.sources, upload.target))
        async with state.pixels.hold(pixels, deadline):
            outcome = await backend.fuse(asked, deadline=deadline, disconnected=gone)
    result = outcome.value
    timings = {"queue": outcome.queued_ms, **result.timings_ms}
    state.metrics.observe_stages(timings)
    request_id = request.state.request_id
    headers = {"Server-Timing": _server_timing(timings)}
    written = OUTPUT_BY_PIL[fmt]
    if as_image:
        headers["Content-Disposition"] = f'inline; filename="fused-{request_id}.{written.extension}"'
        return Response(result.data, media_type=written.media_type, headers=headers)
    answer = FuseAnswer(image_base64=base64.b64encode(result.data).decode(), format=written.name,
                        media_type=written.media_type, extension=written.extension, faces=result.faces,
                        warnings=result.warnings,
                        timings_ms={k: round(v, 2) for k, v in timings.items()}, request_id=request_id)
    return JSONResponse(answer.model_dump(mode="json"), headers=headers)


@api.post("/detect", summary="Faces and the quality verdict of one photo, without fusing",
          openapi_extra=request_body("Detect", {"image": "the photo"}, DetectJSON, DetectJSON))
async def detect(request: Request) -> Response:
    state = service(request)
    backend = state.require_ready()
    settings = state.settings
    async with state.uploads.body(request, settings.max_body_bytes) as body, _client_watch(request) as gone:
        deadline = time.monotonic() + settings.deadline_s
        upload = await run_in_threadpool(parse_detect, request, body)
        async with state.pixels.hold(declared_pixels(upload.image), deadline):
            outcome = await backend.detect(DetectRequest(upload.image, upload.role), deadline=deadline,
                                           disconnected=gone)
    report = outcome.value
    report["timings_ms"] = {"queue": round(outcome.queued_ms, 2), **report["timings_ms"]}
    state.metrics.observe_stages(report["timings_ms"])
    answer = DetectAnswer.model_validate({**report, "request_id": request.state.request_id})
    return JSONResponse(answer.model_dump(mode="json"), headers={"Server-Timing": _server_timing(report["timings_ms"])})


@api.get("/models", summary="Models known to this server and which are loaded")
async def models(request: Request) -> dict[str, Any]:
    state = service(request)
    return ModelsAnswer.model_validate(await state.require_ready().models()).model_dump(mode="json")


@api.get("/options", summary="The fusion options a request may set, as JSON Schema (what the web page's "
                              "controls are built from)")
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
    return {"status": "ready", **state.backend.readiness()}


@ops.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request) -> Response:
    return Response(service(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@ops.get("/", include_in_schema=False)
async def index() -> FileResponse:
    return FileResponse(WEB_DIR / "index.html", media_type="text/html; charset=utf-8",
                        headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY})
