"""Live camera fusion: the library's LiveSession on the real clip, and ``/v1/live`` with its limits against a real
server on 127.0.0.1 (real WebSocket client, real frames of the shared clip)."""

from __future__ import annotations

import base64
import json
import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import av
import cv2
import httpx
import numpy as np
import pytest
from serve_helpers import LiveServer
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from facefuse.config import ImageLimits, StoreConfig
from facefuse.imageio import add_visible_mark, read_label
from facefuse.live import LiveSession
from facefuse.serve.live_routes import (
    FRAME_HEADER,
    KEY_PROTOCOL,
    PROTOCOL,
    REPLY_HEADER,
)

KEY = "live-key"
IDLE_S = 1.5
MAX_FRAME_PIXELS = 700 * 400  # the clip's 640×360 frames pass, a 1280×720 one does not


@pytest.fixture(scope="module")
def clip_frames(faces_dir: Path) -> list[np.ndarray]:
    """The first 20 frames of the shared Hamilton clip (RGB): one performer's face, followed throughout."""
    clip = faces_dir.parent / "video" / "short_hamilton_clip.mp4"
    with av.open(str(clip)) as container:
        return [frame.to_ndarray(format="rgb24") for _, frame in zip(range(20), container.decode(video=0))]


@pytest.fixture(scope="module")
def source_photo(faces_dir: Path) -> bytes:
    return (faces_dir / "face_recognition" / "obama.jpg").read_bytes()


def jpeg(rgb: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 85])
    assert ok
    return data.tobytes()


# ---- the library ---------------------------------------------------------------------------------------------------

def test_live_session_tracks_fuses_and_marks_every_frame(fuser, source_photo, clip_frames):
    session = LiveSession(fuser, source_photo)
    shown = [session.process(frame, index / 30) for index, frame in enumerate(clip_frames)]
    fused = [s for s in shown if s.fused]
    assert len(fused) >= len(shown) - 1  # the performer's face is in every one of these frames
    # the face was carried between detections: far fewer detector passes than frames
    assert session.tracker.detections <= 2
    for frame, out in zip(clip_frames, shown):
        assert out.image.shape == frame.shape
        corner = (slice(-40, None), slice(-160, None))
        marked = add_visible_mark(frame)
        if out.fused:
            assert not np.array_equal(out.image, marked)  # the face changed
        else:
            assert np.array_equal(out.image, marked)  # only the mark
        assert np.array_equal(out.image[corner], marked[corner]) or out.fused  # the mark is in the corner
    assert {"track", "render", "blend", "label"} <= set(fused[0].timings_ms)
    assert session.frames == len(shown) and session.frames_fused == len(fused)


def hide_face(fuser, frame: np.ndarray) -> np.ndarray:
    """``frame`` with the performer's head (from above its detector box to below the chin, twice as wide) covered by
    the dark stage curtain 300 px to its left: the face has left the picture, and the frame changes too little for
    a scene cut."""
    detected = fuser.analyzer.detect(frame)
    x, y, w, h = fuser.analyzer.box(detected.view, detected.detections[0])
    x0, y0 = int(x - 0.5 * w), max(0, int(y - 0.5 * h))
    x1, y1 = int(x + 1.5 * w), int(y + 2.5 * h)
    covered = frame.copy()
    covered[y0:y1, x0:x1] = frame[y0:y1, x0 - 300:x1 - 300]
    return covered


