"""Naturalness (issue 8) on real photos: the target's lighting, side faces, the licence switch.

Lighting is judged by facefuse_eval.lighting (low-pass Lab inside the target's face hull), which the pipeline does
not use; the goals are the issue's (blotch share ≤ 3 % mean, mean |ΔL| ≤ 2.0 on self-swaps).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import pytest

from facefuse.analysis.pose import face_axes
from facefuse.config import AnalysisConfig, QualityConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.mesh_engine import far_side_parsing, mirror_fill
from facefuse.analysis.segmentation import FACE_CLASSES
from facefuse.geometry.regions import FACE_OVAL, LEFT_BROW, LEFT_EYE, RIGHT_BROW, RIGHT_EYE, polygon_mask
from facefuse.pipeline import Fuser, FuserConfig
from facefuse_eval.lighting import lighting_error

PEOPLE = ("howard", "leonard", "penny")


@pytest.fixture(scope="module")
def stills(faces_dir: Path) -> dict[str, list[Path]]:
    return {p: sorted((faces_dir / "face-api-js" / p).glob("*.png")) for p in PEOPLE}


def _error(fuser: Fuser, source: Path, target: Path, options: FusionOptions):
    result = fuser.fuse(source, target, options)
    analysis = fuser.analyze(target)
    return lighting_error(result.image, analysis.image, analysis.faces[result.faces[0]["index"]])


def test_self_swap_reproduces_the_targets_lighting(fuser, stills):
    """Another photo of the target's own person as source: the output must look lit like the target. The target's
    eyes are kept: this is the light step's test, and another photo's eyes (another moment's lids and gaze) differ
    in lightness where no light step should touch them."""
    options = FusionOptions(visible_label=False, segmentation="off", eyes="target")
    errors = [_error(fuser, s, t, options) for photos in stills.values()
              for s, t in itertools.permutations(photos[:3], 2)]
    blotch = np.array([e.blotch_share for e in errors])
    assert blotch.mean() <= 0.03, blotch
    assert np.mean([e.mean_dl for e in errors]) <= 2.0


def test_full_light_reproduces_a_self_swaps_light_more_closely_than_the_default(fuser, stills):
    """``light="full"``: the target's shading on every skin pixel, none of either photo's deep shading set aside
    as the source's likeness. On self-swaps (the same person, another photo: any light left over is the fusion's)
    the output is closer to the target's light than with the default in every pair (mean |ΔL| 2.5–3.0 → 1.8–2.5
    when written), with the masks on. Fails if the option does not reach the relight stage."""
    pairs = [(stills["howard"][3], stills["howard"][0]), (stills["howard"][0], stills["howard"][3]),
             (stills["penny"][0], stills["penny"][1]), (stills["leonard"][0], stills["leonard"][1])]
    for source, target in pairs:
        default, full = (_error(fuser, source, target, FusionOptions(visible_label=False, light=light))
                         for light in ("shading", "full"))
        assert full.mean_dl < default.mean_dl - 0.2, (source.name, target.name, default, full)


def test_relighting_removes_a_side_light_the_source_brought(fuser, stills, tmp_path):
    """The same still as source, darkened on one side: without relighting that shadow would land on the target."""

    photo = stills["leonard"][0]
    image = cv2.imread(str(photo))
    ramp = np.linspace(0.45, 1.0, image.shape[1], dtype=np.float32)[None, :, None]
    side_lit = tmp_path / "side_lit.png"
    cv2.imwrite(str(side_lit), np.clip(image * ramp, 0, 255).astype(np.uint8))
    target = fuser.analyze(photo)
    shadow = lighting_error(fuser.analyze(side_lit).image, target.image, target.faces[0])
    assert shadow.mean_dl > 4.0, "the painted side light must be strong enough to see"
    error = _error(fuser, side_lit, photo, FusionOptions(visible_label=False, segmentation="off"))
    assert error.mean_dl < 2.0 and error.blotch_share < 0.03, error


def test_a_source_turned_14_degrees_is_mirror_filled_by_what_the_target_shows(fuser, faces_dir):
    """scarlett_johansson/03 (turned 14°) onto a face turned 11° the other way: 25° apart, under the pose gate,
    and the new far cheek took her earring and the hair beside it as smudges. Turned 10° or more onto a face turned
    15° or more away from it, the source is filled by what the target shows (and what its parsing puts off its
    face): its far side only."""
    source = fuser.prepare(faces_dir / "hard/same-person/scarlett_johansson/03_daylight_event_smiling.jpg",
                           FusionOptions(visible_label=False))
    target = fuser.analyze(faces_dir / "hard/glasses/05_thick_dark_frames.jpg").faces[0]
    face = source.prepared.face
    assert face.pose is not None and target.pose is not None
    assert 10 < abs(face.pose.yaw) < 20 and abs(face.pose.yaw - target.pose.yaw) < 30
    assert mirror_fill(face, target) is None  # by pose alone: no mirror
    fill = mirror_fill(face, target, far_side_parsing(replace(source.prepared, parsing=source.source_parsing), target))
    assert fill is not None
    weights = fill[1]
    canonical_x = ((face.landmarks - face.landmarks.mean(0)) @ face_axes(face.landmarks))[:, 0]
    assert (weights > 0.5).sum() >= 30
    assert abs(np.sign(canonical_x[weights > 0.05]).mean()) == 1  # one side only


@pytest.mark.parametrize("target", ["hard/sidelight/01_lowkey_studio_woman.jpg",
                                    "hard/sidelight/08_sunlight_one_side_outdoor.jpg"])
def test_a_deeply_coloured_skins_eyes_and_brows_keep_their_hue_on_a_paler_face(fuser, faces_dir, target):
    """Obama onto pale, colour-graded faces: his eyes and brows differ from his skin by much colour and are
    themselves nearly grey; kept as that difference on a paler skin they crossed grey to the opposite hue (blue
    brows, blue eye whites). Measured on the output by the analysis of the output itself: the eyes' and brows' mean
    a*, b* point within 45° of the surrounding skin's hue, as grey-to-warm features on warm skin do."""

    from facefuse.geometry.regions import FACE_OVAL, LIPS_OUTER, polygon_mask

    fused = fuser.fuse(faces_dir / "face_recognition/obama.jpg", faces_dir / target,
                       FusionOptions(visible_label=False)).image
    face = max(fuser.analyze(fused).faces, key=lambda f: f.area)
    points, shape = face.landmarks[:, :2], fused.shape[:2]
    lab = cv2.cvtColor(fused, cv2.COLOR_RGB2Lab).astype(np.float32) - (0, 128, 128)
    features = polygon_mask(points[RIGHT_EYE], shape, points[LEFT_EYE]) + \
        polygon_mask(points[RIGHT_BROW], shape, points[LEFT_BROW])
    grown = cv2.dilate(features + polygon_mask(points[LIPS_OUTER], shape), np.ones((15, 15), np.uint8))
    skin = (polygon_mask(points[FACE_OVAL], shape) > 0.5) & (grown < 0.5)

    def hue(mask: np.ndarray) -> float:
        a, b = lab[mask > 0.5][:, 1:].mean(0)
        return float(np.degrees(np.arctan2(b, a)))

    apart = abs(hue(features) - hue(skin)) % 360
    assert min(apart, 360 - apart) < 45, (hue(features), hue(skin))


