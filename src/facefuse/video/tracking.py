"""Face tracking through a clip: detect every n-th frame and at scene cuts, follow the faces in between.

Between detections each face is followed by running FaceMesh on the region its previous mesh predicts
(MediaPipe's own video recipe): one ~5 ms model run per face instead of a detector pass, and landmarks that do not
jump when the detector's box does. FaceMesh's face-presence score says when a face was lost (occlusion, it left the
frame). New detections are matched to followed faces by box overlap; a face seen again after it was lost or after a
scene cut gets its old track id back when its signature (the shape of its 3-D mesh in a head-fixed frame plus the
colour histogram of its skin) is close enough to the lost track's. The chosen face is locked to one track id, so
the fusion stays on the same person through the shot, through short occlusions, and across a cut when that
person is recognised in the new shot; when not (the signature is no face recognizer: people lit alike can look
alike to it, and a tiny face in a wide shot says little), the choice is made again in the new shot.

A live camera cannot wait for the detector: given an executor, a detection round due while faces are followed runs
there, on the frame that was due, while that frame and the next ones are fused with FaceMesh's own landmarks; its
result (which followed faces it confirmed, which new faces it found) is merged into the tracks at the first frame
after it finished, and the next round starts only after that (never two in flight); a round that looked at a frame
before a scene cut is dropped. While no face is followed a frame has no fusion to wait, so its round runs in it: a
face entering an empty picture (or a new shot) is fused in the very frame the detector finds it.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future
from dataclasses import dataclass, replace

import cv2
import numpy as np

from ..analysis.analyzer import FaceAnalyzer
from ..analysis.blazeface import area_resize
from ..analysis.landmarks import five_points, roi_from_mesh
from ..analysis.nms import iou_xyxy
from ..analysis.pose import face_axes, head_pose
from ..analysis.types import Face, largest, left_to_right
from ..geometry.regions import FACE_OVAL, IDENTITY_POINTS
from ..stages.gate import Gate
from .options import VideoOptions
from .reid import PersonAppearance
from .smoothing import MeshSmoother

PRESENCE_MIN = 0.5  # FaceMesh face-presence below this: the face was lost
IOU_MATCH = 0.3  # a detection and a followed face overlapping this much are the same face
MISSED_DETECTIONS = 2  # a followed face no detection confirms this many times in a row is dropped
LOST_MEMORY = 32  # lost tracks kept for re-identification
# the region FaceMesh follows a face in, as a multiple of its last mesh's extent: the framing a detected face gets
# (the analysis' region from the detector's box is ~6 % smaller than 1.5× the mesh it yields: 1.06 on four
# portraits, 1.02–1.11). At 1.5 the followed meshes sat ~2 px from a detected face's and the fused frames lost
# identity against the photo path on the same frames (issue 19, per-frame identity: MobileFaceNet cosine to the
# source 0.322 photo path, 0.275 with the followed mesh in its place); benchmarks/video.py --roi-extents
TRACKING_EXTENT = 1.41
REID_GEOMETRY = 0.12  # the most the normalised mesh shapes may differ for the same person
REID_COLOUR = 0.75  # the least Bhattacharyya coefficient of skin-colour histograms for the same person
SIGNATURE_WEIGHT = 0.2  # running average of a track's signature at each detection
GEOMETRY_POINTS = np.concatenate([FACE_OVAL, IDENTITY_POINTS])


@dataclass(frozen=True)
class Signature:
    """A cheap appearance descriptor: enough to tell the people of one clip apart, not a recognizer."""

    geometry: np.ndarray  # unit-norm, head-fixed 2-D shape of the face oval and features
    colour: np.ndarray | None  # normalised Lab histogram of the inner face (None for the source photo's role)

    def geometry_distance(self, other: Signature) -> float:
        return float(np.linalg.norm(self.geometry - other.geometry))

    def matches(self, other: Signature) -> bool:
        if self.geometry_distance(other) > REID_GEOMETRY:
            return False
        if self.colour is None or other.colour is None:
            return True
        return float(np.sum(np.sqrt(self.colour * other.colour))) >= REID_COLOUR

    def blend(self, other: Signature, weight: float) -> Signature:
        geometry = self.geometry + weight * (other.geometry - self.geometry)
        colour = self.colour if self.colour is None or other.colour is None else \
            self.colour + weight * (other.colour - self.colour)
        return Signature(geometry / np.linalg.norm(geometry), colour)


def signature(image: np.ndarray | None, mesh: np.ndarray) -> Signature:
    centred = mesh - mesh.mean(0)
    shape = (centred @ face_axes(mesh))[GEOMETRY_POINTS, :2]
    shape -= shape.mean(0)
    geometry = (shape / np.linalg.norm(shape)).ravel()
    if image is None:
        return Signature(geometry, None)
    oval = mesh[FACE_OVAL, :2]
    centre = oval.mean(0)
    inner = ((oval - centre) * 0.7 + centre).astype(np.int32)
    x0, y0 = np.maximum(inner.min(0), 0)
    x1, y1 = np.minimum(inner.max(0) + 1, [image.shape[1], image.shape[0]])
    if x1 - x0 < 4 or y1 - y0 < 4:
        return Signature(geometry, None)
    patch = image[y0:y1, x0:x1]
    mask = np.zeros(patch.shape[:2], np.uint8)
    cv2.fillPoly(mask, [inner - (x0, y0)], 1)
    lab = cv2.cvtColor(patch, cv2.COLOR_RGB2Lab)
    hist = cv2.calcHist([lab], [0, 1, 2], mask, [4, 8, 8], [0, 256, 0, 256, 0, 256]).ravel()
    return Signature(geometry, hist / max(float(hist.sum()), 1.0))


def mesh_box(mesh: np.ndarray) -> np.ndarray:
    lo, hi = mesh[:, :2].min(0), mesh[:, :2].max(0)
    return np.array([lo[0], lo[1], hi[0] - lo[0], hi[1] - lo[1]])


def iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two (x, y, w, h) boxes, by the analysis' one IoU."""
    def corners(box: np.ndarray) -> np.ndarray:
        return np.array([box[0], box[1], box[0] + box[2], box[1] + box[3]], dtype=np.float64)

    return float(iou_xyxy(corners(a), corners(b)[None])[0])