def test_detection_runs_aside_and_picks_up_a_face_that_enters_and_drops_one_that_leaves(fuser, source_photo,
                                                                                      clip_frames):
    """A face that enters after the first frame is fused from the next round (in the frame: nothing was followed);
    the rounds while it is followed run on the session's detection thread and confirm it (a merge that lost their
    result would drop it after two), and when it leaves the frames come back untouched but for the mark."""
    moving = 2 * (clip_frames + clip_frames[::-1])  # 80 frames of continuous motion, no cut
    hidden = [hide_face(fuser, f) for f in clip_frames[:5]]
    floor = fuser.gate.quality.min_score  # the least detector score the tracker takes for a face
    assert all(d.score < floor for f in hidden for d in fuser.analyzer.detect(f).detections)  # the face is hidden
    leaving = [hide_face(fuser, f) for f in (clip_frames[::-1] + clip_frames)[:40]]
    frames = hidden + moving[5:] + leaving
    every = LiveSession(fuser, source_photo).video.every_n
    with LiveSession(fuser, source_photo) as session:
        shown, tracked, rounds, aside = [], [], [], []
        for index, frame in enumerate(frames):
            shown.append(session.process(frame, index / 30).fused)
            tracked.append(any(t.active for t in session.tracker.tracks))
            rounds.append(session.tracker.detections)
            aside.append(session.tracker.in_flight)
        session.tracker.wait()
        assert session.tracker.scene_cuts == 0
        entered = shown.index(True)
        # it appears at frame 5, and the first round that finds it over the gate's score (the one due at frame
        # `every` or, the singer's score dipping there, the next) fuses it in its own frame
        assert 5 < entered <= 2 * every and rounds[entered] > rounds[entered - 1]
        followed = range(entered, len(hidden) + len(moving) - 5)
        assert all(tracked[i] for i in followed)  # never dropped while in the picture
        # and fused on nearly every frame: the singer's face is ~40 px wide, at the gate's size limit, so a frame
        # where it measures a pixel under is refused by the gate (not lost by the tracker)
        assert sum(shown[i] for i in followed) >= len(followed) - 3
        assert rounds[followed[-1]] - rounds[entered] >= 2  # rounds ran (and confirmed it) while it was followed
        assert sum(aside[i] and rounds[i] > rounds[i - 1] for i in followed) >= 2  # …on the detection thread
        left = len(hidden) + len(moving) - 5
        # gone at once (FaceMesh loses it) or after two rounds that did not see it
        assert not any(shown[left + 2 * every + 5:])
        last = session.process(leaving[-1], len(frames) / 30)
        assert np.array_equal(last.image, add_visible_mark(leaving[-1]))
        assert not any(t.active for t in session.tracker.tracks)


def test_a_second_face_is_picked_up_by_a_round_aside_while_the_first_is_fused(fuser, source_photo, clip_frames):
    """Two performers: the right half of each frame beside its mirror image. The mirrored one is followed from the
    first frame; the other is hidden until frame 20, so the round due at frame 30 runs aside (a face is followed):
    that frame does not wait for it, and a later frame merges the new face as a second track."""
    def pair(index: int, hidden: bool) -> np.ndarray:
        frame = clip_frames[index]
        left = (hide_face(fuser, frame) if hidden else frame)[:, 320:]
        return np.ascontiguousarray(np.hstack([left, frame[:, 320:][:, ::-1]]))

    order = 3 * (list(range(10)) + list(range(9, -1, -1)))  # frames 0-9 back and forth: both faces score well
    frames = [pair(i, hidden=n < 20) for n, i in enumerate(order)]
    floor = fuser.gate.quality.min_score
    assert all(sum(d.score >= floor for d in fuser.analyzer.detect(f).detections) == 1 for f in frames[:20:5])
    with LiveSession(fuser, source_photo) as session:
        followed, aside, fused = [], [], []
        for index, frame in enumerate(frames):
            fused.append(session.process(frame, index / 30).fused)
            followed.append(sum(t.active for t in session.tracker.tracks))
            aside.append(session.tracker.in_flight)
    every = session.video.every_n
    assert all(fused) and followed[:2 * every + 1] == [1] * (2 * every + 1)
    assert aside[2 * every]  # the round of frame 30 was handed on, and that frame went on with one face
    second = followed.index(2)
    assert 2 * every < second < 3 * every and all(n == 2 for n in followed[second:])


