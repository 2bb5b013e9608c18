"""What a video or live track carries between its frames (issue 19), on real photos and the real segmenter: the
mirror fill (a source turned 41° onto a frontal face) and the segmenter's planes at the crop's size. Photos carry
nothing; a group's first frame measures exactly what a photo measures."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from video_clips import OBAMA_720P, camera, load

from facefuse.analysis.segmentation import SEGMENT_SIZE
from facefuse.fusion.engine import FusionOptions, StreamCarry
from facefuse.fusion.eyes import EyesChoice
from facefuse.fusion.mesh_engine import mirror_fill
from facefuse.fusion.occlusion import OCCLUDER_RULES, SegmenterPlanes, occlusion_masks
from facefuse.geometry.align import aligned_crop
from facefuse.video.options import VideoOptions
from facefuse.video.parsing import ParsingCarry
from facefuse.video.tracking import TrackedFace
from facefuse.video.turns import FaceTurns

TURNED = "hard/profile/01_turned_45.jpg"


@pytest.fixture(scope="module")
def frames(faces_dir: Path) -> list[np.ndarray]:
    """Three frames of a slow camera move over a frontal portrait (benchmarks/video.py's clip)."""
    photo = load(faces_dir / "face_recognition" / "obama-720p.jpg")
    return [camera(photo, (1280, 720), t, OBAMA_720P, pan=0.1, zoom=0.15, turn=3 * np.sin(i / 7))
            for i, t in enumerate((0.0, 0.25, 0.5))]


def rendered(fuser, source, frame: np.ndarray, options: FusionOptions, carry: StreamCarry | None = None):
    face = fuser.analyzer.analyze(frame).faces[0]
    matrix, size = source.engine.crop_matrix(face, options)
    crop = aligned_crop(frame, matrix, size)
    return face, crop, source.engine.render(source.prepared, crop, matrix, face, options, frame, carry)


def recording() -> tuple[StreamCarry, list]:
    """A carry that measures everything and keeps what it measured (triangles, toning, mirror fill, eyes)."""
    kept: list = [None, None, None, None]

    def turn(k: int):
        def measure(compute):
            kept[k] = compute()
            return kept[k]
        return measure
    return StreamCarry(*(turn(k) for k in range(4))), kept


def test_a_track_carries_its_mirror_fill_through_a_group(fuser, faces_dir: Path, frames: list[np.ndarray]):
    options = FusionOptions()
    source = fuser.prepare(faces_dir / TURNED, options)
    faces = [fuser.analyzer.analyze(frame).faces[0] for frame in frames[:2]]
    assert all(mirror_fill(source.face, face) is not None for face in faces)  # turned 41° against ~0°: filled
    turns = FaceTurns(VideoOptions())
    carried = []
    for index in (0, 1):
        (target,), taken = turns.take([TrackedFace(7, faces[index])], False)
        carried.append(rendered(fuser, source, frames[index], options, target.carry)[2].crop)
        for turn in taken:
            turn.close()
    own = rendered(fuser, source, frames[0], options)[2].crop
    assert np.array_equal(carried[0], own)  # a group's first frame measures, as a photo does
    # the second frame's render is the one given the first frame's triangles, toning and mirror fill ...
    lead, kept = recording()
    rendered(fuser, source, frames[0], options, lead)
    replay = StreamCarry(*(lambda compute, k=k: kept[k] for k in range(4)))
    assert np.array_equal(carried[1], rendered(fuser, source, frames[1], options, replay)[2].crop)
    # ... which the one that measures its own mirror fill matches (the fill is one side of a line across the face,
    # the same on both frames: issue 17 item 4) ...
    own_mirror = StreamCarry(lambda compute: kept[0], lambda compute: kept[1], lambda compute: compute(),
                             lambda compute: kept[3])
    assert np.array_equal(carried[1], rendered(fuser, source, frames[1], options, own_mirror)[2].crop)
    # ... while the render takes the fill the carry hands it: a weaker one changes it
    partners, weights = kept[2]
    weaker = StreamCarry(lambda compute: kept[0], lambda compute: kept[1], lambda compute: (partners, weights / 2),
                         lambda compute: kept[3])
    assert not np.array_equal(carried[1], rendered(fuser, source, frames[1], options, weaker)[2].crop)
    # and the eyes the group's first frame chose: the other choice keeps another interior of the target
    chosen = rendered(fuser, source, frames[1], options, replay)[2].keep_target
    other = StreamCarry(*(lambda compute, k=k: kept[k] for k in range(3)),
                        lambda compute: EyesChoice(kept[3].gazes_agree, not kept[3].source))
    assert not np.array_equal(chosen, rendered(fuser, source, frames[1], options, other)[2].keep_target)


def test_a_groups_frames_share_the_segmenter_planes_and_another_crop_size_rescales_them(
        fuser, faces_dir: Path, frames: list[np.ndarray]):
    source = fuser.prepare(faces_dir / "face_recognition" / "biden.jpg", FusionOptions())
    segmenter = next(s for s in fuser.stages.stages if s.name == "segment").segmenter()
    assert segmenter is not None
    rule = OCCLUDER_RULES["auto"]
    _, crop, new = rendered(fuser, source, frames[0], FusionOptions())
    own = occlusion_masks(segmenter, new, crop, rule)
    carry = ParsingCarry(3)
    lead = occlusion_masks(segmenter, new, crop, rule, carry.turn())
    follower = occlusion_masks(segmenter, new, crop, rule, carry.turn())
    fields = ("target_keep", "target_photo", "source_hidden", "target_skin", "source_skin")
    for name in fields:
        assert np.array_equal(getattr(lead, name), getattr(own, name)), name
        assert np.array_equal(getattr(follower, name), getattr(own, name)), name
    assert follower.source_hidden is lead.source_hidden  # shared, not scaled again
    assert not follower.source_hidden.flags.writeable  # several frames on several threads read it
    # a third frame whose crop is smaller: the lead's probabilities scaled to its size
    smaller = FusionOptions(crop_size=new.crop.shape[0] - 96)
    _, small_crop, small_new = rendered(fuser, source, frames[1], smaller)
    assert small_new.crop.shape[0] < new.crop.shape[0]
    third = occlusion_masks(segmenter, small_new, small_crop, rule, carry.turn())
    crops = np.stack(segmenter_inputs(crop, new.crop))
    at_size = SegmenterPlanes.scaled(*segmenter.probabilities(crops),
                                     (small_new.crop.shape[1], small_new.crop.shape[0]), rule, True)
    expected = occlusion_masks(segmenter, small_new, small_crop, rule, lambda compute: at_size)
    for name in fields:
        assert np.array_equal(getattr(third, name), getattr(expected, name)), name


def segmenter_inputs(photo: np.ndarray, new_face: np.ndarray) -> list[np.ndarray]:
    """The two crops the segment stage gives the segmenter, at its size."""
    return [cv2.resize(c, (SEGMENT_SIZE, SEGMENT_SIZE), interpolation=cv2.INTER_AREA) for c in (photo, new_face)]