def test_mirror_fill_takes_the_hidden_side_from_the_visible_one(fuser, faces_dir):
    turned = fuser.analyze(faces_dir / "face-api-js/stuart/stuart5.png").faces[0]
    frontal = fuser.analyze(faces_dir / "face_recognition/obama.jpg").faces[0]
    assert turned.pose is not None and abs(turned.pose.yaw) > 30
    assert mirror_fill(frontal, frontal) is None  # the target shows nothing the source hides
    fill = mirror_fill(turned, frontal)
    assert fill is not None
    partners, weights = fill
    canonical_x = ((turned.landmarks - turned.landmarks.mean(0)) @ face_axes(turned.landmarks))[:, 0]
    filled = weights > 0.5
    assert filled.sum() > 10
    # every filled vertex is on one side of the face, and takes its texture from the other side; the pairing is a
    # reflection: each vertex is its partner's partner
    assert abs(np.sign(canonical_x[filled]).mean()) > 0.9
    assert np.all(np.sign(canonical_x[partners[filled]]) != np.sign(canonical_x[filled]))
    assert np.array_equal(partners[partners], np.arange(len(partners)))


def test_a_turned_sources_far_side_off_its_face_is_mirrored(fuser, faces_dir):
    """hard/profile/03 (turned 30°) onto a selfie turned 11° the same way: too close in yaw for the mirror by pose
    alone, but FaceMesh put the far eye and brow partly on the dark background beyond the cheek (dark streaks
    through the new far eye and brow). With the source's parsing, the points it puts off the face are taken from
    their mirror partners — on the far side only — and a frontal source's parsing is never asked for."""
    options = FusionOptions(visible_label=False)
    source = fuser.prepare(faces_dir / "hard/profile/03_turned_38_flash.jpg", options)
    target = fuser.analyze(faces_dir / "hard/same-person/yang_mi/01_selfie_indoor_ambient.jpg").faces[0]
    face = source.prepared.face
    parsing = far_side_parsing(replace(source.prepared, parsing=source.source_parsing), target)
    assert face.pose is not None and target.pose is not None and parsing is not None
    assert abs(face.pose.yaw) > 20 and abs(face.pose.yaw - target.pose.yaw) < 30
    assert mirror_fill(face, target) is None  # by pose alone: no mirror

    on_face = parsing.at(face.landmarks[:, :2], *FACE_CLASSES)
    off, clearly_off = on_face < 0.5, on_face < 0.25
    features = np.concatenate([RIGHT_EYE, LEFT_EYE, RIGHT_BROW, LEFT_BROW])
    assert clearly_off[features].sum() >= 10, "FaceMesh's far eye and brow lie partly off the photo's face"
    fill = mirror_fill(face, target, parsing)
    assert fill is not None
    partners, weights = fill
    assert weights[features[clearly_off[features]]].min() > 0.9  # taken from their partners
    canonical_x = ((face.landmarks - face.landmarks.mean(0)) @ face_axes(face.landmarks))[:, 0]
    far = np.sign(canonical_x[weights > 0.5]).mean()
    assert abs(far) == 1 and np.all(np.sign(canonical_x[weights > 0.05]) == far)  # one side only
    assert weights[off & (np.sign(canonical_x) == far)].mean() > 0.8
    assert parsing.at(face.landmarks[partners[weights > 0.5], :2], *FACE_CLASSES).mean() > 0.9  # partners on it

    frontal = fuser.prepare(faces_dir / "face_recognition/obama.jpg", options).prepared

    def never() -> None:
        raise AssertionError("a frontal source's parsing was asked for")

    assert far_side_parsing(replace(frontal, parsing=never), target) is None
    # biden.jpg (turned 12°) onto a frontal portrait: the target shows little more of its far side; not asked
    usual = fuser.prepare(faces_dir / "face_recognition/biden.jpg", options).prepared
    portrait = fuser.analyze(faces_dir / "face_recognition/obama-720p.jpg").faces[0]
    assert usual.face.pose is not None and abs(usual.face.pose.yaw) > 10
    assert far_side_parsing(replace(usual, parsing=never), portrait) is None