def test_encoded_frames_carry_the_label_and_respect_the_limits(fuser, source_photo, clip_frames):
    session = LiveSession(fuser, source_photo)
    data, frame = session.process_encoded(jpeg(clip_frames[0]), ImageLimits())
    assert read_label(data)["exif_description"].startswith("AI-generated")
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape == clip_frames[0].shape
    assert {"decode", "encode"} <= set(frame.timings_ms)
    with pytest.raises(Exception) as caught:
        session.process_encoded(jpeg(clip_frames[0]), ImageLimits(max_pixels=1000))
    assert getattr(caught.value, "code", None) is not None and caught.value.code.value == "IMAGE_TOO_LARGE"


# ---- the service ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, api_key=KEY, live_max_sessions=1, live_idle_s=IDLE_S,
                    live_max_frame_pixels=MAX_FRAME_PIXELS) as live:
        yield live


def ws_url(server: LiveServer) -> str:
    return server.url.replace("http://", "ws://") + "/v1/live"


def open_live(server: LiveServer, *, key: str | None = KEY, origin: str | None = None,
              by_subprotocol: bool = False) -> ClientConnection:
    headers = {} if key is None or by_subprotocol else {"Authorization": f"Bearer {key}"}
    if origin is not None:
        headers["Origin"] = origin
    protocols = [PROTOCOL]
    if by_subprotocol and key is not None:
        protocols.append(KEY_PROTOCOL + base64.urlsafe_b64encode(key.encode()).decode().rstrip("="))
    return connect(ws_url(server), additional_headers=headers, subprotocols=protocols, open_timeout=30,
                   max_size=2**24)


def start(ws: ClientConnection, source: bytes, options: dict | None = None) -> dict:
    ws.send(json.dumps({"type": "start", "options": options or {}}))
    ws.send(source)
    return json.loads(ws.recv(timeout=60))


def refused(server: LiveServer, **kwargs) -> tuple[int, dict, dict]:
    with pytest.raises(InvalidStatus) as caught:
        open_live(server, **kwargs)
    response = caught.value.response
    return response.status_code, dict(response.headers), json.loads(response.body)["error"]


def closed_with(ws: ClientConnection) -> tuple[dict, int]:
    """The last error message and the close code of a session the server ended."""
    message = json.loads(ws.recv(timeout=30))
    with pytest.raises(ConnectionClosed) as caught:
        ws.recv(timeout=30)
    assert caught.value.rcvd is not None
    return message, caught.value.rcvd.code


def test_live_session_end_to_end_drops_old_frames(server, source_photo, clip_frames):
    with open_live(server, by_subprotocol=True) as ws:  # the key as a browser sends it
        assert ws.subprotocol == PROTOCOL
        ready = start(ws, source_photo)
        assert ready["type"] == "ready" and ready["limits"]["idle_s"] == IDLE_S
        frames = [jpeg(f) for f in clip_frames[:12]]
        replies = []
        for seq, data in enumerate(frames[:4]):  # one at a time: every frame is answered, in order
            ws.send(FRAME_HEADER.pack(seq) + data)
            replies.append(ws.recv(timeout=60))
        for seq, data in enumerate(frames[4:], start=4):  # a burst: the server keeps only the newest
            ws.send(FRAME_HEADER.pack(seq) + data)
        while True:
            replies.append(ws.recv(timeout=60))
            if REPLY_HEADER.unpack_from(replies[-1])[0] == len(frames) - 1:
                break
    for outcome, least in (("fused", 1), ("unfused", 0), ("dropped", 1)):
        assert server.metric("facefuse_live_frames_total", outcome=outcome) >= least, outcome
    assert server.metric("facefuse_live_frame_seconds_count") >= len(replies)
    # where the time went: the burst's frames waited in the slot for the frame being fused; time in the session
    # (decode → encode) is part of the server time (taken → sent)
    assert server.metric("facefuse_live_frame_wait_seconds_count") == server.metric("facefuse_live_frame_seconds_count")
    assert server.metric("facefuse_live_frame_wait_seconds_sum") > 0
    assert 0 < server.metric("facefuse_live_fuse_seconds_sum") <= server.metric("facefuse_live_frame_seconds_sum")
    headers = [REPLY_HEADER.unpack_from(r) for r in replies]
    seqs = [h[0] for h in headers]
    assert seqs[:4] == [0, 1, 2, 3] and seqs == sorted(seqs)
    assert len(replies) < len(frames) and headers[-1][2] == len(frames) - len(replies)  # dropped, and said so
    assert any(h[3] for h in headers)  # some frame had the face fused
    assert all(0 < h[1] < 60_000_000 for h in headers)  # server time in µs
    for reply in replies:
        data = reply[REPLY_HEADER.size:]
        assert read_label(data)
        assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape == clip_frames[0].shape


