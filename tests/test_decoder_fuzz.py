"""Every decoder against damaged files: real photos in every supported format (and MPO) and real clips, mutated by
Hypothesis (bytes flipped, overwritten, inserted, cut), must decode or be refused with a 4xx error code — never
another exception, which the service would answer with a 500.

Why mutated real files rather than random bytes: random bytes never get past the first signature check; a real
file with a few damaged bytes reaches the parsers' inner structures (IFD entries, chunk lengths, atoms), where the
probe found a TIFF whose StripOffsets were typed RATIONAL raising TypeError. The run is bounded (fixed examples,
derandomized) so it fits the shared CI machine.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from serve_helpers import LiveServer, assert_error

from facefuse.config import ImageLimits, StoreConfig
from facefuse.errors import ERROR_TABLE, ErrorCode, FacefuseError
from facefuse.imageio import decode_image
from facefuse.jobs.intake import IntakeLimits, check_video
from facefuse.video.io import inspect_video, probe

BOUNDED = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LIMITS = ImageLimits(max_pixels=4_000_000)


def _saved(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def photo(faces_dir: Path) -> Image.Image:
    return Image.open(faces_dir / "face_recognition/obama-240p.jpg").convert("RGB")


@pytest.fixture(scope="module")
def photo_files(photo: Image.Image, faces_dir: Path) -> dict[str, bytes]:
    """One real photo written by real encoders in each format the service reads, plus the original files."""
    grey, second = photo.convert("L"), photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return {
        "jpeg": (faces_dir / "face_recognition/obama-240p.jpg").read_bytes(),
        "png": (faces_dir / "face_recognition/alex-lacamoire.png").read_bytes(),
        "webp": _saved(photo, "WEBP", quality=80),
        "bmp": _saved(photo, "BMP"),
        "tiff": _saved(photo, "TIFF"),
        "tiff-lzw": _saved(photo, "TIFF", compression="tiff_lzw"),
        "tiff-jpeg": _saved(photo, "TIFF", compression="jpeg"),
        "pgm": _saved(grey, "PPM"),
        "mpo": _saved(photo, "MPO", save_all=True, append_images=[second]),
    }


@st.composite
def mutated(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` with one to four damages, most of them in the first kilobyte, where the headers are."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        head = draw(st.booleans())
        at = draw(st.integers(0, min(len(data), 1024) - 1 if head else len(data) - 1))
        kind = draw(st.sampled_from(["flip", "overwrite", "insert", "cut", "repeat"]))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "overwrite":
            noise = draw(st.binary(min_size=1, max_size=8))
            data[at:at + len(noise)] = noise
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif kind == "cut":
            del data[at:]
        else:
            data[at:at] = data[at:at + draw(st.integers(1, 64))]
    return bytes(data)


def _assert_refused_properly(error: FacefuseError) -> None:
    assert ERROR_TABLE[error.code].http_status < 500, error


@given(data=st.data())
@BOUNDED
def test_damaged_photos_decode_or_get_a_4xx(photo_files: dict[str, bytes], data: st.DataObject) -> None:
    fmt = data.draw(st.sampled_from(sorted(photo_files)))
    damaged = data.draw(mutated(photo_files[fmt]))
    at_least = data.draw(st.sampled_from([None, 100]))  # 100: a fusion source's reduced decode (½–¼ of 427×240)
    try:
        decoded = decode_image(damaged, LIMITS, at_least)
    except FacefuseError as error:
        _assert_refused_properly(error)
        return
    assert decoded.pixels.dtype == np.uint8 and decoded.pixels.ndim == 3 and decoded.pixels.shape[2] == 3
    assert at_least is None or max(decoded.pixels.shape[:2]) >= at_least or decoded.reduction == 1


@pytest.fixture(scope="module")
def clips(faces_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    from job_helpers import make_clip

    folder = tmp_path_factory.mktemp("fuzz-clips")
    return {"mp4": make_clip(folder / "c.mp4", faces_dir, frames=6).read_bytes(),
            "mkv": make_clip(folder / "c.mkv", faces_dir, frames=6, audio=False).read_bytes()}


@given(data=st.data())
@settings(BOUNDED, max_examples=60)
def test_damaged_videos_are_probed_or_get_a_4xx(clips: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory,
                                                data: st.DataObject) -> None:
    damaged = data.draw(mutated(clips[data.draw(st.sampled_from(sorted(clips)))]))
    path = tmp_path_factory.mktemp("fuzzed") / "clip.bin"
    path.write_bytes(damaged)
    for read in (lambda: inspect_video(damaged), lambda: check_video(damaged, IntakeLimits()), lambda: probe(path)):
        try:
            read()
        except FacefuseError as error:
            _assert_refused_properly(error)


def _strip_offsets_typed(tiff: bytes, field_type: int) -> bytes:
    """The TIFF with its StripOffsets entry (tag 273) declared as ``field_type`` (5 RATIONAL, 11 FLOAT,
    12 DOUBLE): what the probe sent."""
    data = bytearray(tiff)
    assert data[:2] == b"II"
    ifd = struct.unpack_from("<I", data, 4)[0]
    for i in range(struct.unpack_from("<H", data, ifd)[0]):
        entry = ifd + 2 + 12 * i
        if struct.unpack_from("<H", data, entry)[0] == 273:
            struct.pack_into("<H", data, entry + 2, field_type)
            return bytes(data)
    raise AssertionError("no StripOffsets entry")


@pytest.fixture(scope="module")
def server(store_config: StoreConfig) -> Iterator[LiveServer]:
    with LiveServer(store_config, deadline_ms=60_000) as live:
        yield live


def test_tiff_with_oddly_typed_strip_offsets_is_a_corrupt_image(server, photo_files: dict[str, bytes]) -> None:
    """Probe defect 3: ``unexpected TypeError`` (500) on fuse and detect."""
    source = photo_files["jpeg"]
    for field_type in (5, 11, 12):
        bad = _strip_offsets_typed(photo_files["tiff"], field_type)
        with pytest.raises(FacefuseError) as refused:
            decode_image(bad)
        assert refused.value.code is ErrorCode.CORRUPT_IMAGE
        assert_error(httpx.post(server.url + "/v1/detect", files={"image": ("x.tif", bad)}, timeout=60),
                     ErrorCode.CORRUPT_IMAGE)
        assert_error(httpx.post(server.url + "/v1/fuse", files={"source": ("s.jpg", source),
                                                                "target": ("t.tif", bad)}, timeout=60),
                     ErrorCode.CORRUPT_IMAGE)


def test_mpo_is_read_as_its_first_picture(server, photo: Image.Image, photo_files: dict[str, bytes]) -> None:
    """Probe defect 9: MPO (a JPEG followed by more JPEGs, as phones and stereo cameras write) got 415."""
    decoded = decode_image(photo_files["mpo"])
    assert decoded.format == "JPEG" and decoded.pixels.shape == (photo.height, photo.width, 3)
    first = np.asarray(photo, np.float32)
    assert np.abs(decoded.pixels.astype(np.float32) - first).mean() < 3  # the first picture, not the mirrored one
    detected = httpx.post(server.url + "/v1/detect", files={"image": ("p.mpo", photo_files["mpo"])}, timeout=60)
    assert detected.status_code == 200 and len(detected.json()["faces"]) == 1, detected.text
    fused = httpx.post(server.url + "/v1/fuse", files={"source": ("s.mpo", photo_files["mpo"]),
                                                       "target": ("t.jpg", photo_files["jpeg"])}, timeout=60)
    assert fused.status_code == 200, fused.text