def test_turned_faces_fuse_with_a_warning_past_the_warn_angle(store_config, faces_dir):
    source = faces_dir / "face-api-js/stuart/stuart5.png"  # yaw ≈ 34°
    target = faces_dir / "face_recognition/obama.jpg"
    def fuser_with(quality: QualityConfig) -> Fuser:
        return Fuser(FuserConfig(store=store_config, analysis=AnalysisConfig(quality=quality)))

    result = fuser_with(QualityConfig(warn_yaw=25.0)).fuse(source, target,
                                                           FusionOptions(visible_label=False, segmentation="off"))
    assert any("source face is turned" in w for w in result.warnings), result.warnings
    assert not fuser_with(QualityConfig()).fuse(source, target, FusionOptions(visible_label=False)).warnings
    strict = fuser_with(QualityConfig(max_yaw=30.0))
    with pytest.raises(FacefuseError) as caught:
        strict.fuse(source, target, FusionOptions(visible_label=False, segmentation="off"))
    assert caught.value.code == ErrorCode.POSE_TOO_LARGE


def _with_occluder(image: np.ndarray, face) -> tuple[np.ndarray, np.ndarray]:
    """A dark glasses frame drawn from the eye landmarks onto the photo, and its mask."""

    mesh = face.landmarks
    width = float(np.ptp(mesh[:, 0]))
    mask = np.zeros(image.shape[:2], np.uint8)
    for outer, inner in ((33, 133), (263, 362)):
        centre = tuple(((mesh[outer, :2] + mesh[inner, :2]) / 2).astype(int))
        cv2.ellipse(mask, centre, (int(width * 0.17), int(width * 0.12)), 0, 0, 360, 1, max(2, int(width * 0.03)))
    cv2.line(mask, tuple(mesh[133, :2].astype(int)), tuple(mesh[362, :2].astype(int)), 1, max(2, int(width * 0.03)))
    out = image.copy()
    out[mask > 0] = (30, 25, 20)
    return out, mask > 0


def test_glasses_on_the_target_stay_on_top(fuser, faces_dir):
    target = fuser.analyze(faces_dir / "face_recognition/obama.jpg")
    occluded, mask = _with_occluder(target.image, target.faces[0])
    source = faces_dir / "face_recognition/biden.jpg"

    def psnr_inside(options: FusionOptions) -> float:
        out = fuser.fuse(source, occluded, options).image
        mse = float(np.mean((out[mask].astype(np.float64) - occluded[mask]) ** 2))
        return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)

    kept = psnr_inside(FusionOptions(visible_label=False))
    whole = psnr_inside(FusionOptions(visible_label=False, segmentation="whole"))
    erased = psnr_inside(FusionOptions(visible_label=False, segmentation="off"))
    # the goal is 35 dB. The default (the ramp alone) gives ~34.9 here: the frame's anti-aliased rim is
    # partly the new face, and benchmarks/naturalness.py reports the goal as missed; "whole" keeps the faint rim too
    # (fusion/occlusion.py `occluders`, ~72 dB here)
    assert kept >= 30.0, (kept, whole, erased)
    assert whole >= 35.0, (kept, whole, erased)
    assert erased < 30.0, "without the segmenter the frame is painted over: the test must see the difference"


def test_an_occluder_the_segmenter_is_sure_of_is_kept_whole_to_its_faint_edge():
    """fusion/occlusion.py ``occluders``: a thin frame with a confident core and a faint rim is kept whole out to the
    rim; a patch of haze that is nowhere sure (a beard, a shadow) keeps the soft ramp."""
    from facefuse.fusion.occlusion import OCCLUDER_EDGE, OCCLUDER_FLOOR, OCCLUDER_SURE, occluders

    probability = np.zeros((32, 32), np.float32)
    probability[4:8, 4:28] = OCCLUDER_EDGE + 0.05  # the frame's rim
    probability[5:7, 6:26] = OCCLUDER_SURE + 0.1  # its core
    probability[20:28, 4:12] = OCCLUDER_FLOOR + 0.1  # haze, apart from the frame
    mask = occluders(probability, OCCLUDER_SURE)
    assert np.all(mask[4:8, 4:28] == 1.0)
    assert np.allclose(mask[20:28, 4:12], 1.0 / 3.0, atol=1e-5)  # (0.45 - 0.35) / 0.3: the ramp
    assert mask[12:18].max() == 0.0
    ramp = occluders(probability, None)  # segmentation="auto": the ramp alone, the rim is not kept
    assert ramp[4, 4] == 0.0 and ramp[5, 6] == 1.0 and np.array_equal(ramp[20:28, 4:12], mask[20:28, 4:12])


def test_licence_switch_falls_back_to_classic_masks_with_a_warning(store_config, faces_dir):
    strict = Fuser(FuserConfig(store=replace(store_config, allow_noncommercial_models=False)))
    assert strict.segmenter() is None
    result = strict.fuse(faces_dir / "face_recognition/biden.jpg", faces_dir / "face_recognition/obama.jpg",
                         FusionOptions(visible_label=False))
    assert any("classic geometric masks" in w for w in result.warnings), result.warnings


