"""The restore stage with the restorer shipped in the package, on real photos (no PyTorch involved)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.fusion.enhance import EnhanceConfig, enhance_fused, skin_sharpness, skin_zone
from facefuse.geometry.regions import feature_zone
from facefuse.fusion.restorer import RESTORER, RestoreConfig, Restorer, blockiness, face_region, needs_restore
from facefuse.tiling import fitted_tile, run_tiled, seam_score, tile_starts


def _jpeg(rgb: np.ndarray, quality: int) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].copy()


@pytest.fixture(scope="module")
def obama(faces_dir: Path) -> np.ndarray:
    return cv2.imread(str(faces_dir / "face_recognition" / "obama.jpg"))[:, :, ::-1].copy()


@pytest.fixture(scope="module")
def degraded_obama(obama: np.ndarray) -> np.ndarray:
    """A poor source: a quarter of the size (face ≈ 70 px), JPEG quality 30."""
    return _jpeg(cv2.resize(obama, None, fx=0.25, fy=0.25, interpolation=cv2.INTER_AREA), 30)


@pytest.fixture(scope="module")
def restorer(fuser) -> Restorer:
    return fuser.restorer.model()


def test_shipped_model_is_verified_and_marked_non_commercial(fuser):
    result = fuser.store.verify(RESTORER)
    assert result.status == "ok", result
    entry = fuser.store.registry.get(RESTORER)
    assert entry.commercial_use is False and entry.sha256 == result.sha256
    assert result.path.stat().st_size <= 5 * 1024 * 1024
    assert result.path.with_suffix(".md").is_file(), "the model card ships next to the weights"


def test_restorer_brings_a_degraded_face_closer_to_the_original(restorer, faces_dir):
    """A real hold-out-style check: UTKFace faces (128 px), downscaled ×3 + JPEG 50 and scaled back; the restored
    face must be nearer the clean one than the degraded input is."""
    from facefuse_training.common.data import in_holdout  # noqa: PLC0415 - only the file name hash, no torch

    utkface = faces_dir.parent / "train" / "utkface" / "images"
    names = sorted(p for p in utkface.iterdir() if in_holdout(p.name))[:12]
    gains = []
    for path in names:
        clean = cv2.resize(cv2.imread(str(path))[:, :, ::-1], (128, 128), interpolation=cv2.INTER_AREA)
        small = _jpeg(cv2.resize(clean, (43, 43), interpolation=cv2.INTER_AREA), 50)
        degraded = cv2.resize(small, (128, 128), interpolation=cv2.INTER_LINEAR)
        restored = restorer.restore(degraded)
        err_in = np.abs(degraded.astype(float) - clean).mean()
        err_out = np.abs(restored.astype(float) - clean).mean()
        gains.append(err_in - err_out)
    assert np.mean(gains) > 0, gains


def test_auto_restores_a_small_compressed_source_and_says_so(fuser, degraded_obama, obama):
    on = fuser.fuse(degraded_obama, obama, FusionOptions(restore="auto"))
    assert any(w.startswith("restored the source face") for w in on.warnings), on.warnings
    assert on.timings_ms["restore"] > 0
    off = fuser.fuse(degraded_obama, obama, FusionOptions(restore="off"))
    assert not any("restore" in w for w in off.warnings)
    assert not np.array_equal(on.image, off.image)


def test_auto_leaves_a_good_source_alone(fuser, obama, faces_dir):
    biden = cv2.imread(str(faces_dir / "face_recognition" / "biden.jpg"))[:, :, ::-1].copy()
    result = fuser.fuse(obama, biden, FusionOptions(restore="auto"))
    assert not any("restore" in w for w in result.warnings), result.warnings


def test_auto_leaves_a_small_target_alone_and_on_restores_it(fuser, obama, degraded_obama):
    """A small, compressed target: ``auto`` fuses onto its own pixels (restoring it in place only smooths the
    texture the fused skin is matched to); ``on`` restores it and says so."""
    auto = fuser.fuse(obama, degraded_obama, FusionOptions(restore="auto"))
    assert not any("restore" in w for w in auto.warnings), auto.warnings
    off = fuser.fuse(obama, degraded_obama, FusionOptions(restore="off"))
    assert np.array_equal(auto.image, off.image)
    on = fuser.fuse(obama, degraded_obama, FusionOptions(restore="on"))
    assert any(w.startswith("restored the target face") for w in on.warnings), on.warnings
    assert not np.array_equal(on.image, off.image)


def test_source_restore_gives_a_crop_as_faithful_as_bicubic(fuser, restorer, degraded_obama, obama):
    """The degraded source is the original at 1/4 size: the restored, scaled-up crop is no farther from the
    full-resolution photo than a plain bicubic upscale (within 3 %), the face's coordinates move along and its
    quality is left to the gate, which measures it on the crop."""
    face = max(fuser.analyze(degraded_obama).faces, key=lambda f: f.area)
    crop, moved = restorer.restore_source(degraded_obama, face)
    x0, y0, x1, y1 = face_region(degraded_obama, face, restorer.config.margin)
    size = (crop.shape[1], crop.shape[0])
    assert moved.box[2] >= 90 and np.all(moved.keypoints >= 0) and np.all(moved.keypoints[:, 0] < size[0])
    truth = cv2.resize(obama[4 * y0:4 * y1, 4 * x0:4 * x1], size, interpolation=cv2.INTER_AREA).astype(float)
    plain = cv2.resize(degraded_obama[y0:y1, x0:x1], size, interpolation=cv2.INTER_CUBIC)
    assert np.abs(crop - truth).mean() < 1.03 * np.abs(plain - truth).mean()
    assert moved.sharpness is None and moved.issues == ()


def test_licence_switch_skips_the_restorer_with_a_warning(store_config, degraded_obama, obama):
    fuser = Fuser(FuserConfig(store=replace(store_config, allow_noncommercial_models=False)))
    result = fuser.fuse(degraded_obama, obama, FusionOptions(restore="on"))
    assert any("restore skipped" in w and "allow_noncommercial_models" in w for w in result.warnings)
    assert not any(w.startswith("restored") for w in result.warnings)


def test_compression_shows_in_blockiness(obama):
    grey = cv2.cvtColor(obama, cv2.COLOR_RGB2GRAY)
    assert blockiness(cv2.cvtColor(_jpeg(obama, 15), cv2.COLOR_RGB2GRAY)) > 1.35 > blockiness(grey)


def test_auto_counts_block_edges_only_on_faces_small_enough_to_need_it(fuser, obama):
    """A large, sharp face saved at JPEG 15 has block edges, but they are finer than its features: restoring it at
    full resolution only smoothed the skin (a good source's identity fell, BENCHMARKS.md), so auto leaves it."""
    photo = fuser.analyze(_jpeg(obama, 15))
    face = max(photo.faces, key=lambda f: f.area)
    assert min(face.box[2:]) >= RestoreConfig().compressed_below_px
    assert needs_restore(photo.image, face, RestoreConfig()) == []
    reasons = needs_restore(photo.image, face, RestoreConfig(compressed_below_px=10_000))
    assert any(r.startswith("compressed") for r in reasons)


@pytest.mark.parametrize("length, tile, overlap", [(100, 256, 32), (256, 256, 32), (300, 256, 32), (1000, 256, 32)])
def test_tiles_cover_with_overlap(length, tile, overlap):
    starts = tile_starts(length, tile, overlap)
    assert starts[0] == 0 and min(length, starts[-1] + tile) == length
    assert all(b - a <= tile - overlap for a, b in zip(starts, starts[1:]))


@pytest.mark.parametrize("length", [100, 512, 513, 570, 1000, 1400, 4000])
def test_fitted_tiles_cover_with_the_same_count_and_fewer_pixels(length):
    """A region a little larger than a tile is cut into tiles no larger than covering it needs: as many tiles as
    whole ``tile`` px ones, still overlapping by ``overlap``, each a multiple of 8 px, never more pixels."""
    tile, overlap = 512, 32
    side = fitted_tile(length, tile, overlap)
    starts = tile_starts(length, side, overlap)
    assert starts[0] == 0 and min(length, starts[-1] + side) == length
    assert all(b - a <= side - overlap for a, b in zip(starts, starts[1:]))
    assert len(starts) == len(tile_starts(length, tile, overlap))
    assert side == length if length <= tile else (side % 8 == 0 and side <= tile)
    if length == 570:
        assert side * len(starts) < 0.65 * tile * len(starts)


@pytest.mark.parametrize("stitch", ["feather", "poisson"])
def test_stitched_tiles_leave_no_seams(fuser, obama, stitch):
    """A 600×700 face region cut into 256 px tiles: across the tile borders the stitched result steps no more than
    the one-pass result does at the same lines (the photo's own texture), while hard tiles show their borders."""
    session = fuser.restorer.model().session
    region = obama[150:850, 150:750]
    whole = Restorer(session, RestoreConfig(tile=4096)).restore(region)
    stitched = Restorer(session, RestoreConfig(tile=256, overlap=32, stitch=stitch)).restore(region)
    hard = Restorer(session, RestoreConfig(tile=256, overlap=0, stitch="feather")).restore(region)
    reference = seam_score(whole, 256, 32)["ratio"]
    assert seam_score(stitched, 256, 32)["ratio"] < reference + 0.02
    assert seam_score(hard, 256, 0)["ratio"] > seam_score(whole, 256, 0)["ratio"] + 0.05
    assert np.abs(stitched.astype(int) - whole).mean() < 0.5


def test_poisson_stitching_keeps_detail_and_spreads_tile_disagreement(obama):
    """A model that is the identity plus a different brightness per tile: Poisson stitching gives back the
    photo's own gradients (detail intact, a constant offset removed up to a smooth correction), feathering mixes
    the offsets into bands; on the identity both give the photo back."""
    x = obama.astype(np.float32) / 255.0
    for stitch in ("feather", "poisson"):
        assert np.abs(run_tiled(x, lambda t: t, 256, 32, stitch) - x).max() < 1e-4
    offsets = iter(np.random.default_rng(0).uniform(-0.1, 0.1, 100))
    shifted = {s: run_tiled(x, lambda t: t + next(offsets), 256, 32, s) for s in ("feather", "poisson")}
    # how far the local structure (the image minus its 9 px blur) moved from the photo's
    def detail_error(img: np.ndarray) -> float:
        high = img - cv2.GaussianBlur(img, (0, 0), 3)
        return float(np.abs(high - (x - cv2.GaussianBlur(x, (0, 0), 3))).mean())
    assert detail_error(shifted["poisson"]) < 0.5 * detail_error(shifted["feather"])


def _small_source_fusion(fuser, obama: np.ndarray, faces_dir: Path):
    biden = cv2.imread(str(faces_dir / "face_recognition" / "biden.jpg"))[:, :, ::-1].copy()
    small = cv2.resize(biden, None, fx=0.2, fy=0.2, interpolation=cv2.INTER_AREA)
    source_face = max(fuser.analyze(small).faces, key=lambda f: f.area)
    target = fuser.analyze(obama)
    face = max(target.faces, key=lambda f: f.area)
    fused = fuser.fuse(small, obama, FusionOptions(restore="off", visible_label=False)).image
    return fused, target.image, face, float(max(source_face.box[2:]))


def test_skin_sharpness_on_the_zones_box_is_the_whole_photos(fuser, obama, faces_dir):
    """The score is computed on the zone's box only (speed): the same value as the Laplacian of the whole photo's L*,
    for a face inside the photo and for a zone cut by the photo's edge (the border rule is the photo's there)."""
    def whole(image, zone):
        lightness = cv2.cvtColor(image.astype(np.float32) / 255.0, cv2.COLOR_RGB2Lab)[:, :, 0]
        return float(cv2.Laplacian(lightness, cv2.CV_32F)[zone > 0.5].var())

    analysis = fuser.analyze(obama)
    zone = skin_zone(max(analysis.faces, key=lambda f: f.area), analysis.image.shape)
    assert skin_sharpness(analysis.image, zone) == pytest.approx(whole(analysis.image, zone), rel=1e-6)
    rows = np.flatnonzero(zone.max(axis=1) > 0.5)
    cut = analysis.image[rows[len(rows) // 2]:].copy()  # the photo cut through the face: its zone meets the edge
    cut_zone = zone[rows[len(rows) // 2]:]
    assert cut_zone[0].max() > 0.5
    assert skin_sharpness(cut, cut_zone) == pytest.approx(whole(cut, cut_zone), rel=1e-6)
    assert skin_sharpness(analysis.image, np.zeros_like(zone)) == 0.0


def test_post_fusion_enhancement_never_softens_the_fused_skin(fuser, restorer, obama, faces_dir):
    """A source 5× smaller than the target: the enhancer either raises the skin's sharpness ratio toward the photo's
    (only detail added, only inside the face region) or — where the fusion's own detail step already gave the skin
    the photo's grain, which the restorer would take away — leaves the photo as it was and says why."""
    fused, target, face, source_px = _small_source_fusion(fuser, obama, faces_dir)
    zone = skin_zone(face, fused.shape)
    result = enhance_fused(fused, target, face, source_px, restorer)
    assert result.note
    assert result.ratio_after == pytest.approx(skin_sharpness(result.image, zone) / skin_sharpness(target, zone))
    if result.gain == 0:
        assert result.image is fused and "not" in result.note
        return
    assert result.ratio_before < result.ratio_after and "enhanced" in result.note
    x0, y0, x1, y1 = face_region(fused, face, EnhanceConfig().margin)
    outside = np.ones(fused.shape[:2], bool)
    outside[y0:y1, x0:x1] = False
    assert np.array_equal(result.image[outside], fused[outside])
    # only detail is added: the low-pass picture (tones, colours, any smear) stays where it was
    low = [cv2.GaussianBlur(img[y0:y1, x0:x1].astype(np.float32), (0, 0), 6) for img in (fused, result.image)]
    assert np.abs(low[0] - low[1]).mean() < 1.0


def test_post_fusion_enhancement_leaves_brows_eyes_and_lips_alone(fuser, restorer, obama, faces_dir):
    """The detail goes on the bare skin only (the features are the source's identity): inside the brows, eyes and
    lips the enhanced photo is the fused one, while the whole-oval variant does change them."""
    fused, target, face, source_px = _small_source_fusion(fuser, obama, faces_dir)
    features = feature_zone(face.landmarks[:, :2], max(fused.shape[:2]))[: fused.shape[0], : fused.shape[1]] > 0
    inner = cv2.erode(features.astype(np.uint8), np.ones((15, 15), np.uint8)) > 0  # clear of the feathered edge
    skin = enhance_fused(fused, target, face, source_px, restorer, EnhanceConfig(target_ratio=9.0))
    oval = enhance_fused(fused, target, face, source_px, restorer, EnhanceConfig(target_ratio=9.0, skin_only=False))
    assert skin.gain > 0 and oval.gain > 0, (skin.note, oval.note)
    changed = lambda img: np.abs(img.astype(np.int16) - fused).max(axis=2)  # noqa: E731
    assert changed(skin.image)[inner].mean() < 0.1 * changed(oval.image)[inner].mean()
    assert changed(skin.image)[skin_zone(face, fused.shape) > 0.5].mean() > 0.5


def test_post_fusion_enhancement_leaves_a_large_source_alone(fuser, restorer, obama, faces_dir):
    fused, target, face, _ = _small_source_fusion(fuser, obama, faces_dir)
    result = enhance_fused(fused, target, face, float(max(face.box[2:])), restorer)
    assert result.gain == 0 and result.note is None and result.image is fused


def test_post_fusion_enhancement_decides_on_the_photos_face_after_pre_restoration(fuser, obama, faces_dir):
    """A real poor source (a 50 px face, JPEG) onto a 139 px target face with ``restore=auto`` + ``enhance=auto``:
    pre-restoration enlarges the source face to ~100 px (1.4× smaller than the target face, under ``min_upscale``),
    but the post stage decides on the photo's own 50 px face (2.8× smaller) and enhances the fused face."""
    options = FusionOptions(restore="auto", enhance="auto", visible_label=False)
    prepared = fuser.prepare(faces_dir / "hard" / "poor" / "03_tiny_jpeg_portrait.jpg", options)
    assert any(w.startswith("restored the source face") for w in prepared.warnings), prepared.warnings
    photo_px, restored_px = float(max(prepared.found.box[2:])), float(max(prepared.face.box[2:]))
    target = cv2.resize(obama, None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    target_px = float(max(max(fuser.analyze(target).faces, key=lambda f: f.area).box[2:]))
    upscale = EnhanceConfig().min_upscale
    assert target_px / restored_px < upscale <= target_px / photo_px, (photo_px, restored_px, target_px)
    result = fuser.fuse_prepared(prepared, target, options)
    assert any(w.startswith(f"enhanced the fused face (source face {photo_px:.0f} px") for w in result.warnings), \
        result.warnings
    plain = fuser.fuse_prepared(prepared, target, options.model_copy(update={"enhance": "off"}))
    assert not np.array_equal(result.image, plain.image)