def test_second_session_gets_429_with_retry_after_then_idle_timeout_frees_the_slot(server, source_photo):
    with open_live(server) as first:
        status, headers, error = refused(server)
        assert status == 429 and error["code"] == "QUEUE_FULL" and int(headers["retry-after"]) > 0
        assert error["details"]["max_sessions"] == 1
        assert server.metric("facefuse_live_sessions") == 1
        assert server.metric("facefuse_live_refused_total", code="QUEUE_FULL") >= 1
        assert start(first, source_photo)["type"] == "ready"
        began = time.monotonic()
        message, code = closed_with(first)  # no frames: the server closes it after the idle time
        assert time.monotonic() - began >= IDLE_S * 0.9
        assert code == 4408 and message["error"]["code"] == "UPLOAD_TIMEOUT"
    deadline = time.monotonic() + 10
    while True:  # the slot is free again
        try:
            with open_live(server):
                break
        except InvalidStatus:
            assert time.monotonic() < deadline
            time.sleep(0.1)


def test_api_key_and_origin_are_checked_at_the_handshake(server):
    for kwargs in ({"key": None}, {"key": "wrong"}, {"key": "wrong", "by_subprotocol": True}):
        status, _, error = refused(server, **kwargs)
        assert status == 401 and error["code"] == "UNAUTHORIZED", kwargs
    status, _, error = refused(server, origin="http://evil.example")
    assert status == 400 and "another site" in error["message"]
    with open_live(server, origin=server.url):  # the server's own page
        pass


def test_frame_caps_and_bad_messages_end_the_session_with_a_clear_code(server, source_photo, clip_frames):
    big = cv2.resize(clip_frames[0], (1280, 720))
    with open_live(server) as ws:
        start(ws, source_photo)
        ws.send(FRAME_HEADER.pack(0) + jpeg(big))  # within the bytes cap, over the pixel cap
        message, code = closed_with(ws)
        assert code == 4413 and message["error"]["code"] == "IMAGE_TOO_LARGE"
    with open_live(server) as ws:
        start(ws, source_photo)
        ws.send(FRAME_HEADER.pack(0) + b"\xff" * (600 * 1024))  # over the 512 KiB cap
        message, code = closed_with(ws)
        assert code == 4413 and "KiB" in message["error"]["message"]
    with open_live(server) as ws:
        ws.send("hello")
        message, code = closed_with(ws)
        assert code == 4400 and message["error"]["code"] == "BAD_REQUEST"
    with open_live(server) as ws:
        ws.send(json.dumps({"type": "start", "options": {"profile_degree": 500}}))
        message, code = closed_with(ws)
        assert code == 4400 and message["error"]["code"] == "INVALID_OPTION"
    with open_live(server) as ws:  # a source without a face
        ws.send(json.dumps({"type": "start", "options": {}}))
        ws.send(jpeg(np.full((360, 640, 3), 128, np.uint8)))
        message, code = closed_with(ws)
        assert message["error"]["code"] == "NO_FACE" and code == 4000 + 422