def test_spherical_harmonics_light_is_recovered_from_a_lit_surface():
    """A Lambertian hemisphere rendered under a known second-order SH light: the least-squares fit renders it back
    and finds where the light comes from."""
    from facefuse.fusion.shading import fit_light, sh_basis

    ys, xs = np.mgrid[-1:1:96j, -1:1:96j]
    inside = xs ** 2 + ys ** 2 < 0.9
    normals = np.zeros((96, 96, 3), np.float32)
    normals[..., 0], normals[..., 1] = xs, ys
    normals[..., 2] = np.sqrt(np.clip(1 - xs ** 2 - ys ** 2, 0, 1))
    normals[~inside] = 0
    light = np.array([0.6, 0.25, -0.1, 0.3, 0.0, 0.05, 0.0, 0.02, 0.03])
    image = (sh_basis(normals) @ light).astype(np.float32) * inside
    fitted = fit_light(image, normals, inside.astype(np.float32))
    rendered = sh_basis(normals[inside]) @ fitted
    # within the bias of the fit's deliberate ridge (a face sees half a sphere of normals), ~3 % here
    assert np.abs(rendered - image[inside]).max() < 0.05 * image[inside].max()
    # the side-to-side and up-down direction of the light come back (z trades against the constant on a hemisphere)
    assert abs(fitted[1] - light[1]) < 0.03 and abs(fitted[2] - light[2]) < 0.03


def test_makeup_is_toned_to_the_targets_lips_unless_asked_to_keep_it(fuser, faces_dir):
    """A red-lipstick source onto a bearded man: with make-up "target" the new lips' colour is the target's (a*,
    the red–green axis, near the target's lips: their mean over the target's lips, a finer measure than a median of
    8-bit levels), with "source" the lipstick stays."""

    from facefuse.geometry.regions import LIPS_INNER, LIPS_OUTER, polygon_mask

    source = faces_dir / "hard/makeup/01_blue_smoky_eyes_red_lipstick.png"
    target = faces_dir / "hard/beard/02_full_dark_beard.png"
    analysis = fuser.analyze(target)
    mesh = max(analysis.faces, key=lambda f: f.area).landmarks
    side = max(analysis.image.shape[:2])
    height, width = analysis.image.shape[:2]
    lips = (polygon_mask(mesh[LIPS_OUTER], side) * (1 - polygon_mask(mesh[LIPS_INNER], side)))[:height, :width] > 0.5

    def redness(image: np.ndarray) -> float:
        return float(np.mean(cv2.cvtColor(image, cv2.COLOR_RGB2Lab)[..., 1][lips]))

    toned = redness(fuser.fuse(source, target, FusionOptions(visible_label=False)).image)
    kept = redness(fuser.fuse(source, target, FusionOptions(visible_label=False, makeup="source")).image)
    own = redness(analysis.image)
    assert kept - own > 5, (kept, own)  # the lipstick is really there when kept
    assert abs(toned - own) < 0.5 * abs(kept - own), (toned, kept, own)


@pytest.mark.parametrize("target", ["beard/02_full_dark_beard.png", "same-person/donald_trump/01_speaking_blue_bg.jpg"])
def test_toning_lipstick_down_turns_nothing_round_it_green(fuser, faces_dir, target):
    """The lipstick's toning is a broad field over a zone grown past the lips: the bare skin round them, the teeth
    and the lipstick's white highlights took its whole correction and turned green-cyan (432 and 52 pixels on these
    targets: a cyan ring round the new lips). Toned toward the skin's colour and never past it, nothing does.

    Counted against the same fusion with the source's make-up kept, so only what the toning turns green counts: on
    the bearded target the new upper lip's edge has a thin cyan line of its own, there without any toning (11
    pixels, 22 since the source is re-posed by its rigid points, which moved that edge by a pixel; drawn)."""

    from facefuse.geometry.regions import FACE_OVAL, LIPS_OUTER, polygon_mask

    analysis = fuser.analyze(faces_dir / "hard" / target)
    mesh = max(analysis.faces, key=lambda f: f.area).landmarks
    height, width = analysis.image.shape[:2]
    grow = int(0.08 * float(np.ptp(mesh[FACE_OVAL, 0]))) | 1
    near_lips = cv2.dilate(polygon_mask(mesh[LIPS_OUTER], max(height, width))[:height, :width],
                           np.ones((grow, grow), np.uint8)) > 0.5

    def green(image: np.ndarray) -> np.ndarray:
        return cv2.cvtColor(image, cv2.COLOR_RGB2Lab)[..., 1].astype(np.int16) - 128 < -1

    def fused(makeup: str) -> np.ndarray:
        return fuser.fuse(faces_dir / "hard/makeup/01_blue_smoky_eyes_red_lipstick.png", faces_dir / "hard" / target,
                          FusionOptions(visible_label=False, makeup=makeup)).image

    turned = int((green(fused("target")) & ~green(fused("source")) & ~green(analysis.image) & near_lips).sum())
    assert turned < 10, turned


def test_brows_take_the_targets_hue_not_the_sources_coloured_light(fuser, faces_dir):
    """jay_chou's studio portrait under a violet light onto yang_mi: his brows came out blue-purple (the colour
    match fits skin, not the cast on dark hair). With make-up "target" (the default) the brows' hue is toned to the
    target's brows, their darkness kept; "source" keeps the violet. The target's eyes are kept in both, so the count
    is the brows' (the source's eyes, where ``eyes="auto"`` takes them, bring the light on their whites along)."""

    source = faces_dir / "hard/same-person/jay_chou/01_studio_tilted_warm.jpg"
    target = faces_dir / "hard/same-person/yang_mi/01_selfie_indoor_ambient.jpg"

    def violet_pixels(options: FusionOptions) -> int:
        lab = cv2.cvtColor(fuser.fuse(source, target, options).image, cv2.COLOR_RGB2Lab).astype(np.int16) - 128
        return int(((lab[..., 1] > 8) & (lab[..., 2] < -3)).sum())

    kept = violet_pixels(FusionOptions(visible_label=False, makeup="source", eyes="target"))
    toned = violet_pixels(FusionOptions(visible_label=False, eyes="target"))
    assert kept > 300, kept  # the violet is really there when the source's colour is kept
    assert toned < 0.1 * kept, (toned, kept)


