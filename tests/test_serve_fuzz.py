"""Property-based fuzzing of uploads and form fields: whatever arrives, the answer is never a 5xx.

Inputs mix garbage with near-valid data (real photos cut at random points, tiny and odd-sized images, option values
of every type), because the interesting failures hide just next to valid requests.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from serve_helpers import LiveServer

from facefuse.config import StoreConfig

FIELDS = ["profile_degree", "feature_degree", "target_face", "output_format", "quality", "visible_label"]
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def server(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, max_body_mb=2, deadline_ms=30_000) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def real(faces_dir: Path) -> list[bytes]:
    rec = faces_dir / "face_recognition"
    return [(rec / "obama-240p.jpg").read_bytes(), (rec / "obama_small.jpg").read_bytes()]


def _png(width: int, height: int, mode: str) -> bytes:
    buffer = io.BytesIO()
    array = np.random.default_rng(width * 31 + height).integers(0, 255, (height, width, 4), dtype=np.uint8)
    Image.fromarray(array, "RGBA").convert(mode).save(buffer, "PNG")
    return buffer.getvalue()


def image_bytes(real: list[bytes]) -> st.SearchStrategy[bytes]:
    whole = st.sampled_from(real)
    return st.one_of(
        st.binary(max_size=2048),
        whole,
        st.tuples(whole, st.floats(0, 1)).map(lambda t: t[0][: int(len(t[0]) * t[1])]),
        st.tuples(whole, st.integers(0, 4000), st.binary(min_size=1, max_size=8)).map(
            lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + len(t[2]):]),
        st.builds(_png, st.integers(1, 64), st.integers(1, 64), st.sampled_from(["RGB", "L", "RGBA", "P", "1"])),
    )


field_values = st.one_of(st.text(max_size=20), st.integers(-1000, 1000).map(str),
                         st.floats(allow_nan=True, allow_infinity=True).map(str),
                         st.sampled_from(["largest", "all", "0", "1", "jpeg", "png", "webp", "true", "false", "on"]))


def assert_not_5xx(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text[:300]
    if response.status_code >= 400:
        error = response.json()["error"]
        assert set(error) == {"code", "message", "hint", "details"}


@FUZZ
@given(data=st.data())
def test_multipart_fuse_never_5xx(http, real, data: st.DataObject) -> None:
    files: dict[str, Any] = {}
    for name in data.draw(st.lists(st.sampled_from(["source", "target", "image", "extra"]), max_size=3, unique=True)):
        files[name] = ("f.jpg", data.draw(image_bytes(real)), data.draw(st.sampled_from(["image/jpeg", "text/plain"])))
    form = data.draw(st.dictionaries(st.sampled_from(FIELDS + ["junk"]), field_values, max_size=4))
    path = data.draw(st.sampled_from(["/v1/fuse", "/v1/detect"]))
    assert_not_5xx(http.post(path, files=files or None, data=form or None))


@FUZZ
@given(data=st.data())
def test_json_fuse_never_5xx(http, real, data: st.DataObject) -> None:
    body: dict[str, Any] = {}
    for name in ("source", "target"):
        if data.draw(st.booleans()):
            raw = data.draw(image_bytes(real))
            body[name] = data.draw(st.one_of(st.just(base64.b64encode(raw).decode()), st.text(max_size=30),
                                             st.integers(), st.none()))
    # JSON has no NaN or infinity (the client could not even encode them); their text forms are in field_values
    scalar = st.one_of(field_values, st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.booleans(),
                       st.none(), st.lists(st.integers()))
    body.update(data.draw(st.dictionaries(st.sampled_from(FIELDS), scalar, max_size=4)))
    payload = data.draw(st.one_of(st.just(body), st.lists(st.integers(), max_size=3), st.text(max_size=10)))
    assert_not_5xx(http.post("/v1/fuse", json=payload))


@FUZZ
@given(body=st.binary(max_size=4096),
       content_type=st.sampled_from(["multipart/form-data; boundary=xyz", "multipart/form-data", "application/json",
                                     "image/png", "", "text/plain", "multipart/form-data; boundary=\"\""]),
       accept=st.sampled_from(["*/*", "image/png", "image/*;q=0.5, application/json", "garbage;;q=x", ""]))
def test_raw_bodies_never_5xx(http, body: bytes, content_type: str, accept: str) -> None:
    headers = {"Accept": accept}
    if content_type:
        headers["Content-Type"] = content_type
    assert_not_5xx(http.post("/v1/fuse", content=body, headers=headers))