class SceneCuts:
    """A cut is a jump in the colour histogram of the whole (downscaled) frame between neighbours."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self._previous: np.ndarray | None = None

    def __call__(self, image: np.ndarray) -> bool:
        small = cv2.cvtColor(area_resize(image, 96, 54), cv2.COLOR_RGB2HSV)  # halving first: 0.6 ms, not 3.9 (720p)
        hist = cv2.calcHist([small], [0, 1, 2], None, [12, 4, 4], [0, 180, 0, 256, 0, 256])
        cv2.normalize(hist, hist, 1.0, 0.0, cv2.NORM_L1)
        previous, self._previous = self._previous, hist
        return previous is not None and cv2.compareHist(previous, hist, cv2.HISTCMP_BHATTACHARYYA) > self.threshold


@dataclass
class Track:
    id: int
    mesh: np.ndarray  # the latest raw mesh (the next frame's region comes from it)
    signature: Signature
    smoother: MeshSmoother | None
    active: bool = True
    unconfirmed: int = 0  # detection rounds in a row that did not see this face
    shot: int = 0  # the scene (count of cuts before it) the face was last seen in


@dataclass(frozen=True)
class DetectionRound:
    """What one detector pass over one frame said about the faces followed in that frame."""

    shot: int  # the scene the frame belongs to: a round from before a cut says nothing about the new shot
    image: np.ndarray  # the frame it looked at (the new faces' signatures come from it)
    looked_at: tuple[int, ...]  # the ids of the tracks followed in that frame
    confirmed: dict[int, Signature]  # of those, the ones a detector box overlapped, with their signature there
    new_faces: tuple[Face, ...]  # faces with landmarks that no followed face overlapped, left to right


@dataclass(frozen=True)
class TrackedFace:
    track_id: int
    face: Face  # smoothed landmarks, measured by the gate (score 1: a followed face is no detection)
    raw: np.ndarray | None = None  # the landmarks as measured in this frame (for look-ahead smoothing, .lookahead)


class FaceTracker:
    """Follows every face of a clip frame by frame and keeps the chosen one locked to one track id."""

    def __init__(self, analyzer: FaceAnalyzer, options: VideoOptions, gate: Gate, restoring: bool,
                 choice: str | int, source: Signature | None = None, rounds: Executor | None = None) -> None:
        self.analyzer = analyzer
        self.options = options
        self.gate = gate  # the pipeline's gate: which faces may be chosen is its rule, as for photos
        self.restoring = restoring  # whether the restore stage will try to fix a blurry or small face
        self.choice = choice
        self.source = source
        self.cuts = SceneCuts(options.scene_cut)
        self.tracks: list[Track] = []
        self.next_id = 0
        self.locked: int | None = None
        self._since_detection = options.every_n  # detect on the first frame
        self.detections = 0
        self.scene_cuts = 0
        self.relocks = 0
        self.reidentified = 0  # cuts after which the locked person was found again by appearance
        self.unrecognised = 0  # frames after a cut left unfused while the locked person was not found again
        self.person = PersonAppearance()  # what the locked person wears (see .reid)
        self._image: np.ndarray | None = None  # the frame of the latest step, for the appearance checks
        self._new_shot = False
        self._rounds = rounds  # where rounds over followed faces run (None: in the frame, as for a video)
        self._pending: Future[DetectionRound] | None = None
        self._detected = False  # a detection round's result was merged in the latest step

    # --- state carried over a resume ---------------------------------------------------------------------------
    def state(self) -> dict:
        locked = next((t for t in self.tracks if t.id == self.locked), None)
        return {"next_id": self.next_id, "locked": self.locked, "person": self.person.state(),
                "locked_signature": None if locked is None else {
                    "geometry": locked.signature.geometry.tolist(),
                    "colour": None if locked.signature.colour is None else locked.signature.colour.tolist()}}

    def restore(self, state: dict) -> None:
        self.next_id = int(state.get("next_id", 0))
        self.locked = state.get("locked")
        self.person = PersonAppearance.restored(state.get("person"))
        sig = state.get("locked_signature")
        if self.locked is not None and sig:
            colour = None if sig["colour"] is None else np.asarray(sig["colour"])
            self.tracks.append(Track(int(self.locked), np.zeros((468, 3)),
                                     Signature(np.asarray(sig["geometry"]), colour), None, active=False))

    # --- per frame -------------------------------------------------------------------------------------------------
    def step(self, image: np.ndarray, time: float) -> list[TrackedFace]:
        """Every followed face in this frame (``time`` in seconds, for the smoothing)."""
        if self.cuts(image):
            self.scene_cuts += 1
            for track in self.tracks:
                track.active = False
            self._since_detection = self.options.every_n
            self._new_shot = True
        self._image = image
        self._detected = False
        if self._pending is not None and self._pending.done():
            finished, self._pending = self._pending.result(), None
            self._merge(finished)  # before following, so a new face is followed in this very frame
        self._follow(image)
        self._since_detection += 1
        if self._since_detection >= self.options.every_n and self._pending is None:
            self._since_detection = 0
            self.detections += 1
            followed = [(t.id, t.mesh) for t in self.tracks if t.active]
            if self._rounds is not None and followed:
                # a copy: the caller may reuse its frame buffer (a camera's) while the round still reads it
                self._pending = self._rounds.submit(self._look, image.copy(), followed, self.scene_cuts)
            else:
                self._merge(self._look(image, followed, self.scene_cuts))
        return [self._tracked(image, track, time) for track in self.tracks if track.active]

    @property
    def in_flight(self) -> bool:
        """A detection round runs aside and its result is not merged yet."""
        return self._pending is not None

    def wait(self) -> None:
        """Merge the detection round in flight, if any, waiting for it (the end of a stream; tests)."""
        if self._pending is not None:
            finished, self._pending = self._pending.result(), None
            self._merge(finished)

    def chosen(self, faces: list[TrackedFace]) -> list[TrackedFace]:
        """The faces to fuse in this frame: every accepted one for "all", else the locked person's, if visible."""
        accepted = [f for f in faces if self.gate.usable(f.face, self.restoring)]
        if self.choice == "all":
            return accepted
        if self._new_shot and accepted and self.locked is not None and self.person.known:
            # after a cut the lock goes to the face dressed like the locked person (.reid); until one is, nobody in
            # the shot is fused, rather than the source landing on someone else
            assert self._image is not None
            found = self.person.find(self._image, [(f.track_id, f.face.box) for f in accepted])
            if found is None:
                self.unrecognised += 1
                return []
            self._new_shot, self.locked = False, found
            self.reidentified += 1
        if self._new_shot and accepted:
            # the first frame after a cut with a usable face, and nothing known of the person's clothes: when the
            # locked person was not recognised in the new shot, the choice is made again there
            self._new_shot = False
            if self.locked is not None and all(f.track_id != self.locked for f in faces):
                self.locked = None
                self.relocks += 1
        if self.locked is None and accepted:
            self.locked = self._pick(faces, accepted)
        chosen = [f for f in accepted if f.track_id == self.locked]
        if chosen and self._detected and self._image is not None:
            self.person.confirm(self._image, chosen[0].face.box)  # a detection saw the locked person: update
        return chosen

    def _pick(self, faces: list[TrackedFace], accepted: list[TrackedFace]) -> int | None:
        if self.choice == "largest":
            chosen = largest(f.face for f in accepted)
            return next(f.track_id for f in accepted if f.face is chosen)
        if self.choice == "by_source":
            assert self.source is not None
            sigs = {t.id: t.signature for t in self.tracks}
            return min(accepted, key=lambda f: self.source.geometry_distance(sigs[f.track_id])).track_id
        ordered = left_to_right(f.face for f in faces)
        if isinstance(self.choice, int) and self.choice < len(ordered):
            return next(f.track_id for f in faces if f.face is ordered[self.choice])
        return None

    def _follow(self, image: np.ndarray) -> None:
        active = [t for t in self.tracks if t.active]
        if not active:
            return
        for track, (mesh, presence) in zip(active, self.analyzer.mesh.run(
                image, [roi_from_mesh(t.mesh, TRACKING_EXTENT) for t in active])):
            if presence < PRESENCE_MIN:
                track.active = False
            else:
                track.mesh, track.shot = mesh, self.scene_cuts

    def _look(self, image: np.ndarray, followed: list[tuple[int, np.ndarray]], shot: int) -> DetectionRound:
        """A detector pass over ``image`` and its ``followed`` (track id, mesh) faces: its boxes confirm followed
        faces; only the faces it finds that none overlaps get landmarks (a FaceMesh run or two each), so a round over
        a followed face costs the detector alone. Reads no track state: it may run on another thread."""
        detected = self.analyzer.detect(image)
        # left to right, as the analysis orders faces everywhere
        found = sorted(((self.analyzer.box(detected.view, d), d) for d in detected.detections
                        if d.score >= self.gate.quality.min_score), key=lambda f: f[0][0] + f[0][2] / 2)
        meshes = dict(followed)
        pairs = sorted(((iou(box, mesh_box(mesh)), i, track_id) for i, (box, _) in enumerate(found)
                        for track_id, mesh in followed), reverse=True)
        matched_faces: set[int] = set()
        confirmed: dict[int, Signature] = {}
        for overlap, i, track_id in pairs:
            if overlap < IOU_MATCH or i in matched_faces or track_id in confirmed:
                continue
            matched_faces.add(i)
            confirmed[track_id] = signature(image, meshes[track_id])
        unmatched = [d for i, (_, d) in enumerate(found) if i not in matched_faces]
        # (a photo found turned is looked at again upright, which may bring back a followed face)
        new_faces = self.analyzer.landmarks([replace(detected, detections=unmatched)])[1][0] if unmatched else []
        return DetectionRound(shot, image, tuple(meshes), confirmed, tuple(new_faces))

    def _merge(self, found: DetectionRound) -> None:
        """A detection round into the tracks: confirmed faces stay, a face missed by ``MISSED_DETECTIONS`` rounds in a
        row is dropped, new faces start tracks (or bring lost ones back)."""
        if found.shot != self.scene_cuts:
            return  # the frame it looked at was in another shot
        self._detected = True
        for track in self.tracks:
            if not track.active or track.id not in found.looked_at:
                continue
            if track.id in found.confirmed:
                track.unconfirmed = 0
                track.signature = track.signature.blend(found.confirmed[track.id], SIGNATURE_WEIGHT)
            else:
                track.unconfirmed += 1
                track.active = track.unconfirmed < MISSED_DETECTIONS
        for face in found.new_faces:
            if all(iou(face.box, mesh_box(t.mesh)) < IOU_MATCH for t in self.tracks if t.active):
                self._start(found.image, face)
        lost = [t for t in self.tracks if not t.active]
        self.tracks = [t for t in self.tracks if t.active] + lost[-LOST_MEMORY:]

    def _start(self, image: np.ndarray, face: Face) -> None:
        """A newly detected face: the lost track it matches best comes back, else a new track starts."""
        assert face.landmarks is not None
        sig = signature(image, face.landmarks)
        # a face lost in this very shot (an occlusion, a turn away) and found again where it was is the same
        # person whatever its signature says; otherwise the signature decides
        candidates = [t for t in self.tracks if not t.active and (
            t.signature.matches(sig) or (t.shot == self.scene_cuts and iou(face.box, mesh_box(t.mesh)) >= IOU_MATCH))]
        smoother = MeshSmoother(self.options.landmark_min_cutoff,
                                self.options.landmark_beta / max(float(face.box[2]), 1.0)) \
            if self.options.smoothing else None
        if candidates:
            track = min(candidates, key=lambda t: t.signature.geometry_distance(sig))
            track.mesh, track.smoother, track.active, track.unconfirmed = face.landmarks, smoother, True, 0
            track.shot = self.scene_cuts
            track.signature = track.signature.blend(sig, SIGNATURE_WEIGHT)
            return
        self.tracks.append(Track(self.next_id, face.landmarks, sig, smoother, shot=self.scene_cuts))
        self.next_id += 1

    def _tracked(self, image: np.ndarray, track: Track, time: float) -> TrackedFace:
        mesh = track.smoother(track.mesh, time) if track.smoother is not None else track.mesh
        return TrackedFace(track.id, self.followed_face(image, mesh), track.mesh)

    def followed_face(self, image: np.ndarray, mesh: np.ndarray) -> Face:
        """The face of a followed mesh: its box, five points and pose, measured by the gate (score 1: a followed
        face is no detection)."""
        return self.gate.measured(image, moved_face(Face(box=mesh_box(mesh), score=1.0, keypoints=five_points(mesh)),
                                                    mesh))


def moved_face(face: Face, mesh: np.ndarray) -> Face:
    """``face`` at ``mesh``: its box, five points and pose from the mesh, the gate's measurements kept (a look-ahead
    moves a followed mesh by a fraction of a pixel: measuring the sharpness again would cost a frame ~0.3 ms for
    nothing)."""
    return replace(face, box=mesh_box(mesh), keypoints=five_points(mesh), landmarks=mesh, pose=head_pose(mesh))