@pytest.mark.parametrize("source, target", [
    ("beard/01_grey_full_beard_hard_sidelight.jpg", "makeup/04_heavy_pink_blush_lips.png"),
    ("beard/04_stubble_beard_orange_wall.jpg", "same-person/yang_mi/01_selfie_indoor_ambient.jpg")])
def test_a_colour_graded_source_brings_no_more_colour_detail_than_the_targets_skin(fuser, faces_dir, source,
                                                                                    target):
    """A teal-and-orange graded portrait and a face lit by an orange wall, as sources: the relight gave the new skin
    the target's broad colour but kept the source's finer colour — teal eye sockets, orange patches — at 1.27× and
    1.59× the target skin's own colour variation (a*, b* finer than 6 % of the face width, on the cheeks and
    forehead). It is held to the target's level now."""

    from facefuse.geometry.regions import FACE_OVAL, LEFT_BROW, LEFT_EYE, LIPS_OUTER, RIGHT_BROW, RIGHT_EYE, polygon_mask
    from facefuse_eval.skin import colour_detail

    analysis = fuser.analyze(faces_dir / "hard" / target)
    mesh = max(analysis.faces, key=lambda f: f.area).landmarks
    height, width = analysis.image.shape[:2]
    side, face_width = max(height, width), float(np.ptp(mesh[FACE_OVAL, 0]))
    features = np.zeros((height, width), np.float32)
    for part in (LEFT_EYE, RIGHT_EYE, LIPS_OUTER, LEFT_BROW, RIGHT_BROW):
        features = np.maximum(features, polygon_mask(mesh[part], side)[:height, :width])
    features = cv2.dilate(features, np.ones((int(0.08 * face_width) | 1,) * 2, np.uint8))
    oval = cv2.erode(polygon_mask(mesh[FACE_OVAL], side)[:height, :width],
                     np.ones((int(0.1 * face_width) | 1,) * 2, np.uint8))
    cheeks = (oval * (1.0 - features)) > 0.5
    fused = fuser.fuse(faces_dir / "hard" / source, faces_dir / "hard" / target, FusionOptions(visible_label=False))
    ratio = colour_detail(fused.image, cheeks, face_width) / colour_detail(analysis.image, cheeks, face_width)
    assert ratio < 1.1, ratio


def test_the_skin_mask_drawn_in_the_faces_box_is_the_whole_crops(fuser, faces_dir):
    """skin_mask draws in the mesh's box grown by the features' growth: the same pixels as the definition drawn over
    the whole crop (the oval without the grown brows, eyes and lips), also for a face cut by the crop's edge, where
    a box too tight would lose a feature's growth into the skin."""
    from facefuse.geometry.regions import FACE_OVAL, feature_zone, polygon_mask, shrink, skin_mask

    # a group photo's faces: small, some turned, so a feature's growth reaches past the shrunk oval (a box drawn
    # round the oval alone failed here)
    for face in fuser.analyze(faces_dir / "dlib-faces" / "2007_007763.jpg").faces:
        points = face.landmarks[:, :2].astype(np.float64)
        centre, width = points.mean(0), float(np.ptp(points[FACE_OVAL, 0]))
        for size, shift in itertools.product((128, 256, 432), (0.0, 0.3, -0.45)):
            placed = (points - centre) * (0.55 * size / width) + size * (0.5 + shift)
            whole = polygon_mask(shrink(placed[FACE_OVAL], 0.92), size) * (1.0 - feature_zone(placed, size))
            assert whole.any()
            np.testing.assert_array_equal(skin_mask(placed, size), whole)


def test_the_source_eyes_with_the_targets_gaze(fuser, faces_dir):
    """eyes="auto": Biden onto Obama (both look into the camera) shows Biden's eyes as they are — the output is
    eyes="source"'s; Yang Mi's selfie (she looks aside) onto a photo that looks into the camera shows her eyes with
    their irises moved to the target's gaze: in the render's crop the irises' shift from the target's is within
    the gaze check's limit (eyes="source" keeps her own, past it), and the outputs differ from both other choices
    in and around the eyes only."""
    from facefuse.fusion.eyes import GAZE_AGREEMENT, gaze_shift
    from facefuse.geometry.align import aligned_crop

    hard = faces_dir / "hard" / "same-person"
    biden, obama = faces_dir / "face_recognition" / "biden.jpg", faces_dir / "face_recognition" / "obama-720p.jpg"
    out = {eyes: fuser.fuse(biden, obama, FusionOptions(visible_label=False, eyes=eyes)).image
           for eyes in ("auto", "source")}
    np.testing.assert_array_equal(out["auto"], out["source"])

    source, target = hard / "yang_mi" / "01_selfie_indoor_ambient.jpg", hard / "scarlett_johansson" / "01_evening_flash_dark_bg.jpg"
    out = {eyes: fuser.fuse(source, target, FusionOptions(visible_label=False, eyes=eyes)).image
           for eyes in ("auto", "source", "target")}
    face = fuser.analyze(target).faces[0]
    eyes = np.concatenate([face.landmarks[LEFT_EYE, :2], face.landmarks[RIGHT_EYE, :2]])
    for other in ("source", "target"):
        changed = np.abs(out["auto"].astype(int) - out[other].astype(int)).max(axis=2) > 8
        ys, xs = np.nonzero(changed)
        assert len(ys) > 50, f"eyes=auto gave eyes={other}'s output"
        near = ((xs >= eyes[:, 0].min() - 10) & (xs <= eyes[:, 0].max() + 10)
                & (ys >= eyes[:, 1].min() - 10) & (ys <= eyes[:, 1].max() + 10))
        assert near.mean() > 0.9, f"{1 - near.mean():.0%} of the pixels changed against {other} lie away from the eyes"
    prepared = fuser.prepare(source, FusionOptions())
    analysis = fuser.analyze(target)
    matrix, size = prepared.engine.crop_matrix(analysis.faces[0], FusionOptions())
    crop = aligned_crop(analysis.image, matrix, size)
    shifts = {}
    for choice in ("auto", "source"):
        rendered = prepared.engine.render(prepared.prepared, crop, matrix, analysis.faces[0],
                                          FusionOptions(eyes=choice), analysis.image)
        shifts[choice] = gaze_shift(rendered.crop, rendered.target_crop, rendered.points)
    assert shifts["source"] is not None and abs(shifts["source"]) > GAZE_AGREEMENT, shifts
    assert shifts["auto"] is not None and abs(shifts["auto"]) <= GAZE_AGREEMENT / 2, shifts


