"""The HTTP service end to end: a real uvicorn server on loopback, real photos, real models.

Every error status of the table is produced by a real bad input (or a real server condition), and every answer,
good or bad, must be JSON of the one error shape or the promised image — never a 500 or a traceback.
"""

from __future__ import annotations

import base64
import io
import json
import os
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image
from serve_helpers import LiveServer, assert_error

from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode
from facefuse.imageio import read_label
from facefuse.serve.negotiation import image_format_wanted

KEY = "correct-horse-battery-staple"
ORIGIN = "http://app.example.test"


@pytest.fixture(scope="module")
def server(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, max_body_mb=3, cors_origin=[ORIGIN]) as live:
        yield live


@pytest.fixture(scope="module")
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def photos(faces_dir: Path, service_photos: dict[str, Path]) -> dict[str, Path]:
    paths = {**service_photos, "sideways": faces_dir / "insightface/inspireface/rotate/rot_90.jpg"}
    for path in paths.values():
        assert path.is_file(), path
    return paths


def files(photos: dict[str, Path], source: str = "source", target: str = "target") -> dict[str, tuple[str, bytes]]:
    return {"source": ("s.jpg", photos[source].read_bytes()), "target": ("t.jpg", photos[target].read_bytes())}


def png_bytes(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 128, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


# -- fusion ---------------------------------------------------------------------------------------------------


def test_fuse_multipart_answers_json_with_image_faces_and_timings(client, photos):
    response = client.post("/v1/fuse", files=files(photos), data={"profile_degree": "60", "feature_degree": "80"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["format"] == "jpeg" and body["request_id"] == response.headers["x-request-id"]
    image_bytes = base64.b64decode(body["image_base64"])
    target = Image.open(photos["target"])
    result = Image.open(io.BytesIO(image_bytes))
    assert result.format == "JPEG" and result.size == target.size
    assert read_label(image_bytes)  # the AI-generated metadata label is always there
    assert len(body["faces"]) == 1
    assert {"queue", "total", "encode"} <= set(body["timings_ms"])
    assert "total;dur=" in response.headers["server-timing"]


def test_fuse_changes_the_face_and_degree_zero_keeps_the_target(client, photos):
    def fused(degree: str) -> tuple[np.ndarray, list[float]]:
        data = {"profile_degree": degree, "feature_degree": degree, "visible_label": "false", "output_format": "png"}
        response = client.post("/v1/fuse", files=files(photos), data=data)
        assert response.status_code == 200, response.text
        body = response.json()
        image = Image.open(io.BytesIO(base64.b64decode(body["image_base64"]))).convert("RGB")
        return np.asarray(image, np.int16), body["faces"][0]["box"]

    target = np.asarray(Image.open(photos["target"]).convert("RGB"), np.int16)
    unchanged, _ = fused("0")
    changed, (x, y, w, h) = fused("100")
    face = (slice(int(y), int(y + h)), slice(int(x), int(x + w)))
    assert np.abs(unchanged - target).max() == 0  # PNG is lossless: degree 0 must leave every pixel alone
    assert np.abs(changed[face] - target[face]).mean() > 3.0


def test_fuse_json_base64_with_image_response(client, photos):
    payload = {
        "source": base64.b64encode(photos["source"].read_bytes()).decode(),
        "target": "data:image/jpeg;base64," + base64.b64encode(photos["target"].read_bytes()).decode(),
        "feature_degree": 50, "quality": 80, "visible_label": True,
    }
    response = client.post("/v1/fuse", json=payload, headers={"Accept": "image/webp"})
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"] == "image/webp"
    assert Image.open(io.BytesIO(response.content)).format == "WEBP"
    assert read_label(response.content)


def test_output_format_field_wins_over_accept(client, photos):
    response = client.post("/v1/fuse", files=files(photos), data={"output_format": "png"},
                           headers={"Accept": "image/*"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/png"


def test_sideways_photo_still_works(client, photos):
    detect = client.post("/v1/detect", files={"image": ("r.jpg", photos["sideways"].read_bytes())})
    assert detect.status_code == 200
    report = detect.json()
    assert report["verdict"]["accepted"] and len(report["faces"]) == 1
    assert abs(report["faces"][0]["pose"]["roll"]) > 60  # really lying on its side in the file
    response = client.post("/v1/fuse", files=files(photos, target="sideways"))
    assert response.status_code == 200, response.text


def test_group_photo_face_choice(client, photos):
    detect = client.post("/v1/detect", files={"image": ("g.jpg", photos["group"].read_bytes())}).json()
    assert len(detect["faces"]) >= 2
    one = client.post("/v1/fuse", files=files(photos, target="group"), data={"target_face": "1"})
    assert one.status_code == 200 and [f["index"] for f in one.json()["faces"]] == [1]
    everyone = client.post("/v1/fuse", files=files(photos, target="group"), data={"target_face": "all"})
    assert everyone.status_code == 200 and len(everyone.json()["faces"]) >= 2
    missing = client.post("/v1/fuse", files=files(photos, target="group"), data={"target_face": "9"})
    assert assert_error(missing, ErrorCode.FACE_INDEX_OUT_OF_RANGE)["details"]["image"] == "target"


# -- detect ---------------------------------------------------------------------------------------------------


def test_detect_reports_faces_and_verdict(client, photos):
    good = client.post("/v1/detect", files={"image": ("a.jpg", photos["source"].read_bytes())})
    assert good.status_code == 200
    report = good.json()
    assert len(report["faces"]) == 1 and report["verdict"]["accepted"] is True
    face = report["faces"][0]
    assert {"box", "score", "pose", "quality"} <= set(face) and "landmarks" not in face
    empty = client.post("/v1/detect", json={"image": base64.b64encode(photos["no_face"].read_bytes()).decode(),
                                            "role": "target"})
    assert empty.status_code == 200
    assert empty.json()["verdict"] == {"accepted": False, "code": "NO_FACE",
                                       "message": "no face was found in the target photo",
                                       "hint": empty.json()["verdict"]["hint"]}


# -- errors from real bad inputs ------------------------------------------------------------------------------


def test_empty_body(client):
    assert_error(client.post("/v1/fuse"), ErrorCode.BAD_REQUEST)
    assert_error(client.post("/v1/fuse", content=b"", headers={"Content-Type": "application/json"}),
                 ErrorCode.BAD_REQUEST)


def test_random_bytes_are_not_an_image(client, photos):
    noise = os.urandom(4096)
    error = assert_error(client.post("/v1/fuse", files={"source": ("x.jpg", noise, "image/jpeg"),
                                                        "target": ("t.jpg", photos["target"].read_bytes())}),
                         ErrorCode.UNSUPPORTED_IMAGE)
    assert error["details"]["image"] == "source"
    assert_error(client.post("/v1/fuse", content=noise, headers={"Content-Type": "image/jpeg"}),
                 ErrorCode.UNSUPPORTED_IMAGE)


def test_truncated_jpeg(client, photos):
    data = photos["target"].read_bytes()
    response = client.post("/v1/fuse", files={"source": ("s.jpg", photos["source"].read_bytes()),
                                              "target": ("t.jpg", data[: len(data) // 3])})
    assert assert_error(response, ErrorCode.CORRUPT_IMAGE)["details"]["image"] == "target"


def test_one_pixel_image(client, photos):
    response = client.post("/v1/fuse", files={"source": ("s.png", png_bytes(1, 1)),
                                              "target": ("t.jpg", photos["target"].read_bytes())})
    assert_error(response, ErrorCode.IMAGE_TOO_SMALL)


def test_photo_without_a_face(client, photos):
    error = assert_error(client.post("/v1/fuse", files=files(photos, target="no_face")), ErrorCode.NO_FACE)
    assert error["message"] == "no face was found in the target photo"


def test_bad_options(client, photos):
    for field, value in [("profile_degree", "150"), ("feature_degree", "nan"), ("quality", "0"),
                         ("output_format", "gif"), ("target_face", "left"), ("colour", "red")]:
        assert_error(client.post("/v1/fuse", files=files(photos), data={field: value}), ErrorCode.INVALID_OPTION)
    missing = client.post("/v1/fuse", files={"source": ("s.jpg", photos["source"].read_bytes())})
    assert assert_error(missing, ErrorCode.BAD_REQUEST)["details"]["field"] == "target"
    bad_base64 = client.post("/v1/fuse", json={"source": "not base64!", "target": "AAAA"})
    assert_error(bad_base64, ErrorCode.BAD_REQUEST)


def _raw_post(server: LiveServer, head: str, body: bytes) -> tuple[int, dict, bytes]:
    """Send a request by hand (so the client cannot refuse to send it) and read the status, JSON body and headers.

    The body is sent from a second thread while this one reads: a server that refuses early answers and closes the
    connection without reading the rest (``Connection: close``), and the sender then sees the connection reset."""
    port = int(server.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        def send() -> None:
            try:
                sock.sendall(head.encode() + b"\r\n\r\n" + body)
            except OSError:
                pass

        sender = threading.Thread(target=send)
        sender.start()
        received = b""
        while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < _length(received):
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        with contextlib.suppress(OSError):  # already reset by the server, or not: either way stop the sender
            sock.shutdown(socket.SHUT_RDWR)
        sender.join()
    header, _, payload = received.partition(b"\r\n\r\n")
    return int(header.split()[1]), json.loads(payload), header.lower()


def _length(response: bytes) -> int:
    for line in response.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_oversized_body_refused_from_its_declared_length_before_it_is_sent(server):
    declared = 50 * 1024 * 1024  # only a few bytes follow: the server must answer without waiting for the rest
    status, body, headers = _raw_post(server, f"POST /v1/fuse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                              f"multipart/form-data; boundary=b\r\nContent-Length: {declared}", b"--b\r\n")
    assert status == 413 and body["error"]["code"] == "IMAGE_TOO_LARGE"
    assert body["error"]["message"] == "the request body is over 3 MiB"
    assert b"connection: close" in headers  # the rest of the body is never read
    assert body["error"]["details"]["max_body_bytes"] == 3 * 1024 * 1024


def test_oversized_chunked_body_refused_while_reading(server):
    chunk = b"x" * 65536
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(4 * 16 + 2)) + b"0\r\n\r\n"
    status, body, _ = _raw_post(server, "POST /v1/fuse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                        "application/json\r\nTransfer-Encoding: chunked", chunks)
    assert status == 413 and body["error"]["code"] == "IMAGE_TOO_LARGE"
    assert 3 * 1024 * 1024 < body["error"]["details"]["bytes_read"] < len(chunk) * (4 * 16 + 2)  # stopped early


def test_no_request_can_name_a_server_file(client, photos):
    for name in (str(photos["source"]), "file://" + str(photos["source"]), "http://127.0.0.1/x.jpg"):
        response = client.post("/v1/fuse", json={"source": name, "target": name})
        assert_error(response, ErrorCode.BAD_REQUEST)
    dotless = "/usr/bin/env"  # a real file whose path is valid base64: decoded to 9 garbage bytes, never opened
    assert_error(client.post("/v1/detect", json={"image": dotless}), ErrorCode.UNSUPPORTED_IMAGE)


def test_unknown_route_and_method(client):
    assert_error(client.get("/v1/nothing"), ErrorCode.NOT_FOUND)
    assert_error(client.get("/v1/fuse"), ErrorCode.METHOD_NOT_ALLOWED)


# -- operations -----------------------------------------------------------------------------------------------


def test_health_ready_models_docs(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["ready_after_s"] > 0
    models = client.get("/v1/models").json()
    assert models["engine"] == "mesh" and "CPUExecutionProvider" in models["providers"]
    assert any(m["name"] == "facemesh" and m["cached"] for m in models["models"])
    shipped = next(m for m in models["models"] if m["name"] == "face_segmenter")
    assert shipped["cached"] and shipped["commercial_use"] is False and "non-commercial" in shipped["licence"]
    schema = client.get("/openapi.json").json()
    for path in ("/v1/fuse", "/v1/detect", "/healthz", "/readyz", "/metrics", "/v1/models"):
        assert path in schema["paths"]
    fuse_body = schema["paths"]["/v1/fuse"]["post"]["requestBody"]["content"]
    assert {"multipart/form-data", "application/json"} <= set(fuse_body)
    assert client.get("/docs").status_code == 200


def test_metrics_count_requests_by_route_and_code(server, client, photos):
    before_ok = server.metric("facefuse_requests_total", route="/v1/detect", code="200")
    before_415 = server.metric("facefuse_requests_total", route="/v1/detect", code="415")
    client.post("/v1/detect", files={"image": ("a.jpg", photos["source"].read_bytes())})
    client.post("/v1/detect", files={"image": ("a.jpg", b"not an image at all")})
    assert server.metric("facefuse_requests_total", route="/v1/detect", code="200") == before_ok + 1
    assert server.metric("facefuse_requests_total", route="/v1/detect", code="415") == before_415 + 1
    assert server.metric("facefuse_stage_duration_seconds_count", stage="detect") >= 1
    assert server.metric("facefuse_model_load_seconds", component="analyzer") > 0
    assert server.metric("facefuse_ready") == 1


def test_page_and_cors(client):
    page = client.get("/")
    assert page.status_code == 200 and "needs their consent" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for asset in ("/static/app.js", "/static/style.css"):
        assert client.get(asset).status_code == 200
    allowed = client.options("/v1/fuse", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    assert allowed.headers.get("access-control-allow-origin") == ORIGIN
    other = client.get("/healthz", headers={"Origin": "http://elsewhere.test"})
    assert "access-control-allow-origin" not in other.headers


# -- other server configurations ------------------------------------------------------------------------------


def test_api_key(store_config, photos):
    with LiveServer(store_config, api_key=KEY) as live, httpx.Client(base_url=live.url, timeout=60) as http:
        image = {"image": ("a.jpg", photos["source"].read_bytes())}
        assert_error(http.post("/v1/detect", files=image), ErrorCode.UNAUTHORIZED)
        wrong = http.post("/v1/detect", files=image, headers={"Authorization": "Bearer " + KEY[:-1]})
        assert assert_error(wrong, ErrorCode.UNAUTHORIZED) and wrong.headers["www-authenticate"] == "Bearer"
        assert http.post("/v1/detect", files=image, headers={"Authorization": "Bearer " + KEY}).status_code == 200
        assert http.get("/healthz").status_code == 200  # probes stay open
        cors = http.options("/v1/fuse", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
        assert "access-control-allow-origin" not in cors.headers  # CORS is off unless configured


@pytest.mark.parametrize("case", ["models missing offline", "unknown engine"])
def test_not_ready_when_models_cannot_be_loaded(case, tmp_path, store_config, photos):
    if case == "models missing offline":
        store, settings, cause = StoreConfig(home=tmp_path, mirror=None, offline=True), {}, "MODEL_MISSING"
    else:
        store, settings, cause = store_config, {"engines": "no-such-engine"}, "INVALID_OPTION"
    with LiveServer(store, wait_ready=False, **settings) as live, httpx.Client(base_url=live.url, timeout=60) as http:
        for _ in range(600):
            error = assert_error(http.get("/readyz"), ErrorCode.NOT_READY)
            if "cause" in error["details"]:
                break
            time.sleep(0.05)
        assert error["details"]["cause"]["code"] == cause
        assert_error(http.post("/v1/fuse", files=files(photos)), ErrorCode.NOT_READY)
        assert http.get("/healthz").status_code == 200


def test_deadline_passed(store_config, photos):
    with LiveServer(store_config, deadline_ms=1) as live, httpx.Client(base_url=live.url, timeout=60) as http:
        assert_error(http.post("/v1/fuse", files=files(photos)), ErrorCode.DEADLINE_EXCEEDED)


# -- content negotiation (a pure function: its table is the spec) ---------------------------------------------


@pytest.mark.parametrize("accept, expected", [
    ("", (False, None)),
    ("*/*", (False, None)),
    ("application/json", (False, None)),
    ("image/png", (True, "png")),
    ("image/jpeg, */*;q=0.8", (True, "jpeg")),
    ("image/*", (True, None)),
    ("image/png, */*", (True, "png")),
    ("application/json, image/png", (False, "png")),
    ("image/webp;q=0.9, application/json;q=0.5", (True, "webp")),
    ("image/png;q=0", (False, None)),
    ("image/gif", (False, None)),
])
def test_accept_negotiation(accept, expected):
    assert image_format_wanted(accept) == expected


def test_engine_field_chooses_the_engine_per_request(client, photos):
    """`engine` in the form or JSON: the built-in mesh engine works, an unknown one is refused with a 400.
    (A swapper engine through the whole pipeline is tested with stand-in models in tests/test_swappers.py.)"""
    assert client.post("/v1/fuse", files=files(photos), data={"engine": "mesh"}).status_code == 200
    unknown = client.post("/v1/fuse", files=files(photos), data={"engine": "no-such-engine"})
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "INVALID_OPTION"
    assert "mesh" in unknown.json()["error"]["hint"]
