"""Face analysis on real photos with real ONNX Runtime sessions: detection recall, landmark accuracy, rotation
recovery, pose sign conventions, the quality gate's codes and face choice.

Reference levels are justified where they are asserted; measured values are in benchmarks/results/analysis.md.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest

from facefuse.analysis.analyzer import FaceAnalyzer
from facefuse.analysis.detectors import DETECTOR_NAMES, make_detector
from facefuse_eval.analysis import landmark_nme, load_dlib_annotations, match_faces
from facefuse.analysis.select import choose_faces
from facefuse.analysis.types import ImageAnalysis
from facefuse.config import AnalysisConfig, QualityConfig, StoreConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.imageio import decode_image
from facefuse.models import ModelStore
from facefuse.runtime import Runtime


@pytest.fixture(scope="module")
def store(store_config: StoreConfig) -> ModelStore:
    return ModelStore(store_config)


@pytest.fixture(scope="module")
def runtime() -> Runtime:
    return Runtime()


@pytest.fixture(scope="module")
def analyzer(store: ModelStore, runtime: Runtime) -> FaceAnalyzer:
    return FaceAnalyzer(store, runtime, AnalysisConfig())


def analyzer_with(store: ModelStore, runtime: Runtime, **changes) -> FaceAnalyzer:
    quality = changes.pop("quality", {})
    config = AnalysisConfig(**changes)
    config = config.replaced(quality=config.quality.replaced(**quality))
    return FaceAnalyzer(store, runtime, config)


def photo(faces_dir: Path, relative: str) -> np.ndarray:
    return decode_image(faces_dir / relative).pixels


def box_xyxy(box: np.ndarray) -> np.ndarray:
    return np.array([box[0], box[1], box[0] + box[2], box[1] + box[3]])


# -- detection recall and landmark accuracy on dlib's annotated faces --------------------------------------------

# 43 faces in 9 PASCAL VOC photos, 37–109 px. Measured recall at IoU ≥ 0.5 (boxes compared as they come, no
# conversion: BlazeFace's boxes are on median 1.02–1.05× dlib's, YuNet/RetinaFace's 0.9×): blazeface 41/43,
# blazeface_full 41/43, yunet 43/43, retinaface 43/43. Of the two BlazeFace misses one face is not found at all
# and one scores 0.48, a hair under the 0.5 detection threshold, so the floor allows one miss more than measured.
# blazeface_short is built for faces within ~2 m and finds only 10/43 of these small faces: not asserted here.
MIN_RECALL = {"blazeface": 0.93, "blazeface_full": 0.93, "yunet": 0.95, "retinaface": 0.95}


@pytest.mark.parametrize("detector", sorted(MIN_RECALL))
def test_detection_recall_on_dlib_faces(faces_dir: Path, store: ModelStore, runtime: Runtime, detector: str) -> None:
    analyzer = analyzer_with(store, runtime, detector=detector, try_rotations=False)
    found = total = 0
    for image in load_dlib_annotations(faces_dir / "dlib-faces"):
        analysis = analyzer.analyze(decode_image(image.path).pixels)
        matches = match_faces([f.box for f in image.faces], [box_xyxy(f.box) for f in analysis.faces])
        found += sum(m is not None for m in matches)
        total += len(image.faces)
    assert total == 43
    recall = found / total
    print(f"{detector}: recall {found}/{total} = {recall:.3f}")
    assert recall >= MIN_RECALL[detector]


def test_landmark_error_on_dlib_faces(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    """Normalised mean error over eye corners, nose tip and mouth corners, against dlib's 68-point annotations.

    Measured: mean 0.048, worst face 0.094. The annotations are themselves dlib's predictions on 37–109 px
    faces and the two schemes place eye corners and the nose tip slightly differently, so ~0.04 is the floor of
    this comparison. The bounds (mean 0.06, any face 0.15) still catch a landmark stage that drifts by a
    quarter of an eye width, a swapped point order or a mis-mapped crop.
    """
    errors = []
    for image in load_dlib_annotations(faces_dir / "dlib-faces"):
        analysis = analyzer.analyze(decode_image(image.path).pixels)
        matches = match_faces([f.box for f in image.faces], [box_xyxy(f.box) for f in analysis.faces], 0.3)
        errors += [landmark_nme(analysis.faces[m].landmarks, truth.points)
                   for truth, m in zip(image.faces, matches) if m is not None]
    assert len(errors) >= 40
    print(f"NME mean {np.mean(errors):.4f} max {np.max(errors):.4f} over {len(errors)} faces")
    assert np.mean(errors) < 0.06
    assert np.max(errors) < 0.15


@pytest.mark.parametrize("detector", DETECTOR_NAMES)
def test_every_detector_keeps_the_point_contract(faces_dir: Path, store: ModelStore, runtime: Runtime,
                                                 detector: str) -> None:
    """First point the image-left eye, second the image-right eye, third the nose below and between them."""
    image = photo(faces_dir, "face_recognition/obama.jpg")
    detections = make_detector(detector, store, runtime).detect(image)
    assert len(detections) == 1
    det = detections[0]
    left_eye, right_eye, nose = det.points[0], det.points[1], det.points[2]
    assert left_eye[0] < nose[0] < right_eye[0]
    assert nose[1] > max(left_eye[1], right_eye[1])
    x0, y0, x1, y1 = det.box
    assert x0 < left_eye[0] and right_eye[0] < x1 and y0 < min(left_eye[1], right_eye[1]) and nose[1] < y1
    assert det.score >= 0.7  # the quality gate's default


# -- rotation -------------------------------------------------------------------------------------------------


def turn_points(points: np.ndarray, angle: int, width: int, height: int) -> np.ndarray:
    """Where points of a ``width``×``height`` image land when the image is turned ``angle``° clockwise."""
    x, y = points[:, 0], points[:, 1]
    turned = {0: (x, y), 90: (height - 1 - y, x), 180: (width - 1 - x, height - 1 - y), 270: (y, width - 1 - x)}
    return np.column_stack(turned[angle])


@pytest.mark.parametrize("angle", [0, 90, 180, 270])
def test_rotation_recovery(faces_dir: Path, analyzer: FaceAnalyzer, angle: int) -> None:
    """rot_N.jpg is rot_0.jpg turned N° clockwise. The face must be found, its landmarks must be the upright
    photo's landmarks turned the same way (coordinates are always in the file as given), and the reported
    rotation must be one that makes the face findable: 0 when the detector copes with the sideways face
    itself, else the turn back to upright (360 − N). Upside down (180) BlazeFace never copes, so the retry is
    what finds that face."""
    folder = "insightface/inspireface/rotate"
    upright = analyzer.analyze(photo(faces_dir, f"{folder}/rot_0.jpg"))
    analysis = analyzer.analyze(photo(faces_dir, f"{folder}/rot_{angle}.jpg"))
    assert len(analysis.faces) == 1
    face = analysis.faces[0]
    assert face.accepted, face.issues
    assert analysis.rotation in {0, (360 - angle) % 360}
    if angle == 180:
        assert analysis.rotation == 180
    height, width = upright.image.shape[:2]
    expected = turn_points(upright.faces[0].landmarks[:, :2], angle, width, height)
    inter_ocular = np.linalg.norm(upright.faces[0].keypoints[0] - upright.faces[0].keypoints[1])
    assert np.linalg.norm(face.landmarks[:, :2] - expected, axis=1).mean() < 0.05 * inter_ocular
    reference = upright.faces[0].pose
    assert abs(face.pose.yaw - reference.yaw) < 4 and abs(face.pose.pitch - reference.pitch) < 4
    # roll is measured in the view the face was found in: the file's turn plus the retry's turn
    roll_gap = (face.pose.roll - reference.roll - angle - analysis.rotation + 180) % 360 - 180
    assert abs(roll_gap) < 5


def test_rotation_retry_can_be_switched_off(faces_dir: Path, store: ModelStore, runtime: Runtime) -> None:
    analyzer = analyzer_with(store, runtime, try_rotations=False)
    analysis = analyzer.analyze(photo(faces_dir, "insightface/inspireface/rotate/rot_180.jpg"))
    assert analysis.rotation == 0
    assert not any(f.accepted for f in analysis.faces)


@pytest.mark.parametrize("name", ["obama.jpg", "biden.jpg"])
def test_a_photo_turned_upside_down_is_reported_as_turned_180(faces_dir: Path, analyzer: FaceAnalyzer,
                                                              name: str) -> None:
    """These portraits, turned 180°, are first found sideways in the 90° view (roll about −90° there); the
    analyzer must look again in the view that shows the head upright and report that turn."""
    upright = analyzer.analyze(photo(faces_dir, f"face_recognition/{name}"))
    analysis = analyzer.analyze(np.ascontiguousarray(photo(faces_dir, f"face_recognition/{name}")[::-1, ::-1]))
    assert analysis.rotation == 180 and len(analysis.faces) == 1
    assert abs(analysis.faces[0].pose.roll - upright.faces[0].pose.roll) < 5


def test_a_huge_photo_is_analysed_on_a_reduced_copy_with_full_size_coordinates(faces_dir: Path,
                                                                              analyzer: FaceAnalyzer) -> None:
    image = photo(faces_dir, "face_recognition/obama.jpg")
    big = cv2.resize(image, (image.shape[1] * 4, image.shape[0] * 4), interpolation=cv2.INTER_CUBIC)  # 3640×4548
    small, big_analysis = analyzer.analyze(image).faces[0], analyzer.analyze(big).faces[0]
    assert np.allclose(big_analysis.box, small.box * 4, atol=0.03 * small.box[2] * 4)
    eyes = np.linalg.norm(small.keypoints[0] - small.keypoints[1]) * 4
    assert np.linalg.norm(big_analysis.landmarks[:, :2] - small.landmarks[:, :2] * 4, axis=1).mean() < 0.05 * eyes


# -- pose sign conventions ---------------------------------------------------------------------------------------

# Directions read by eye from the photos: in john2.jpeg the man turns toward the image's left (his right), in
# yifei.jpg the woman toward the image's right, in kun.jpg the man looks down.
POSE_FACTS = [
    ("face_recognition/knn_examples/train/kit_harington/john2.jpeg", "yaw", +1),
    ("insightface/inspireface/bulk/yifei.jpg", "yaw", -1),
    ("insightface/inspireface/bulk/kun.jpg", "pitch", -1),
]


@pytest.mark.parametrize("relative,angle,sign", POSE_FACTS)
def test_pose_signs_on_real_photos(faces_dir: Path, analyzer: FaceAnalyzer, relative: str, angle: str,
                                   sign: int) -> None:
    face = choose_faces(analyzer.analyze(photo(faces_dir, relative)).faces, "largest")[0]
    assert sign * getattr(face.pose, angle) > 8


def test_mirroring_flips_yaw_and_roll_but_not_pitch(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    image = photo(faces_dir, "face_recognition/knn_examples/train/kit_harington/john2.jpeg")
    pose = analyzer.analyze(image).faces[0].pose
    mirrored = analyzer.analyze(np.ascontiguousarray(image[:, ::-1])).faces[0].pose
    assert abs(pose.yaw + mirrored.yaw) < 4
    assert abs(pose.roll + mirrored.roll) < 4
    assert abs(pose.pitch - mirrored.pitch) < 4


@pytest.mark.parametrize("turn", [-20.0, 20.0])
def test_roll_follows_an_in_plane_turn(faces_dir: Path, analyzer: FaceAnalyzer, turn: float) -> None:
    """Turning the photo clockwise by ``turn`` degrees adds ``turn`` to roll and leaves yaw and pitch alone."""
    image = photo(faces_dir, "face_recognition/obama.jpg")
    height, width = image.shape[:2]
    matrix = cv2.getRotationMatrix2D((width / 2, height / 2), -turn, 1.0)  # OpenCV: positive = anticlockwise
    turned = cv2.warpAffine(image, matrix, (width, height), borderMode=cv2.BORDER_REPLICATE)
    before = analyzer.analyze(image).faces[0].pose
    after = analyzer.analyze(turned).faces[0].pose
    assert abs((after.roll - before.roll) - turn) < 3
    # the turned photo is resampled and its face crop differs slightly, which moves FaceMesh's depth estimate
    # (measured up to 5°), so yaw and pitch are only checked to stay put within 6°
    assert abs(after.yaw - before.yaw) < 6 and abs(after.pitch - before.pitch) < 6


def test_sideways_face_reports_yaw_and_pitch_in_the_heads_frame(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    """A face lying on its side must not report its pitch as yaw (regression: angles read in image axes)."""
    upright = analyzer.analyze(photo(faces_dir, "insightface/inspireface/bulk/r0.jpg")).faces[0].pose
    for name in ("r90.jpg", "r270.jpg"):
        pose = analyzer.analyze(photo(faces_dir, f"insightface/inspireface/bulk/{name}")).faces[0].pose
        assert abs(pose.yaw - upright.yaw) < 4 and abs(pose.pitch - upright.pitch) < 4


# -- quality gate ------------------------------------------------------------------------------------------------


def codes(analysis: ImageAnalysis) -> set[str]:
    return {issue.code for face in analysis.faces for issue in face.issues}


def refusal(analysis: ImageAnalysis, choice: str | int = "largest") -> FacefuseError | None:
    """The pipeline's gate stage's verdict on ``analysis`` as detect gives it (no restoring)."""
    from facefuse.fusion.engine import FusionOptions
    from facefuse.stages import Record
    from facefuse.stages.gate import Gate

    record = Record("image", FusionOptions(target_face=choice, restore="off"), must_fuse=False, analysis=analysis,
                    image=analysis.image)
    return Gate(QualityConfig())(record).refusal


def test_a_clear_portrait_passes_the_gate(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    analysis = analyzer.analyze(photo(faces_dir, "face_recognition/obama.jpg"))
    assert [f.accepted for f in analysis.faces] == [True]
    face = analysis.faces[0]
    assert face.landmarks.shape == (468, 3)
    assert face.keypoints.shape == (5, 2)
    assert refusal(analysis) is None
    assert list(analysis.timings_ms) == ["detect", "landmarks", "gate"]  # the stages' names, outside the pipeline


def test_no_face(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    analysis = analyzer.analyze(photo(faces_dir, "dlib-faces/dogs.jpg"))
    caught = refusal(analysis)
    assert caught is not None and caught.code is ErrorCode.NO_FACE
    assert caught.hint


def test_low_confidence(faces_dir: Path, store: ModelStore, runtime: Runtime) -> None:
    strict = analyzer_with(store, runtime, quality={"min_score": 0.999})
    analysis = strict.analyze(photo(faces_dir, "face_recognition/obama.jpg"))
    assert codes(analysis) == {"LOW_CONFIDENCE"}


def test_face_too_small(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    image = photo(faces_dir, "face_recognition/obama.jpg")
    small = cv2.resize(image, None, fx=0.12, fy=0.12, interpolation=cv2.INTER_AREA)
    padded = cv2.copyMakeBorder(small, 60, 60, 60, 60, cv2.BORDER_REPLICATE)  # keep the photo above min size
    analysis = analyzer.analyze(padded)
    assert analysis.faces, "the shrunken face should still be found"
    assert "FACE_TOO_SMALL" in codes(analysis)


def test_pose_too_large_says_which_angle_and_by_how_much(faces_dir: Path, store: ModelStore,
                                                         runtime: Runtime) -> None:
    strict = analyzer_with(store, runtime, quality={"max_yaw": 10.0})
    face = strict.analyze(photo(faces_dir, "face_recognition/knn_examples/train/kit_harington/john2.jpeg")).faces[0]
    issue = next(i for i in face.issues if i.code == "POSE_TOO_LARGE")
    assert issue.details["angle"] == "yaw"
    assert issue.details["excess"] == pytest.approx(abs(face.pose.yaw) - 10.0, abs=0.1)
    assert "yaw" in issue.message and f"by {abs(face.pose.yaw) - 10:.1f}°" in issue.message


def test_too_blurry(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    """A Gaussian blur of 4 px at the 112-px aligned-face scale: plainly unusable to a person looking at it."""
    image = photo(faces_dir, "face_recognition/obama.jpg")
    sharp = analyzer.analyze(image).faces[0]
    assert sharp.accepted
    blurred = cv2.GaussianBlur(image, (0, 0), 4 * sharp.box[2] / 112)
    analysis = analyzer.analyze(blurred)
    assert "TOO_BLURRY" in codes(analysis)
    caught = refusal(analysis)
    assert caught is not None and caught.code is ErrorCode.TOO_BLURRY


def test_sharpness_threshold_is_configurable_on_a_real_blurry_photo(faces_dir: Path, store: ModelStore,
                                                                    runtime: Runtime) -> None:
    """bulk/blur.jpg is a real motion-blurred night shot; sensor noise keeps its Laplacian variance above the
    default floor, so a stricter floor (100) is what rejects it, while sharp portraits still pass."""
    strict = analyzer_with(store, runtime, quality={"min_sharpness": 100.0})
    assert "TOO_BLURRY" in codes(strict.analyze(photo(faces_dir, "insightface/inspireface/bulk/blur.jpg")))
    assert strict.analyze(photo(faces_dir, "face_recognition/obama.jpg")).faces[0].accepted


# -- face choice -----------------------------------------------------------------------------------------------


def test_face_choice_left_to_right(faces_dir: Path, analyzer: FaceAnalyzer) -> None:
    analysis = analyzer.analyze(photo(faces_dir, "face_recognition/two_people.jpg"))
    assert len(analysis.faces) == 2
    assert analysis.faces[0].box[0] < analysis.faces[1].box[0]
    assert choose_faces(analysis.faces, 1)[0] is analysis.faces[1]
    assert choose_faces(analysis.faces, "largest")[0] is max(analysis.faces, key=lambda f: f.area)
    assert len(choose_faces(analysis.faces, "all")) == 2
    with pytest.raises(FacefuseError) as caught:
        choose_faces(analysis.faces, 2)
    assert caught.value.code is ErrorCode.FACE_INDEX_OUT_OF_RANGE


# t1.jpg shows 6 people. BlazeFace's full-range model misses one of them (measured); YuNet and RetinaFace find all.
GROUP_FACES = {"blazeface": 5, "blazeface_full": 5, "yunet": 6, "retinaface": 6}


@pytest.mark.parametrize("detector", sorted(GROUP_FACES))
def test_group_photo(faces_dir: Path, store: ModelStore, runtime: Runtime, detector: str) -> None:
    """The default cascade must fall back to the full-range model here: the short-range one finds none."""
    analysis = analyzer_with(store, runtime, detector=detector).analyze(photo(faces_dir, "insightface/samples/t1.jpg"))
    assert len(analysis.faces) >= GROUP_FACES[detector]


def test_unknown_detector_is_an_option_error(store: ModelStore, runtime: Runtime) -> None:
    with pytest.raises(FacefuseError) as caught:
        make_detector("haar", store, runtime)
    assert caught.value.code is ErrorCode.INVALID_OPTION


def test_cascade_keeps_the_short_range_result_for_a_portrait(faces_dir: Path, store: ModelStore,
                                                             runtime: Runtime) -> None:
    """The speed path: a close-up is answered by the short-range model alone (the full-range model is not run)."""
    image = photo(faces_dir, "face_recognition/obama-720p.jpg")
    cascade = make_detector("blazeface", store, runtime).detect(image)
    short = make_detector("blazeface_short", store, runtime).detect(image)
    full = make_detector("blazeface_full", store, runtime).detect(image)
    assert len(cascade) == 1
    np.testing.assert_allclose(cascade[0].box, short[0].box)
    assert not np.allclose(cascade[0].box, full[0].box)


def test_facemesh_takes_every_face_of_a_photo_in_one_batch(fuser, faces_dir):
    """The store gives the converted FaceMesh the batch axis its contract declares; a batch must equal single runs."""
    from facefuse.analysis.landmarks import roi_from_mesh

    mesh = fuser.analyzer.mesh
    assert mesh.batched
    analysis = fuser.analyze(faces_dir / "insightface/samples/t1.jpg")
    rois = [roi_from_mesh(face.landmarks) for face in analysis.faces]
    assert len(rois) >= 4
    together = mesh.run(analysis.image, rois)
    alone = [mesh.run(analysis.image, [roi])[0] for roi in rois]
    for (points_b, score_b), (points_1, score_1) in zip(together, alone):
        assert np.allclose(points_b, points_1, atol=1e-3) and abs(score_b - score_1) < 1e-5


class _CountingSession:
    def __init__(self, session) -> None:
        self.session = session
        self.batches: list[int] = []

    def run(self, names, feed):
        self.batches.append(len(next(iter(feed.values()))))
        return self.session.run(names, feed)


def test_photos_of_several_requests_analysed_in_one_batch_equal_one_by_one(store_config, faces_dir):
    """``Fuser.analyze_many`` (the Ray analysis deployment's batch) runs FaceMesh once for the faces of every photo,
    answers each photo with its own faces, and gives a photo that cannot be read its own error in its place."""
    from facefuse.errors import ErrorCode, FacefuseError
    from facefuse.pipeline import Fuser, FuserConfig

    fresh = Fuser(FuserConfig(store=store_config, analysis_cache_mb=0))  # every photo really analysed
    rec = faces_dir / "face_recognition"
    photos = [(rec / "two_people.jpg").read_bytes(), b"not a photo", (rec / "obama.jpg").read_bytes()]
    counted = _CountingSession(fresh.analyzer.mesh.session)  # the real ONNX Runtime session, its runs counted
    fresh.analyzer.mesh.session = counted
    together = fresh.analyze_many([(photos[0], "image", None), (photos[1], "source", None), (photos[2], "target", None)])
    assert counted.batches[0] == 3  # the first FaceMesh run held the two faces of one photo and the face of the other
    assert isinstance(together[1], FacefuseError) and together[1].code is ErrorCode.UNSUPPORTED_IMAGE
    assert together[1].details["image"] == "source"
    for batched, photo in zip([together[0], together[2]], [photos[0], photos[2]]):
        alone = fresh.analyze(photo)
        assert len(batched.faces) == len(alone.faces)
        for a, b in zip(batched.faces, alone.faces):
            assert np.allclose(a.landmarks, b.landmarks, atol=1e-2)