def test_eyes_lit_by_a_coloured_light_stay_the_targets(fuser, faces_dir):
    """Whites of the eyes redder than the skin are a coloured light's cast (jay_chou's violet studio light), which
    the skin-fitted colour match would leave in the new face's eyes: eyes="auto" keeps the target's there, although
    this pair's gazes pass the gaze check; neutral-lit photos' whites are never redder than their skin."""
    from facefuse.fusion.eyes import whites_cast
    from facefuse.geometry.regions import skin_mask

    hard = faces_dir / "hard" / "same-person"
    violet = hard / "jay_chou" / "01_studio_tilted_warm.jpg"
    for photo, cast in ((violet, True), (faces_dir / "face_recognition" / "biden.jpg", False),
                        (faces_dir / "face_recognition" / "obama.jpg", False),
                        (hard / "scarlett_johansson" / "01_evening_flash_dark_bg.jpg", False)):
        analysis = fuser.analyze(photo)
        face, (height, width) = analysis.faces[0], analysis.image.shape[:2]
        skin = skin_mask(face.landmarks[:, :2], max(height, width))[:height, :width]
        assert whites_cast(analysis.image, face.landmarks[:, :2], skin) == cast, photo.name
    target = hard / "yang_mi" / "01_selfie_indoor_ambient.jpg"
    out = {eyes: fuser.fuse(violet, target, FusionOptions(visible_label=False, eyes=eyes)).image
           for eyes in ("auto", "target")}
    np.testing.assert_array_equal(out["auto"], out["target"])


def test_the_eyes_whites_are_not_an_occluder_kept_from_the_target(fuser, faces_dir):
    """The segmenter calls the lash line and whites of Obama's narrowed, smiling eyes "occluder" in small spots
    (glasses glare to it), so the target's eyes were kept on top of every fusion onto those photos whatever
    ``eyes`` chose. Regions no larger than an eye's opening and within its surroundings are taken out of the
    occluder class (fusion/occlusion.without_false_occluders): nothing of the target is kept around its eyes, and the
    output is closer to the source to the independent judge; a pasted glasses frame round the same eyes still
    stays on top (test_glasses_on_the_target_stay_on_top)."""
    from facefuse.fusion import occlusion

    source, target = faces_dir / "face_recognition/biden.jpg", faces_dir / "face_recognition/obama-720p.jpg"
    out, record, points, raw = _segmented(fuser, source, target)
    eyes = np.concatenate([points[RIGHT_EYE], points[LEFT_EYE]])
    (x0, y0), (x1, y1) = np.floor(eyes.min(0) - 10).astype(int), np.ceil(eyes.max(0) + 10).astype(int)
    assert record.masks.target_keep[y0:y1, x0:x1].max() < 0.05, "the target's eyes are kept on top"
    # what the test is about: the segmenter does mark them (the raw probabilities, before the rule)
    scale = raw.shape[-1] / record.aligned.crop.shape[0]
    box = np.s_[int(y0 * scale):int(y1 * scale) + 1, int(x0 * scale):int(x1 * scale) + 1]
    assert raw[occlusion.OCCLUDER][box].max() > occlusion.OCCLUDER_FLOOR
    # and the judge sees more of the source than of the target's own face
    _closer_to_the_source(fuser, out, source, target)


