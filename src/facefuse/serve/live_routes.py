"""``/v1/live``: the live camera over one WebSocket per session (protocol in docs/live.md).

Why a WebSocket of JPEG frames and not WebRTC: on loopback and a LAN the frame's own cost dominates (a 640×480 JPEG
decodes in ~1 ms and encodes in ~2 ms, against ~50–200 ms of fusion on two CPU cores), the browser sends and shows
JPEG natively, and one socket per session keeps the limits (sessions, frame size, idle time, API key, Origin) in
this process's own code. WebRTC (aiortc) would add a video codec per client on the same two cores, a second
transport to secure, and latency control we do not need when the server drops frames itself.

Flow control: the server fuses one frame at a time per session and keeps only the newest frame that arrived
meanwhile (:class:`NewestFrame`); older ones are dropped and counted, never queued.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import secrets
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, FastAPI, Request, WebSocket
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from ..allocator import release_freed_memory
from ..config import ImageLimits
from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..live import LIVE_QUALITY, LiveFrame, LiveSession, live_options
from ..pipeline import MAX_SOURCE_PHOTOS, Fuser, check_source_count
from ..schema import invalid_options
from ..video.options import VideoOptions
from .backend import LocalBackend
from .http_errors import error_response, public
from .middleware import host_problem
from .routes import require_key
from .settings import ServeSettings
from .state import ServiceState
from .uploads import fusion_request

log = logging.getLogger("facefuse.serve")

PROTOCOL = "facefuse.live.v1"  # the WebSocket subprotocol the server answers with
KEY_PROTOCOL = "facefuse.key."  # + the API key in base64url: how a browser, which cannot set headers, sends it
FRAME_HEADER = struct.Struct(">I")  # client → server: the frame's sequence number, then the encoded frame
REPLY_HEADER = struct.Struct(">IIII")  # server → client: sequence, server µs, frames dropped so far, fused (0/1)
RETRY_AFTER_S = 5  # a refused client may try again then: sessions end when their users stop, not on a schedule
CLOSE_INTERNAL = 1011
FRAME_BUCKETS = (0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.0)


def close_code(exc: FacefuseError) -> int:
    """4000 + the error's HTTP status (4408 idle, 4413 frame too large, 4400 bad message, 4422 no face…)."""
    return 4000 + exc.http_status


