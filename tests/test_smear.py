"""Smears on the new face's rim (issue 17): the source's own shading bands along the cheek and jaw are not carried
into a target lit differently (:mod:`facefuse.fusion.cast_shadows`).

donald_trump (a frontal stage photo, lit from above, deep folds beside the nose and a shadowed jaw) onto yang_mi's
ambient-lit selfie: with the plain 6 % Gaussian shading his jaw's shadow came out as a dark band along her jaw, the
largest smear 8.45 % of the bare-skin zone; the shading that follows the light's edges on the rim leaves 4.5 %.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefuse.fusion.cast_shadows import edge_aware_shading
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.relight import skin_shading
from facefuse_eval.pose_judge import PoseJudge
from facefuse_eval.skin import bare_skin_zone, face_width, smear


def test_a_frontal_sources_jaw_shadow_leaves_no_band_on_an_ambient_lit_target(fuser, faces_dir):
    people = faces_dir / "hard" / "same-person"
    source, target = people / "donald_trump/01_speaking_blue_bg.jpg", people / "yang_mi/01_selfie_indoor_ambient.jpg"
    result = fuser.fuse(source, target, FusionOptions(visible_label=False))
    analysis = fuser.analyze(target)
    face = analysis.faces[result.faces[0]["index"]]
    judge = PoseJudge()
    points = judge.landmarks(analysis.image, judge.face_rect(analysis.image, face.box))
    zone = bare_skin_zone(points, analysis.image.shape)
    largest = smear(result.image, analysis.image, zone, face_width(points)).largest_share
    assert largest < 0.06, largest  # 8.45 % with the plain shading on the rim, 4.5 % with the edge-aware one


def _shadowed_face(size: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """A flat skin disc (L* 180) whose left part lies in a hard-edged cast shadow (L* 110), with pore-like noise;
    and its skin weight."""
    rng = np.random.default_rng(0)
    lab = np.full((size, size, 3), 128.0, np.float32)
    lab[..., 0] = 180.0
    lab[:, : size // 4, 0] = 110.0
    lab[..., 0] += rng.normal(0.0, 3.0, (size, size)).astype(np.float32)
    weight = np.zeros((size, size), np.float32)
    cv2.circle(weight, (size // 2, size // 2), int(size * 0.45), 1.0, -1)
    return lab, weight


def test_the_edge_aware_shading_follows_a_cast_shadows_edge_on_the_rim_and_not_inside():
    lab, weight = _shadowed_face()
    sigma = 0.06 * 230
    plain = skin_shading(lab, weight, sigma)
    followed = edge_aware_shading(lab, weight, sigma, plain)
    # on the rim, just inside the shadow's edge where it meets the outline (the shadow ends at x 64), the plain
    # estimate is pulled up by the lit skin beside it (the band a person sees once the target's shading replaces
    # it); the edge-aware one stays with the shadow
    for y, x in ((46, 56), (200, 52)):
        assert plain[y, x, 0] - 110.0 > 12.0, plain[y, x, 0]
        assert abs(followed[y, x, 0] - 110.0) < 4.0, followed[y, x, 0]
    # more than 15 % of the face's width inside its outline the estimate is the plain one, even beside the same
    # edge: the inner face's shading is its shape, and identity
    assert followed[128, 60, 0] == plain[128, 60, 0]
    inner = (slice(110, 146), slice(110, 146))
    assert np.array_equal(followed[inner], plain[inner])