def test_a_shadow_floating_on_the_face_is_not_an_occluder_kept_from_the_target(fuser, faces_dir):
    """The segmenter calls the deep shadow of a side-lit eye socket "occluder" (faces/hard/sidelight/05): a patch
    wholly inside the face, touching nothing that reaches it from outside. Kept on top, it put the target's own
    shadowed eye into the new face (on the shared concert clip, 13 of 147 frames closer to the singer for that
    alone). Such patches are taken out of the occluder class (fusion/occlusion._floating); what reaches the face
    from outside — her hair — and a glasses frame round the eyes (test_glasses_on_the_target_stay_on_top) stay."""

    from facefuse.fusion import occlusion
    from facefuse.geometry.regions import FACE_OVAL, polygon_mask

    source = next((faces_dir / "hard/same-person/jay_chou").iterdir())
    target = faces_dir / "hard/sidelight/05_sidelit_woman_black_bg_bw.jpg"
    out, record, points, raw = _segmented(fuser, source, target)
    side = raw.shape[-1]
    scale = side / record.aligned.crop.shape[0]
    inner = cv2.erode((polygon_mask(points[FACE_OVAL] * scale, side) > 0.5).astype(np.uint8), np.ones((9, 9), np.uint8))
    count, labels = cv2.connectedComponents((raw[occlusion.OCCLUDER] > occlusion.OCCLUDER_FLOOR).astype(np.uint8))
    # as the rule reads a region: to the network's faint edge (a sure core whose faint rim runs past the jaw into the
    # dark beyond it, as the twenty-eighth stop's segmenter marks under her chin, touches the outside), and deeper
    # than a thin piece (a frame's rim, a brow: those stay by design)
    _, rims = cv2.connectedComponents((raw[occlusion.OCCLUDER] > occlusion.OCCLUDER_EDGE).astype(np.uint8))
    reaching = np.unique(rims[inner == 0])
    patches = [labels == i for i in range(1, count)
               if not ((labels == i) & (inner == 0)).any() and not np.isin(rims[labels == i], reaching[reaching > 0]).any()
               and occlusion._depth(np.pad((labels == i).astype(np.uint8), 1)) >= occlusion.PATCH_DEPTH * side]
    # what the test is about: the segmenter marks such a patch, a sizeable one
    assert patches and max(p.sum() for p in patches) >= 30, [p.sum() for p in patches]
    keep = cv2.resize(record.masks.target_keep, (side, side), interpolation=cv2.INTER_AREA)
    for patch in patches:
        assert keep[patch].max() < 0.05, "a shadow on the face is kept from the target"
    assert keep.max() > 0.5, "what reaches the face from outside (her hair) is still kept"
    _closer_to_the_source(fuser, out, source, target)


def test_a_side_lit_shadow_reaching_the_jaw_is_the_targets_skin_not_an_occluder(fuser, faces_dir):
    """The segmenter calls the deep shadow beside a side-lit nose "occluder" down to the jaw (faces/hard/sidelight/01):
    reaching the face's edge, it is no floating patch, and kept on top it drew the target's own shadowed cheek into
    the new face as a black streak beside the nose (issue 17). Darker than the skin round it, of its chromaticity
    and no more textured, it is the face's shadow (fusion/occlusion._shadows): not kept, and bare skin to the relight,
    so the new cheek takes the shadow's light."""
    from facefuse.fusion import occlusion

    source = faces_dir / "hard/same-person/yang_mi/01_selfie_indoor_ambient.jpg"
    target = faces_dir / "hard/sidelight/01_lowkey_studio_woman.jpg"
    out, record, points, raw = _segmented(fuser, source, target)
    side = raw.shape[-1]
    face = polygon_mask(points[FACE_OVAL] * (side / record.aligned.crop.shape[0]), side) > 0.5
    count, labels = cv2.connectedComponents((raw[occlusion.OCCLUDER] > occlusion.OCCLUDER_FLOOR).astype(np.uint8))
    reaching = [(labels == i) & face for i in range(1, count) if ((labels == i) & ~face).any()]
    # what the test is about: a sizeable occluder region on the face that also reaches beyond it
    shadow = max(reaching, key=np.sum)
    assert shadow.sum() >= 100, shadow.sum()
    keep, skin = (cv2.resize(m, (side, side), interpolation=cv2.INTER_AREA)
                  for m in (record.masks.target_keep, record.masks.target_skin))
    assert keep[shadow].max() < 0.05, "the target's shadowed cheek is kept on top of the new face"
    assert skin[shadow].mean() > 0.5, "the relight does not see the shadow as the target's skin"
    _closer_to_the_source(fuser, out, source, target)


@pytest.mark.parametrize("target", ["occluded/01_microphone_over_mouth.png", "occluded/07_hat_over_eyes_hand_at_chin.jpg",
                                    "glasses/07_thick_black_frames_man.png", "glasses/08_dark_sunglasses.jpg"])
def test_dark_occluders_are_not_taken_for_the_faces_shadow(fuser, faces_dir, target):
    """What covers a face differs from its shadow in colour (a hat), texture (glasses, a microphone's mesh) or
    lightness (a hand): the shadow rule (fusion/occlusion._shadows) takes no occluder away from these photos, whose
    occluders are as dark as a shadow; the occluder class is the same with the photo's pixels as without."""
    from facefuse.fusion import occlusion

    source = faces_dir / "face_recognition/biden.jpg"
    _, record, points, raw = _segmented(fuser, source, faces_dir / "hard" / target)
    crop = occlusion.segmenter_crop(record.aligned.crop)
    at_scale = points * (raw.shape[-1] / record.aligned.crop.shape[0])
    assert (raw[occlusion.OCCLUDER] > occlusion.OCCLUDER_FLOOR).sum() >= 100  # the photo has a sizeable occluder
    np.testing.assert_array_equal(occlusion.without_false_occluders(raw, at_scale, crop),
                                  occlusion.without_false_occluders(raw, at_scale))