class LiveMetrics:
    """What /metrics says about live sessions, in the service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.sessions = Gauge("facefuse_live_sessions", "live camera sessions open", registry=registry)
        self.frames = Counter("facefuse_live_frames", "live frames by outcome: fused, unfused (no face followed), "
                              "dropped (a newer frame arrived before it was taken)", ["outcome"], registry=registry)
        self.refused = Counter("facefuse_live_refused", "live sessions refused or ended by an error, by error code",
                               ["code"], registry=registry)
        self.frame_time = Histogram("facefuse_live_frame_seconds", "server time per live frame (taken → sent)",
                                    buckets=FRAME_BUCKETS, registry=registry)
        # where a frame's time goes under load: waiting for its session's previous frame, then in the session itself
        # (decode → encode on a worker thread); the rest of the server time is the hop to that thread and the send
        self.frame_wait = Histogram("facefuse_live_frame_wait_seconds", "time a live frame waited in its session's "
                                    "newest-frame slot (arrived → taken)", buckets=FRAME_BUCKETS, registry=registry)
        self.fuse_time = Histogram("facefuse_live_fuse_seconds", "time a live frame spent in its session "
                                   "(decode → encode, on a worker thread)", buckets=FRAME_BUCKETS, registry=registry)


class LiveSlots:
    """How many live sessions run; the limit is checked at the handshake. Used from the event loop only."""

    def __init__(self, limit: int, metrics: LiveMetrics) -> None:
        self.limit = limit
        self.active = 0
        self.metrics = metrics

    def claim(self) -> None:
        self.check()
        self.active += 1
        self.metrics.sessions.set(self.active)

    def check(self) -> None:
        """QUEUE_FULL (429, Retry-After) when no session could start now."""
        if self.active >= self.limit:
            raise FacefuseError(ErrorCode.QUEUE_FULL,
                                f"all {self.limit} live session(s) of this server are in use" if self.limit else
                                "live camera sessions are turned off on this server",
                                f"try again in {RETRY_AFTER_S} s, or when another live session ends",
                                {"retry_after_s": RETRY_AFTER_S, "max_sessions": self.limit})

    def release(self) -> None:
        self.active -= 1
        self.metrics.sessions.set(self.active)


@asynccontextmanager
async def live_lifespan(app: FastAPI) -> AsyncIterator[None]:
    state = app.state.service
    app.state.live = LiveSlots(state.settings.live_max_sessions, LiveMetrics(state.metrics.registry))
    yield


live_api = APIRouter(tags=["live"], lifespan=live_lifespan)


class NewestFrame:
    """A one-frame mailbox: a frame put while the previous one still waits replaces it (and counts as dropped)."""

    def __init__(self) -> None:
        self._frame: tuple[int, bytes, float] | None = None
        self._ready = asyncio.Event()
        self.dropped = 0

    def put(self, seq: int, data: bytes) -> None:
        if self._frame is not None:
            self.dropped += 1
        self._frame = (seq, data, time.perf_counter())
        self._ready.set()

    async def take(self) -> tuple[int, bytes, float]:
        """The newest frame: its sequence number, its bytes and the seconds it waited in the slot."""
        await self._ready.wait()
        self._ready.clear()
        frame, self._frame = self._frame, None
        assert frame is not None
        seq, data, arrived = frame
        return seq, data, time.perf_counter() - arrived


@dataclass(frozen=True)
class _Start:
    fuser: Fuser
    subprotocol: str | None


class _Gone(Exception):
    """The client closed the socket."""


def _offered_key(websocket: WebSocket) -> str | None:
    for offered in websocket.scope.get("subprotocols", []):
        if offered.startswith(KEY_PROTOCOL):
            encoded = offered[len(KEY_PROTOCOL):]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
            except (binascii.Error, UnicodeDecodeError):
                return ""
    return None


def _check_key(websocket: WebSocket, state: ServiceState) -> None:
    """The API key from the ``Authorization`` header (any client) or the key subprotocol (a browser)."""
    offered = _offered_key(websocket)
    key = state.settings.api_key
    if offered is None or key is None or "authorization" in websocket.headers:
        require_key(websocket)  # type: ignore[arg-type]  # it reads only .app and .headers
    elif not secrets.compare_digest(offered.encode(), key.get_secret_value().encode()):
        raise FacefuseError(ErrorCode.UNAUTHORIZED, "missing or wrong API key",
                            f"offer the subprotocol '{KEY_PROTOCOL}<the key in base64url>', or send "
                            "'Authorization: Bearer <key>'")


def _check_origin(websocket: WebSocket, state: ServiceState) -> None:
    """Host like every route (DNS rebinding), and Origin: browsers let any page open a WebSocket anywhere, so only
    this server's own page and the operator's CORS origins may (a client without Origin is no browser)."""
    host = websocket.headers.get("host", "")
    problem = host_problem([value for name, value in websocket.scope["headers"] if name == b"host"],
                           state.settings.hosts_accepted)
    if problem is not None:
        raise problem
    origin = websocket.headers.get("origin")
    if origin is None or origin in state.settings.cors_origin or urlsplit(origin).netloc.lower() == host.lower():
        return
    raise FacefuseError(ErrorCode.BAD_REQUEST, "a page from another site may not open a live session here",
                        "open the page this server serves, or ask the operator to add your origin to --cors-origin",
                        {"origin": origin[:200]})


def _live_fuser(state: ServiceState) -> Fuser:
    backend = state.require_ready()
    if not isinstance(backend, LocalBackend) or backend.fuser is None:
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the live camera is not available on the Ray Serve backend",
                            "run a single-process `facefuse serve` for live sessions", {"backend": "ray"})
    return backend.fuser


def _admit(websocket: WebSocket, state: ServiceState) -> _Start:
    _check_origin(websocket, state)
    _check_key(websocket, state)
    fuser = _live_fuser(state)
    websocket.app.state.live.claim()
    offered = websocket.scope.get("subprotocols", [])
    return _Start(fuser, PROTOCOL if PROTOCOL in offered else None)


async def _refuse(websocket: WebSocket, exc: FacefuseError) -> None:
    """Before the handshake completes: an HTTP answer (status, Retry-After, the error body) where the server
    supports the WebSocket denial response, else a close with :func:`close_code`."""
    exc = public(exc)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(error_response(exc))
    else:
        await websocket.close(close_code(exc), exc.message[:120])


# Outside the OpenAPI document, like the WebSocket it belongs to (docs/live.md describes both).
@live_api.get("/v1/live", name="live_status", include_in_schema=False, dependencies=[Depends(require_key)])
async def live_status(request: Request) -> dict[str, Any]:
    """Whether a live session could start now: what a browser, which never sees a refused handshake's status,
    asks to explain the refusal (429 with Retry-After when every session is in use)."""
    state: ServiceState = request.app.state.service
    _live_fuser(state)
    slots: LiveSlots = request.app.state.live
    slots.check()
    return {"sessions": slots.active, "max_sessions": slots.limit, "limits": _limits(state.settings)}


def _limits(settings: ServeSettings) -> dict[str, float]:
    limits = settings.live_frame_limits()
    return {"max_frame_bytes": limits.max_bytes, "max_frame_pixels": limits.max_pixels, "idle_s": settings.live_idle_s}


@live_api.websocket("/v1/live", name="live")
async def live_socket(websocket: WebSocket) -> None:
    state: ServiceState = websocket.app.state.service
    try:
        start = _admit(websocket, state)
    except FacefuseError as exc:
        websocket.app.state.live.metrics.refused.labels(exc.code.value).inc()
        await _refuse(websocket, exc)
        return
    try:
        await websocket.accept(subprotocol=start.subprotocol)
        await _session(websocket, state, start.fuser)
    except _Gone:
        pass
    except FacefuseError as exc:
        websocket.app.state.live.metrics.refused.labels(exc.code.value).inc()
        await _end(websocket, public(exc), close_code(exc))
    except WebSocketDisconnect:
        pass
    except Exception:
        log.exception("live session failed")
        await _end(websocket, public(FacefuseError(ErrorCode.INTERNAL, "")), CLOSE_INTERNAL)
    finally:
        websocket.app.state.live.release()
    # the session's frames left free pages spread over the worker threads' arenas (facefuse.allocator); given back
    # after the slot is free, so a client reconnecting at once is not refused for it
    await run_in_threadpool(release_freed_memory)


async def _end(websocket: WebSocket, exc: FacefuseError, code: int) -> None:
    """The error as a last text message, then the close code (the reason repeats the message, cut to fit)."""
    try:
        await websocket.send_json({"type": "error", "error": exc.to_dict()})
        await websocket.close(code, exc.message[:120])
    except (WebSocketDisconnect, RuntimeError):  # the client has gone already
        pass


async def _receive(websocket: WebSocket, idle_s: float) -> dict[str, Any]:
    try:
        message = await asyncio.wait_for(websocket.receive(), idle_s)
    except TimeoutError:
        raise FacefuseError(ErrorCode.UPLOAD_TIMEOUT, f"nothing arrived for {idle_s:g} s, so the live session was "
                            "closed", "send frames continuously while the camera is on; start again to resume",
                            {"idle_s": idle_s}) from None
    if message["type"] == "websocket.disconnect":
        raise _Gone
    return message


@dataclass(frozen=True)
class _StartMessage:
    options: FusionOptions
    quality: int
    sources: int  # binary messages of source photos that follow (several photos of one person)


def _start_message(message: dict[str, Any], state: ServiceState) -> _StartMessage:
    """The first message: ``{"type": "start", "options": {…}, "sources": n}`` with the fields of ``POST /v1/fuse``;
    ``sources`` (1 when left out) says how many photos of the source person follow, at most
    :data:`MAX_SOURCE_PHOTOS`."""
    try:
        start = json.loads(message.get("text") or "")
    except ValueError:
        start = None
    if not isinstance(start, dict) or start.get("type") != "start" or not isinstance(start.get("options", {}), dict):
        raise FacefuseError(ErrorCode.BAD_REQUEST, "the first message must be the JSON text "
                            '{"type": "start", "options": {…}}', "see docs/live.md for the protocol")
    sources = start.get("sources", 1)
    if isinstance(sources, bool) or not isinstance(sources, int):
        raise FacefuseError(ErrorCode.INVALID_OPTION, "'sources' must be the number of source photos that follow",
                            f"send an integer from 1 to {MAX_SOURCE_PHOTOS}, or leave it out for one photo",
                            {"field": "sources"})
    check_source_count(sources)
    form_model = state.fuse_models[0]
    try:
        given = form_model.model_validate(start.get("options", {}))
    except ValidationError as exc:
        raise invalid_options(exc, form_model) from None
    fusion, encoding = fusion_request(given, state.defaults)
    quality = encoding.quality if "quality" in given.model_fields_set else LIVE_QUALITY
    return _StartMessage(live_options(fusion, state.settings.live_crop_size), quality, sources)


def _binary(message: dict[str, Any], what: str, limit: int) -> bytes:
    data = message.get("bytes")
    if data is None:
        raise FacefuseError(ErrorCode.BAD_REQUEST, f"expected {what} as a binary message", "see docs/live.md")
    if len(data) > limit:
        raise FacefuseError(ErrorCode.IMAGE_TOO_LARGE, f"{what} is {len(data) / 1024:.0f} KiB, the limit is "
                            f"{limit / 1024:.0f} KiB", "send smaller frames (640×480 JPEG is ~40 KiB)",
                            {"bytes": len(data), "max_bytes": limit})
    return bytes(data)


async def _session(websocket: WebSocket, state: ServiceState, fuser: Fuser) -> None:
    settings = state.settings
    idle_s = settings.live_idle_s
    start = _start_message(await _receive(websocket, idle_s), state)
    quality, max_bytes = start.quality, settings.image_limits().max_bytes
    sources = [_binary(await _receive(websocket, idle_s), "the source photo" if start.sources == 1 else
                       f"source photo {number} of {start.sources}", max_bytes)
               for number in range(1, start.sources + 1)]
    video = VideoOptions(every_n=settings.live_detect_every)
    # the source is analysed and prepared once, here; its errors (NO_FACE…) end the session with their own code
    session = await run_in_threadpool(LiveSession, fuser, sources, start.options, video)
    await websocket.send_json({"type": "ready", "warnings": list(session.warnings), "limits": _limits(settings)})
    limits = settings.live_frame_limits()
    newest = NewestFrame()
    metrics: LiveMetrics = websocket.app.state.live.metrics
    tasks = [asyncio.create_task(_receive_frames(websocket, newest, idle_s, limits.max_bytes)),
             asyncio.create_task(_fuse_frames(websocket, newest, session, limits, quality, metrics))]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)  # (a frame being fused finishes first)
        metrics.frames.labels("dropped").inc(newest.dropped)
        await run_in_threadpool(session.close)  # its detection thread, after the round in flight
    for task in done:
        task.result()  # the error that ended the session (or _Gone)


async def _receive_frames(websocket: WebSocket, newest: NewestFrame, idle_s: float, max_bytes: int) -> None:
    while True:
        data = _binary(await _receive(websocket, idle_s), "a camera frame", max_bytes + FRAME_HEADER.size)
        if len(data) <= FRAME_HEADER.size:
            raise FacefuseError(ErrorCode.BAD_REQUEST, "a frame message is 4 bytes of sequence number and then "
                                "the encoded frame", "see docs/live.md")
        (seq,) = FRAME_HEADER.unpack_from(data)
        newest.put(seq, data[FRAME_HEADER.size:])


def _timed(session: LiveSession, data: bytes, limits: ImageLimits,
           quality: int) -> tuple[tuple[bytes, LiveFrame], float]:
    """:meth:`LiveSession.process_encoded` and its wall seconds on the worker thread."""
    started = time.perf_counter()
    result = session.process_encoded(data, limits, quality)
    return result, time.perf_counter() - started


async def _fuse_frames(websocket: WebSocket, newest: NewestFrame, session: LiveSession, limits: ImageLimits,
                       quality: int, metrics: LiveMetrics) -> None:
    while True:
        seq, data, waited = await newest.take()
        started = time.perf_counter()
        (encoded, frame), in_session = await run_in_threadpool(_timed, session, data, limits, quality)
        seconds = time.perf_counter() - started
        metrics.frame_wait.observe(waited)
        metrics.fuse_time.observe(in_session)
        server_us = min(int(seconds * 1e6), 2**32 - 1)
        await websocket.send_bytes(REPLY_HEADER.pack(seq, server_us, newest.dropped, int(frame.fused)) + encoded)
        metrics.frames.labels("fused" if frame.fused else "unfused").inc()
        metrics.frame_time.observe(seconds)
