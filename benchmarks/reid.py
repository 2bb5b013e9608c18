"""Re-identification after a scene cut: how well candidate descriptors tell people apart, and what the tracker does.

Descriptors compared (ROC AUC of same-person against different-person pairs, with MobileFaceNet, the independent
judge the pipeline never uses, as the reference):
- FaceMesh shape: the tracker's head-fixed, normalised 2-D shape of the face oval and features;
- face texture: uniform LBP histograms over a 4×4 grid of the ArcFace-aligned, CLAHE-equalised 64 px grey face
  (Ahonen, Hadid & Pietikäinen, ECCV 2004);
- clothes: `facefuse.video.reid.torso_colours`, the colours of the region below the face (what the tracker uses).
On `faces/hard/same-person` (six people, 2–4 photos each from different shoots; head crops, so no clothes) and on
the Hamilton clip's detections (by eye: the largest face of shots 0–2 is the performer, shot 3 shows the audience).
Then the tracker on
the clip, with and without re-identification: which shots get fused. Writes benchmarks/results/reid.md.
"""

from __future__ import annotations

import threading

import cv2
import numpy as np
from common import FACES, SHARED, machine, write_section

from facefuse.analysis.quality import ARCFACE_112
from facefuse.pipeline import Fuser
from facefuse.video import VideoOptions
from facefuse.video.io import read_frames
from facefuse.video.reid import SAME_PERSON, torso_colours
from facefuse.video.tracking import FaceTracker, signature
from facefuse_eval.fusion import IdentityJudge

HAMILTON = SHARED / "video" / "short_hamilton_clip.mp4"
PERFORMER_SHOTS = (0, 1, 2)  # by eye
_UNIFORM = np.array([((((c << 1) | (c >> 7)) & 0xFF) ^ c).bit_count() <= 2 for c in range(256)])
_BINS = np.where(_UNIFORM, np.cumsum(_UNIFORM) - 1, int(_UNIFORM.sum())).astype(np.intp)


def lbp_texture(image: np.ndarray, keypoints: np.ndarray) -> np.ndarray:
    matrix, _ = cv2.estimateAffinePartial2D(keypoints.astype(np.float32), ARCFACE_112 * (64 / 112), method=cv2.LMEDS)
    grey = cv2.createCLAHE(2.0, (4, 4)).apply(cv2.cvtColor(cv2.warpAffine(image, matrix, (64, 64)),
                                                           cv2.COLOR_RGB2GRAY)).astype(np.int16)
    centre = grey[1:-1, 1:-1]
    codes = np.zeros(centre.shape, np.uint8)
    for bit, (dy, dx) in enumerate(((-1, -1), (-1, 0), (-1, 1), (0, 1), (1, 1), (1, 0), (1, -1), (0, -1))):
        codes |= (grey[1 + dy:63 + dy, 1 + dx:63 + dx] >= centre).astype(np.uint8) << bit
    bins = _BINS[codes]
    cells = [np.bincount(bins[r:r + 15, c:c + 15].ravel(), minlength=59) / 225.0
             for r in range(0, 60, 15) for c in range(0, 60, 15)]
    vector = np.sqrt(np.concatenate(cells))
    return vector / np.linalg.norm(vector)


def auc(vectors: list[np.ndarray | None], people: list[str], groups: list[int] | None = None) -> tuple[float, float]:
    """ROC AUC of same- vs different-person similarities (pairs across groups only, when given), and the highest
    different-person similarity."""
    same, different = [], []
    for i in range(len(people)):
        for j in range(i):
            if vectors[i] is None or vectors[j] is None or (groups is not None and groups[i] == groups[j]):
                continue
            (same if people[i] == people[j] else different).append(float(vectors[i] @ vectors[j]))
    if not same or not different:
        return float("nan"), float("nan")
    return float(np.mean([s > d for s in same for d in different])), max(different)


