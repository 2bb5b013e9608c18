"""The service against hostile or careless clients, each case found by a probe of a running server: idle and
slow connections, stalled and piled-up uploads, the deadline versus a slow upload, pathological JSON, what
errors reveal, HEAD probes and DNS rebinding. A real server on loopback, real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import LiveServer

from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode
from facefuse.serve.budget import PixelBudget


@pytest.fixture(scope="module")
def photo(faces_dir: Path) -> bytes:
    return (faces_dir / "face_recognition/obama-480p.jpg").read_bytes()


@pytest.fixture(scope="module")
def live(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, header_timeout_s=0.5, upload_timeout_s=1.5, max_uploads=2,
                    max_buffered_mb=1, deadline_ms=4000, api_key=None) as server:
        yield server


def run_async(coroutine) -> object:
    """``asyncio.run`` on a thread of its own: the session's Playwright browser keeps an event loop running on
    the main thread once a web test has started it."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(server.url.rsplit(":", 1)[1])), timeout=20)


def _closed_by_server(sock: socket.socket) -> bool:
    """True when the server closes the connection (before the 20 s client timeout), after any answer it sends."""
    try:
        while sock.recv(65536):
            pass
    except socket.timeout:
        return False
    except ConnectionResetError:
        pass
    return True


def _read_answer(sock: socket.socket) -> tuple[int, dict, bytes]:
    received = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body), head.lower()


