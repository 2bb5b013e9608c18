"""A fusion's source photo decoded at reduced scale (a phone's 12 MP JPEG): decoded at ½ when its face keeps enough
pixels for the render, in full when not (a group photo's small faces), the same fusion either way, and never a
reduced photo where the full one is owed (a target, a detect call, the cache). Real photos scaled up to a phone
photo's size, real models."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from phone_photos import phone_jpeg
from PIL import Image

from facefuse.fusion.engine import FusionOptions
from facefuse.imageio import decode_image, reduction_for
from facefuse.pipeline import Fuser, FuserConfig


@pytest.fixture(scope="module")
def uncached(store_config) -> Fuser:
    return Fuser(FuserConfig(store=store_config, analysis_cache_mb=0))


@pytest.fixture(scope="module")
def phone_selfie(rec: Path) -> bytes:
    """A portrait at a phone photo's size (3000×4000): its face ~180 px eye to eye at ½ scale, more than the default
    crop's need (111 px) and less than a 1024 px crop's (221 px)."""
    return phone_jpeg(rec / "knn_examples/train/rose_leslie/img1.jpg")


def half(side: int) -> int:
    """A side decoded at ½ scale (libjpeg rounds up)."""
    return -(-side // 2)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(255 ** 2 / max(np.mean((a.astype(np.float64) - b) ** 2), 1e-9)))


def test_the_reduction_keeps_the_longer_side_at_least_the_asked_length() -> None:
    assert reduction_for(4000, 3000, 1920) == 2
    assert reduction_for(3000, 8000, 1920) == 4
    assert reduction_for(16000, 9000, 1920) == 8
    assert reduction_for(3839, 2000, 1920) == 1
    assert reduction_for(4000, 3000, None) == 1


def test_a_large_jpeg_decodes_at_half_scale_like_an_area_downscale(phone_selfie: bytes) -> None:
    full = decode_image(phone_selfie)
    halved = decode_image(phone_selfie, at_least=1920)
    assert (full.reduction, halved.reduction) == (1, 2)
    assert halved.pixels.shape == (half(full.pixels.shape[0]), half(full.pixels.shape[1]), 3)
    area = cv2.resize(full.pixels, (halved.pixels.shape[1], halved.pixels.shape[0]), interpolation=cv2.INTER_AREA)
    assert psnr(area, halved.pixels) > 35  # the same picture, in RGB order


def test_exif_orientation_is_applied_to_the_reduced_pixels(phone_selfie: bytes) -> None:
    image = Image.open(io.BytesIO(phone_selfie))
    exif = image.getexif()
    exif[0x0112] = 6  # rotate 90° clockwise on display
    out = io.BytesIO()
    image.save(out, "JPEG", quality=92, exif=exif)
    decoded = decode_image(out.getvalue(), at_least=1920)
    assert decoded.reduction == 2 and decoded.exif_orientation == 6
    assert decoded.pixels.shape[:2] == (half(image.width), half(image.height))  # turned: width becomes height


def test_other_formats_and_arrays_are_halved_after_decoding_and_small_jpegs_decoded_in_full(
        rec: Path, phone_selfie: bytes) -> None:
    full = decode_image(phone_selfie).pixels
    png = io.BytesIO()
    Image.fromarray(full).save(png, "PNG", compress_level=1)
    for given in (png.getvalue(), full):
        halved = decode_image(given, at_least=1920)
        assert halved.reduction == 2 and halved.pixels.shape[:2] == (full.shape[0] // 2, full.shape[1] // 2)
        area = cv2.resize(full, (halved.pixels.shape[1], halved.pixels.shape[0]), interpolation=cv2.INTER_AREA)
        assert psnr(area, halved.pixels) > 45  # the same 2×2 means
    assert decode_image(full).reduction == 1  # only when asked
    assert decode_image((rec / "biden.jpg").read_bytes(), at_least=1920).reduction == 1  # 2204 px: ½ would be 1102


def test_a_phone_source_is_prepared_at_half_scale_and_fuses_the_same(uncached: Fuser, rec: Path,
                                                                     phone_selfie: bytes) -> None:
    options = FusionOptions(visible_label=False)
    prepared = uncached.prepare(phone_selfie, options)
    full = decode_image(phone_selfie).pixels
    assert prepared.analysis.image.shape[:2] == (half(full.shape[0]), half(full.shape[1]))
    assert uncached.prepare(full, options).analysis.image.shape[:2] == (full.shape[0] // 2, full.shape[1] // 2)
    # a 1024 px crop cap asks twice the detail: the photo is decoded in full, and the 720p target's crop (sized to its
    # face, under 512 px) is the same, so the two fusions differ only by the source's decode
    in_full = uncached.prepare(phone_selfie, options.model_copy(update={"crop_size": 1024}))
    assert in_full.analysis.image.shape == full.shape
    target = rec / "obama-720p.jpg"
    reduced_out = uncached.fuse_prepared(prepared, target, options)
    full_out = uncached.fuse_prepared(in_full, target, options)
    x, y, w, h = (int(v) for v in reduced_out.faces[0]["box"])
    assert psnr(reduced_out.image[y:y + h, x:x + w], full_out.image[y:y + h, x:x + w]) > 30
    assert np.array_equal(reduced_out.image[:, : x - w], full_out.image[:, : x - w])  # the background untouched


def test_a_group_photos_small_face_gets_the_full_decode(uncached: Fuser, rec: Path) -> None:
    group = phone_jpeg(rec / "knn_examples/test/obama_and_biden.jpg")
    prepared = uncached.prepare(group, FusionOptions())
    full = uncached.analyze(group, "source")
    assert prepared.analysis.image.shape == full.image.shape  # decoded again in full
    # the faces are in the full photo's pixels: where the full decode's own analysis finds them
    found = max(full.faces, key=lambda f: f.area)
    assert np.abs(prepared.found.box - found.box).max() < 0.02 * found.box[2]


def test_the_reduced_analysis_is_cached_apart_from_the_full_one(store_config, rec: Path, phone_selfie: bytes) -> None:
    fuser = Fuser(FuserConfig(store=store_config))  # the analysis cache on
    target = rec / "obama-720p.jpg"
    first = fuser.fuse(phone_selfie, target)
    again = fuser.fuse(phone_selfie, target)
    assert "source_detect" in first.timings_ms and "source_detect" not in again.timings_ms  # the source seen before
    full_height = decode_image(phone_selfie).pixels.shape[0]
    assert fuser.prepare(phone_selfie, FusionOptions()).analysis.image.shape[0] == half(full_height)
    # the same photo as a target, or asked about by detect, is the full photo
    assert fuser.detect(phone_selfie, role="source").analysis.image.shape[0] == full_height
    as_target = fuser.fuse(rec / "obama.jpg", phone_selfie, FusionOptions(visible_label=False))
    assert as_target.image.shape[0] == full_height


def test_a_cached_reduced_source_is_not_reused_for_a_larger_crop(store_config, phone_selfie: bytes) -> None:
    fuser = Fuser(FuserConfig(store=store_config))
    full_height = decode_image(phone_selfie).pixels.shape[0]
    assert fuser.prepare(phone_selfie, FusionOptions()).analysis.image.shape[0] == half(full_height)  # cached at ½
    # a 1024 px crop asks twice the detail: the cached ½ analysis no longer has it, so the photo is decoded in full
    larger = fuser.prepare(phone_selfie, FusionOptions(crop_size=1024))
    assert larger.analysis.image.shape[0] == full_height
    assert "detect" in larger.timings_ms  # analysed again, not taken from the cache


def test_the_ray_analysis_batch_analyses_a_fusions_source_as_prepare_does(uncached: Fuser, rec: Path,
                                                                          phone_selfie: bytes) -> None:
    """``Fuser.analyze_many`` (the Ray analysis deployment) takes a fusion's options with its source: reduced as
    ``prepare`` would, and the same photo without them (a detect request) or as the target in full."""
    full_height = decode_image(phone_selfie).pixels.shape[0]
    source, detect, target = uncached.analyze_many([(phone_selfie, "source", FusionOptions()),
                                                    (phone_selfie, "source", None), (phone_selfie, "target", None)])
    assert source.image.shape[0] == half(full_height)
    assert detect.image.shape[0] == target.image.shape[0] == full_height
    fused = uncached.fuse_analyses(source, uncached.analyze(rec / "obama-720p.jpg", "target"))
    assert fused.faces and fused.image.shape[:2] == (720, 1280)