def test_a_sideburn_on_the_sources_rim_is_hidden_and_the_inside_of_its_face_untouched(fuser, faces_dir):
    """The network's hair stops short of a sideburn and a dark lock by the ear (faces/hard/same-person/jay_chou/01),
    which came onto the new face's edge. In the source's own parsing, what lies on the rim of its face oval, is not
    face to the network and is far from the skin's colour beside it becomes an occluder, hidden from the new face
    (fusion/occlusion.source_edge): pixels of the rim change, none inside it."""
    from facefuse.analysis.segmentation import OCCLUDER
    from facefuse.fusion import occlusion
    from facefuse.geometry import align

    source = faces_dir / "hard/same-person/jay_chou/01_studio_tilted_warm.jpg"
    _, record, _, _ = _segmented(fuser, source, faces_dir / "face_recognition/obama-720p.jpg")
    parsed = record.face_source.source_parsing()
    analysis = fuser.analyze(source)
    face = max(analysis.faces, key=lambda f: f.area)
    matrix, size = record.face_source.engine.crop_matrix(face, FusionOptions())
    crop = occlusion.segmenter_crop(align.aligned_crop(analysis.image, matrix, size))
    points = align.apply(matrix * (crop.shape[0] / size), face.landmarks)[:, :2]
    segmenter = next(s for s in fuser.stages.stages if s.name == "segment").segmenter()
    before = occlusion.without_false_occluders(segmenter.probabilities(crop[None])[0], points, crop)
    hidden = parsed.probabilities[OCCLUDER] - before[OCCLUDER] > 0.3
    assert hidden.sum() >= 20, hidden.sum()  # what the test is about: the rule hides something there
    oval = (polygon_mask(points[FACE_OVAL], crop.shape[0]) > 0.5).astype(np.uint8)
    rim = round(occlusion.EDGE_BAND * float(np.ptp(points[FACE_OVAL, 0])))
    inside = cv2.erode(oval, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * rim + 1,) * 2)) > 0
    np.testing.assert_array_equal(parsed.probabilities[:, inside], before[:, inside])


def _parsed_alone(fuser, photo):
    """A photo's largest face as the segment stage parses a target: the segmenter's raw probabilities for its crop,
    the face's 468 points at the segmenter's scale, and the same after :func:`without_false_occluders`."""
    from facefuse.analysis.segmentation import SEGMENT_SIZE
    from facefuse.fusion.occlusion import segmenter_crop, without_false_occluders
    from facefuse.geometry import align

    analysis = fuser.analyze(photo)
    face = max(analysis.faces, key=lambda f: f.area)
    matrix, size = fuser.engine("mesh").crop_matrix(face, FusionOptions())
    crop = segmenter_crop(align.aligned_crop(analysis.image, matrix, size))
    raw = fuser.segmenter().probabilities(crop[None])[0]
    points = align.apply(matrix, face.landmarks)[:, :2] * (SEGMENT_SIZE / size)
    return raw, points, without_false_occluders(raw, points, crop)


def test_a_brow_the_segmenter_calls_occluder_is_the_brow_and_a_frame_stays(fuser, faces_dir):
    """att-faces s9/1: the network calls a dark brow "occluder", which kept the target's brow on every new face
    (fusion/occlusion._brow_parts). leonard1 wears thick frames just under his brows: every occluder pixel of the
    frame (outside the brows) stays."""
    from facefuse.analysis.segmentation import OCCLUDER
    from facefuse.fusion.occlusion import OCCLUDER_EDGE

    def on_brows(points):
        return polygon_mask(points[RIGHT_BROW], 128, points[LEFT_BROW]) > 0.5

    raw, points, cleaned = _parsed_alone(fuser, faces_dir / "att-faces/s9/1.pgm")
    brows = on_brows(points)
    before, after = (int((p[OCCLUDER][brows] > OCCLUDER_EDGE).sum()) for p in (raw, cleaned))
    assert before >= 20 and after <= before - 15, (before, after)

    raw, points, cleaned = _parsed_alone(fuser, faces_dir / "face-api-js/leonard/leonard1.png")
    near_brows = cv2.dilate(on_brows(points).astype(np.uint8), np.ones((7, 7), np.uint8)) > 0
    frame = (raw[OCCLUDER] > OCCLUDER_EDGE) & ~near_brows
    assert frame.sum() >= 100  # what the test is about: the frame is there
    np.testing.assert_array_equal(cleaned[OCCLUDER][frame], raw[OCCLUDER][frame])


def _segmented(fuser, source, target):
    """A fusion's output, its record as the segment stage left it, the target's 468 points in the aligned crop and
    the segmenter's raw probabilities for that crop (before any rule)."""
    from facefuse.fusion.occlusion import segmenter_crop
    from facefuse.geometry import align
    from facefuse.stages import Record, Stage

    class AfterSegment(Stage):
        name = "after_segment"
        per_face = True
        seen: list[Record] = []

        def __call__(self, record: Record) -> Record:
            self.seen.append(record)
            return record

    watch = AfterSegment()
    out = fuser.with_stage(watch, after="segment").fuse(source, target, FusionOptions(visible_label=False)).image
    record = watch.seen[-1]
    assert record.masks is not None and record.aligned is not None and record.face is not None
    points = align.apply(record.aligned.matrix, record.face.face.landmarks)[:, :2]
    segmenter = next(s for s in fuser.stages.stages if s.name == "segment").segmenter()
    return out, record, points, segmenter.probabilities(segmenter_crop(record.aligned.crop)[None])[0]


def _closer_to_the_source(fuser, out, source, target) -> None:
    """The independent judge finds the output closer to the source photo than to the target's own face."""
    from facefuse_eval.fusion import IdentityJudge

    judge = IdentityJudge(fuser.store, fuser.runtime)

    def embedding(image):
        analysis = fuser.analyze(np.asarray(image))
        return judge.embed(analysis.image, max(analysis.faces, key=lambda f: f.area))

    fused = embedding(out)
    assert float(fused @ embedding(fuser.analyze(source).image)) > float(fused @ embedding(fuser.analyze(target).image))