def test_idle_and_slow_header_connections_are_closed(live):
    with _connect(live) as idle:
        assert _closed_by_server(idle)
    with _connect(live) as slow:
        slow.sendall(b"POST /v1/detect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        assert _closed_by_server(slow)
    with _connect(live) as kept:  # after a complete answer, the next request's headers get the same limit
        kept.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert kept.recv(65536).startswith(b"HTTP/1.1 200")
        kept.sendall(b"GET /hea")
        assert _closed_by_server(kept)


def test_a_stalled_upload_gets_408_and_the_connection_closes(live):
    with _connect(live) as sock:
        sock.sendall(b"POST /v1/detect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                     b"Content-Length: 100000\r\n\r\n--b\r\n")
        status, body, head = _read_answer(sock)
    assert status == 408 and body["error"]["code"] == ErrorCode.UPLOAD_TIMEOUT.value
    assert b"connection: close" in head


def test_uploads_beyond_the_cap_are_refused_at_once(live, photo):
    stalled = [_connect(live) for _ in range(2)]
    try:
        for sock in stalled:
            sock.sendall(b"POST /v1/detect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
                         b"boundary=b\r\nContent-Length: 100000\r\n\r\n--b\r\n")
        for _ in range(50):  # both are now being received
            if live.app.state.service.uploads.receiving == 2:
                break
            time.sleep(0.02)
        refused = httpx.post(live.url + "/v1/detect", files={"image": ("p.jpg", photo)}, timeout=20)
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "QUEUE_FULL"
        assert refused.headers["retry-after"]
    finally:
        for sock in stalled:
            sock.close()
    for _ in range(200):  # the stalled uploads time out and free their places
        if live.app.state.service.uploads.receiving == 0:
            break
        time.sleep(0.05)
    assert httpx.post(live.url + "/v1/detect", files={"image": ("p.jpg", photo)}, timeout=20).status_code == 200
    too_much = httpx.post(live.url + "/v1/detect", files={"image": ("p.jpg", b"\xff" * (3 * 2**20 // 2))},
                          timeout=20)  # 1.5 MiB: over the 1 MiB of buffered bodies this server may hold
    assert too_much.status_code == 429
    assert live.app.state.service.uploads.held == 0  # nothing leaks from refused or finished requests


def test_the_deadline_starts_once_the_upload_is_in(live, photo):
    """A body trickling in over 1.2 s: the upload has its own limit (1.5 s here), and the 4 s deadline starts when
    the body is in, so the work still gets all of it (the probe saw a 504 once the upload ate the deadline)."""
    body = (b"--b\r\nContent-Disposition: form-data; name=\"image\"; filename=\"p.jpg\"\r\n"
            b"Content-Type: image/jpeg\r\n\r\n" + photo + b"\r\n--b--\r\n")
    with _connect(live) as sock:
        sock.sendall(b"POST /v1/detect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        pieces = 6
        for i in range(pieces):  # 1.2 s of upload: inside the 1.5 s upload limit
            sock.sendall(body[i * len(body) // pieces:(i + 1) * len(body) // pieces])
            time.sleep(0.2)
        status, answer, _ = _read_answer(sock)
    assert status == 200 and len(answer["faces"]) == 1


def test_unauthorized_closes_the_connection(store_config, photo):
    with LiveServer(store_config, api_key="k" * 32) as server:
        answer = httpx.post(server.url + "/v1/detect", files={"image": ("p.jpg", photo)})
        assert answer.status_code == 401 and answer.headers["connection"] == "close"


@pytest.mark.parametrize("body", [b'{"image": "AAAA", "role": ' + b"9" * 5000 + b"}",
                                  b"[" * 100_000 + b"]" * 100_000,
                                  b'{"source": "AAAA", "target": "AAAA", "quality": ' + b"1" * 5000 + b"}"],
                         ids=["huge integer", "deep nesting", "huge integer option"])
def test_pathological_json_is_a_400(live, body, caplog):
    for path in ("/v1/detect", "/v1/fuse"):
        answer = httpx.post(live.url + path, content=body, headers={"Content-Type": "application/json"}, timeout=20)
        assert answer.status_code == 400 and answer.json()["error"]["code"] in ("BAD_REQUEST", "INVALID_OPTION")
    assert "Traceback" not in caplog.text


def test_load_errors_do_not_reveal_server_paths(tmp_path, photo):
    home, mirror = tmp_path / "secret-home", tmp_path / "secret-mirror"
    mirror.mkdir()
    with LiveServer(StoreConfig(home=home, mirror=mirror, offline=True), wait_ready=False) as server:
        for _ in range(600):
            answer = httpx.get(server.url + "/readyz")
            if "cause" in answer.json()["error"]["details"]:
                break
            time.sleep(0.05)
        assert answer.status_code == 503 and answer.json()["error"]["details"]["cause"]["code"] == "MODEL_MISSING"
        fused = httpx.post(server.url + "/v1/detect", files={"image": ("p.jpg", photo)})
        for text in (answer.text, fused.text):
            assert "secret-" not in text and str(tmp_path) not in text


def test_head_on_get_routes(live):
    for path in ("/healthz", "/readyz", "/", "/metrics", "/v1/options"):
        answer = httpx.head(live.url + path)
        assert answer.status_code == 200 and answer.content == b"", path
        assert int(answer.headers["content-length"]) > 0  # the GET answer's length
    assert httpx.head(live.url + "/v1/fuse").status_code == 405


def test_dns_rebinding_is_refused_without_an_api_key(live, store_config):
    rebound = httpx.get(live.url + "/healthz", headers={"Host": "attacker.example:8000"})
    assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "BAD_REQUEST"
    assert httpx.get(live.url + "/healthz", headers={"Host": "localhost:8000"}).status_code == 200
    with LiveServer(store_config, allowed_hosts="photos.example,127.0.0.1") as named:
        assert httpx.get(named.url + "/healthz", headers={"Host": "photos.example"}).status_code == 200
        assert httpx.get(named.url + "/healthz", headers={"Host": "localhost"}).status_code == 400  # not listed


def test_pixel_budget_admits_by_decoded_size():
    async def scenario() -> list[str]:
        budget, events = PixelBudget(30_000_000), []

        async def request(name: str, pixels: int, hold_s: float) -> None:
            async with budget.hold(pixels, time.monotonic() + 10):
                events.append(f"{name} in ({budget.in_use})")
                await asyncio.sleep(hold_s)
            events.append(f"{name} out")

        first = asyncio.create_task(request("a", 25_000_000, 0.2))
        await asyncio.sleep(0.05)
        second = asyncio.create_task(request("b", 25_000_000, 0))
        await asyncio.gather(first, second)
        with pytest.raises(Exception) as info:  # room never comes: the request's deadline ends the wait
            async with budget.hold(25_000_000, time.monotonic() + 10):
                async with budget.hold(10_000_000, time.monotonic() + 0.1):
                    pass
        events.append(getattr(info.value, "code", "?"))
        return events

    assert run_async(scenario()) == ["a in (25000000)", "a out", "b in (25000000)", "b out",
                                       ErrorCode.DEADLINE_EXCEEDED]


def test_many_small_files_that_decode_huge_are_served_within_the_pixel_budget(store_config):
    """Small PNGs of 5000×5000 pixels: every request is answered (no face here, so 200 with an empty list), and the
    photos held decoded at once never pass the 30 MP budget although two workers and four requests want 100 MP."""
    import cv2
    import numpy as np

    ok, png = cv2.imencode(".png", np.zeros((5000, 5000, 3), np.uint8))
    assert ok and len(png) < 200_000

    async def burst(url: str) -> list[int]:
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            answers = await asyncio.gather(*(http.post("/v1/detect", files={"image": ("x.png", png.tobytes())})
                                             for _ in range(4)))
        return [a.status_code for a in answers]

    with LiveServer(store_config, max_decoded_mpx=30, max_pixels=30_000_000, workers=2,
                    deadline_ms=600_000) as server:  # a long deadline: this test is about memory, not speed
        assert run_async(burst(server.url)) == [200] * 4
        budget = server.app.state.service.pixels
        assert budget.in_use == 0 and budget.peak == 25_000_000  # one photo at a time fits in 30 MP