def main() -> None:
    fuser = Fuser()
    judge = IdentityJudge(fuser.store, fuser.runtime)
    rows = [("| descriptor | same-person photos: AUC | Hamilton, across shots: AUC | Hamilton: most alike different "
            "people |"), "|---|---|---|---|"]
    photos: dict[str, list] = {"people": [], "shape": [], "texture": [], "judge": []}
    for path in sorted((FACES / "hard" / "same-person").glob("*/*")):
        analysis = fuser.analyze(path)
        if not analysis.faces:
            continue
        face = max(analysis.faces, key=lambda f: f.area)
        photos["people"].append(path.parent.name)
        photos["shape"].append(signature(None, face.landmarks).geometry)
        photos["texture"].append(lbp_texture(analysis.image, face.keypoints))
        photos["judge"].append(judge.embed(analysis.image, face))
    clip: dict[str, list] = {"people": [], "shots": [], "shape": [], "texture": [], "clothes": [], "judge": []}
    tracker = FaceTracker(fuser.analyzer, VideoOptions(), fuser.gate, True, "largest")  # restoring: as at defaults
    for decoded in read_frames(HAMILTON, None, None, None, threading.Event()):
        faces = tracker.step(decoded.image, float(decoded.frame.time))
        if tracker._since_detection != 0:  # only the detection frames: faces seen fresh
            continue
        shot = tracker.scene_cuts
        faces = [f for f in faces if f.face.accepted]  # the faces the lock may move to (the gate's verdict)
        if shot in PERFORMER_SHOTS:  # the performer is the largest face there; the others are not named
            faces = sorted(faces, key=lambda f: f.face.area)[-1:]
        for tracked in faces:
            face = tracked.face
            clip["people"].append("performer" if shot in PERFORMER_SHOTS else f"audience {tracked.track_id}")
            clip["shots"].append(shot)
            clip["shape"].append(signature(None, face.landmarks).geometry)
            clip["texture"].append(lbp_texture(decoded.image, face.keypoints))
            clip["clothes"].append(torso_colours(decoded.image, face.box))
            clip["judge"].append(judge.embed(decoded.image, face))
    names = {"shape": "FaceMesh shape", "texture": "face texture (LBP)", "clothes": "clothes (used)",
             "judge": "MobileFaceNet (the judge; reference only)"}
    for key, name in names.items():
        photo_auc = auc(photos[key], photos["people"])[0] if key in photos else float("nan")
        clip_auc, most_alike = auc(clip[key], clip["people"], clip["shots"])
        rows.append(f"| {name} | {photo_auc:.2f} | {clip_auc:.2f} | {most_alike:.3f} |".replace("nan", "–"))

    outcome = ["| re-identification | frames fused per shot (shot: frames) | choice made again after a cut |",
               "|---|---|---|"]
    for enabled in (True, False):
        tracker = FaceTracker(fuser.analyzer, VideoOptions(), fuser.gate, True, "largest")  # restoring: as at defaults
        if not enabled:
            tracker.person.confirm = lambda image, box: None  # type: ignore[method-assign]  # never learns the clothes
        fused: dict[int, int] = {}
        for decoded in read_frames(HAMILTON, None, None, None, threading.Event()):
            if tracker.chosen(tracker.step(decoded.image, float(decoded.frame.time))):
                fused[tracker.scene_cuts] = fused.get(tracker.scene_cuts, 0) + 1
        outcome.append(f"| {'on' if enabled else 'off'} | " + ", ".join(f"{k}: {v}" for k, v in sorted(fused.items()))
                       + f" | {tracker.relocks} |")
    lines = ["## Re-identification after scene cuts (`benchmarks/reid.py`)", "",
             (f"{machine()}. {len(photos['people'])} faces of `faces/hard/same-person`; "
              f"{len(clip['people'])} detections in `short_hamilton_clip.mp4` (the largest face of shots 0–2: the "
              "performer, shot 3: the audience, by eye), faces the quality gate accepts (the only ones the lock "
              "may move to), pairs from different shots only. Similarity: dot product of unit vectors. "
              f"The tracker moves its lock after a cut to a face whose clothes score ≥ {SAME_PERSON}."), "",
             *rows, "", "The tracker on the clip (target face: largest):", "", *outcome, "",
             ("Without re-identification the choice is made again after each cut and the source lands on a member "
              "of the audience in shot 3; with it, shot 3 (where the performer is absent) stays unfused, and so does "
              "shot 1 (a close-up profile whose clothes are out of the frame).")]
    print(write_section("reid", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