def test_a_client_that_vanishes_mid_frame_frees_its_slot_without_an_error(server, source_photo, clip_frames,
                                                                         caplog):
    caplog.set_level(logging.ERROR, logger="facefuse.serve")
    with open_live(server) as ws:
        start(ws, source_photo)
        ws.send(FRAME_HEADER.pack(0) + jpeg(clip_frames[0]))
        ws.socket.shutdown(socket.SHUT_RDWR)  # no closing handshake: the answer being fused has nowhere to go
    deadline = time.monotonic() + 30
    while True:
        try:
            with open_live(server) as again:  # the only slot is free again
                assert start(again, source_photo)["type"] == "ready"
                busy = httpx.get(server.url + "/v1/live", headers={"Authorization": f"Bearer {KEY}"})
                assert busy.status_code == 429 and busy.json()["error"]["code"] == "QUEUE_FULL"  # what the page asks
                break
        except InvalidStatus:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    # (uvicorn's own "returned without completing handshake" after a refused retry is its known issue, docs/live.md)
    assert [r.getMessage() for r in caplog.records if r.name.startswith("facefuse")] == []
    status = httpx.get(server.url + "/v1/live", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert status["sessions"] == 0 and status["max_sessions"] == 1 and status["limits"]["idle_s"] == IDLE_S


def test_without_a_key_only_loopback_names_and_live_can_be_turned_off(store_config: StoreConfig):
    with LiveServer(store_config, live_max_sessions=0) as keyless:  # no key on loopback: loopback Host names only
        port = int(keyless.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:  # a DNS-rebound page's handshake
            raw.sendall(b"GET /v1/live HTTP/1.1\r\nHost: rebound.example\r\nUpgrade: websocket\r\n"
                        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        b"Sec-WebSocket-Version: 13\r\n\r\n")
            answer = b""
            while chunk := raw.recv(65536):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 ")
        assert "host name" in json.loads(body)["error"]["message"]
        status, _, error = refused(keyless, key=None)
        assert status == 429 and error["code"] == "QUEUE_FULL" and "turned off" in error["message"]


def test_a_track_carries_its_triangles_and_toning_through_a_group_and_a_new_track_measures_them_anew(
        fuser, source_photo, clip_frames):
    """The render's stream carry (issue 19): the first frame of a track's group measures the face's triangles and
    make-up toning exactly as a photo does; the next frame of the same track reuses them (its new face differs a
    little from the one it would measure itself); a new track, or the same one after a scene cut, measures anew."""
    from facefuse.geometry.align import aligned_crop
    from facefuse.video.options import VideoOptions
    from facefuse.video.tracking import TrackedFace
    from facefuse.video.turns import FaceTurns

    session = LiveSession(fuser, source_photo)
    source, options = session.prepared, session.options
    engine = source.engine
    frames = [clip_frames[0], clip_frames[6]]
    faces = [fuser.analyzer.analyze(frame).faces[0] for frame in frames]

    def render(index: int, carry) -> np.ndarray:
        matrix, size = engine.crop_matrix(faces[index], options)
        crop = aligned_crop(frames[index], matrix, size)
        return engine.render(source.prepared, crop, matrix, faces[index], options, frames[index], carry).crop

    turns = FaceTurns(VideoOptions())
    carried = []
    for track, index, cut in ((1, 0, False), (1, 1, False), (2, 1, False), (2, 0, True)):
        (target,), taken = turns.take([TrackedFace(track, faces[index])], cut)
        carried.append(render(index, target.carry))
        for turn in taken:
            turn.close()
    own = [render(index, None) for index in (0, 1)]
    assert own[0].shape == own[1].shape  # one crop size: the second frame can take the first's toning
    assert np.array_equal(carried[0], own[0])  # a group's first frame: measured, as for a photo
    changed = carried[1].astype(float) - own[1]
    psnr = 10 * np.log10(255.0 ** 2 / max(float(np.mean(changed ** 2)), 1e-9))
    assert np.any(changed != 0) and psnr >= 30.0, psnr  # carried from the first frame: close, not the same
    assert np.array_equal(carried[2], own[1])  # a new track measures anew
    assert np.array_equal(carried[3], own[0])  # and so does a track after a scene cut
