"""Video fusion: throughput with decode and encode, temporal stability (landmark jitter, colour flicker) with
smoothing on and off, identity per frame by the independent judge, share of frames fused, audio kept, memory over a
long clip. Writes benchmarks/results/video.md.

Clips: the real `../shared/video/short_hamilton_clip.mp4` and clips made from the shared photos by
tests/video_clips.py (a virtual camera: slow pan and zoom over a portrait, one face).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
from common import FACES, REPO, SHARED, machine, median, replaced, write_section

sys.path.insert(0, str(REPO / "tests"))
import itertools

from video_clips import OBAMA_720P, audio_packets, camera_matrix, load, write_clip

from facefuse.allocator import keep_freed_memory, release_freed_memory
from facefuse.fusion import eyes, occlusion
from facefuse.fusion.engine import FusionOptions
from facefuse.geometry.regions import FACE_OVAL, shrink
from facefuse.pipeline import Fuser
from facefuse.stages.base import Stage
from facefuse.stages.record import Record
from facefuse.video import VideoOptions, VideoProgress, fuse_video, tracking
from facefuse.video.fuse import fuse_workers
from facefuse.video.smoothing import OneEuroFilter
from facefuse_eval.fusion import IdentityJudge
from facefuse_eval.motion import RegisteredMotion, registered_motion

SOURCE = FACES / "face_recognition" / "biden.jpg"
SECOND_SOURCE = FACES / "face_recognition" / "knn_examples" / "train" / "biden" / "biden2.jpg"  # the same person
HAMILTON = SHARED / "video" / "short_hamilton_clip.mp4"


def rgb_frames(path: Path) -> list[np.ndarray]:
    import av

    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


OWN_PHOTO = {"720p": FACES / "face_recognition" / "obama-720p.jpg",
             "1080p": FACES / "face_recognition" / "obama-1080p.jpg"}  # what portrait_clip films


PORTRAIT_FPS = 30


def portrait_face(size: tuple[int, int]) -> tuple[float, float, float]:
    """The portrait's face (cx, cy, side) in the photo a clip of ``size`` is made from."""
    return OBAMA_720P if size[1] <= 720 else tuple(v * 1.5 for v in OBAMA_720P)


def portrait_photo(size: tuple[int, int]) -> Path:
    return OWN_PHOTO["1080p"] if size[1] > 720 else OWN_PHOTO["720p"]


def portrait_path(size: tuple[int, int], frames: int) -> list[np.ndarray]:
    """The camera's photo → frame matrix of each frame of :func:`portrait_clip`: a slow hand-held-like move over a
    portrait (pan, zoom and a little sway)."""
    return [camera_matrix(size, i / max(1, frames - 1), portrait_face(size), pan=0.1, zoom=0.15,
                          turn=3 * np.sin(i / 7)) for i in range(frames)]


def panned(photo: np.ndarray, size: tuple[int, int], frames: int) -> list[np.ndarray]:
    """``photo`` filmed along :func:`portrait_path`."""
    return [cv2.warpAffine(photo, matrix, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
            for matrix in portrait_path(size, frames)]


def portrait_clip(path: Path, size: tuple[int, int], frames: int, photo: np.ndarray | None = None) -> None:
    """The portrait photo (or ``photo``, a picture of the same size) filmed along :func:`portrait_path`; one face
    the whole time."""
    picture = load(portrait_photo(size)) if photo is None else photo
    write_clip(path, panned(picture, size, frames), fps=PORTRAIT_FPS)


VARIANT_TITLES = {"stream_weights": "The segmenter's running average in video, weight by weight",
                  "roi_extents": "The region FaceMesh follows a face in, extent by extent",
                  "gaze_agreements": "Whose eyes in video, by the gaze check's limit"}
STAGES = ("decode", "track", "fuse", "render", "segment", "blend", "label", "encode", "encode_wait", "assemble")


def opencv_pools() -> dict[str, int]:
    """OpenCV's pool as a library caller has it (a thread per core) and as ``facefuse video`` sizes it for its own
    process (``runtime.size_opencv_pool``: one fusion thread's share of the cores)."""
    return {"library default": cv2.getNumThreads(), "as `facefuse video`": max(1, (os.cpu_count() or 1) // fuse_workers())}


def throughput(fuser: Fuser, clips: dict[str, Path], runs: int, workdir: Path,
               pools: dict[str, int]) -> dict[tuple[str, str], tuple[float, float, dict[str, float]]]:
    """Per clip and OpenCV pool: median frames/s (wall), median CPU ms per frame (the process, all threads) and the
    median ms per frame each stage was busy (the stages run on their own threads, so they overlap and sum to more
    than the wall time). The clips and pools take turns run by run, so a noisy neighbour slows all of them alike;
    the pool is left at its first size."""
    samples: dict[tuple[str, str], list[tuple[float, float, dict[str, float]]]] = {
        (name, pool): [] for name in clips for pool in pools}
    for i in range(runs):
        for name, clip in clips.items():
            for pool, threads in pools.items():
                cv2.setNumThreads(threads)
                start_cpu = time.process_time()
                result = fuse_video(SOURCE, clip, workdir / f"t{i}.mp4", fuser=fuser)
                cpu = (time.process_time() - start_cpu) * 1000 / result.frames
                stages = {k: v * 1000 / result.frames for k, v in result.timings_s.items()}
                samples[(name, pool)].append((result.fps, cpu, stages))
    cv2.setNumThreads(next(iter(pools.values())))
    return {key: (median([r[0] for r in rows]), median([r[1] for r in rows]),
                  {k: median([r[2].get(k, 0.0) for r in rows]) for k in STAGES}) for key, rows in samples.items()}


def speed_rows(fuser: Fuser, clips: dict[str, Path], runs: int, workdir: Path) -> list[str]:
    pools = opencv_pools()
    lines = [("| clip | OpenCV pool (threads) | frames/s (wall, median) | CPU ms/frame | stage ms per frame (busy, "
              "median): " + " / ".join(STAGES) + " |"), "|---|---|---|---|---|"]
    load_before = os.getloadavg()[0]
    for (name, pool), (fps, cpu, stages) in throughput(fuser, clips, runs, workdir, pools).items():
        lines.append(f"| {name} | {pool} ({pools[pool]}) | {fps:.1f} | {cpu:.0f} | "
                     + " / ".join(f"{stages[k]:.1f}" for k in STAGES) + " |")
    lines += ["", (f"Load average (1 min) at the start / end of these runs: {load_before:.1f} / "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores. OpenCV pool: a library caller's (OpenCV's "
              "default, a thread per core) and the one `facefuse video` gives its own process (one fusion "
              "thread's share of the cores, `runtime.size_opencv_pool`), taking turns run by run."), ""]
    return lines


def moving_average(series: list[np.ndarray], frames: int) -> np.ndarray:
    """The centred ``frames``-frame moving average of a series of (N, 2) point sets, where it is defined."""
    kernel, half = np.ones(frames) / frames, frames // 2
    return np.apply_along_axis(lambda v: np.convolve(v, kernel, mode="same"), 0, np.stack(series))[half:-half]


def jitter(series: list[np.ndarray | None]) -> float:
    """Frame-to-frame motion minus the smooth part (a 5-frame moving average), so camera moves do not count."""
    valid = [s for s in series if s is not None]
    if len(valid) < 6:
        return float("nan")
    return float(np.linalg.norm(np.stack(valid)[2:-2] - moving_average(valid, 5), axis=-1).mean())


def stability(fuser: Fuser, target: list[np.ndarray], output: list[np.ndarray],
              fused: FusedFaces | None = None) -> dict[str, float]:
    """Landmark motion and face-colour change per frame, output minus target (per-frame detection on both), on
    each frame's largest face; with ``fused``, on the face the pipeline fused there (found again by its box, as
    :func:`identity` does), the frames it left unfused left out. Why the second: on the real clip the largest face
    of a frame nobody was fused in can be another one in the re-encoded output than in the input (a false face on
    a profile's nose), and one such pair moved the clip's mean flicker by a third of a level."""
    keys = [frame_key(frame) for frame in target]  # the watcher keys each fused face by its frame as decoded

    def track(frames: list[np.ndarray]) -> tuple[list[np.ndarray | None], list[np.ndarray | None]]:
        meshes, colours = [], []
        for frame, key in zip(frames, keys):
            faces = fuser.analyzer.analyze(frame).faces
            boxes = [] if fused is None else fused.boxes.get(key, [])
            if fused is not None:
                faces = [f for f in faces if boxes and _overlap(f.box, boxes[0]) >= 0.3]
            if not faces:
                meshes.append(None)
                colours.append(None)
                continue
            mesh = max(faces, key=lambda f: f.area if fused is None else _overlap(f.box, boxes[0])).landmarks
            meshes.append(mesh[:, :2])
            oval = shrink(mesh[FACE_OVAL, :2], 0.8).astype(np.int32)
            mask = np.zeros(frame.shape[:2], np.uint8)
            cv2.fillPoly(mask, [oval], 1)
            lab = cv2.cvtColor(frame, cv2.COLOR_RGB2Lab).astype(np.float32)
            colours.append(lab[mask > 0].mean(0) * np.array([100 / 255, 1, 1]))
        return meshes, colours

    def motion(series: list[np.ndarray | None], per_point: bool) -> list[float]:
        out = []
        for a, b in itertools.pairwise(series):
            if a is not None and b is not None:
                out.append(float(np.linalg.norm(b - a, axis=-1).mean()) if per_point else float(np.linalg.norm(b - a)))
        return out

    t_mesh, t_col = track(target)
    o_mesh, o_col = track(output)
    return {"jitter_target": jitter(t_mesh), "jitter_output": jitter(o_mesh),
            "motion_target": float(np.mean(motion(t_mesh, True))), "motion_output": float(np.mean(motion(o_mesh, True))),
            "flicker_target": float(np.mean(motion(t_col, False))), "flicker_output": float(np.mean(motion(o_col, False)))}


def frame_key(image: np.ndarray) -> str:
    """A frame's pixels as a short digest: how a fused face found by the pipeline is matched to the decoded clip."""
    return hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=12).hexdigest()


@dataclass(frozen=True, eq=False)
class FusedFaces(Stage):
    """The boxes of the faces the pipeline fused, by frame (a watcher after align, where a frame's first face still
    sees the frame as decoded): identity is judged on the faces that were fused, not on whichever face is largest
    in a frame that may have been left unfused or whose chosen person is another."""

    name = "fused_faces_watch"
    per_face = True
    boxes: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def __call__(self, record: Record) -> Record:
        assert record.image is not None and record.face is not None
        self.boxes.setdefault(frame_key(record.image), []).append(np.array(record.face.face.box, dtype=float))
        return record


def _overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Intersection over union of two (x, y, w, h) boxes."""
    x0, y0 = max(a[0], b[0]), max(a[1], b[1])
    x1, y1 = min(a[0] + a[2], b[0] + b[2]), min(a[1] + a[3], b[1] + b[3])
    inter = max(0.0, x1 - x0) * max(0.0, y1 - y0)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter + 1e-9)


@dataclass(frozen=True)
class Identity:
    """The judge's reading of one fused clip: mean cosine to the source over the fused faces it found again, the
    share of those closer to the source than to the same frame's own face, and how many it judged of those fused."""

    cosine: float
    closer: float
    judged: int
    fused: int


def identity(fuser: Fuser, judge: IdentityJudge, target: list[np.ndarray], output: list[np.ndarray],
             fused: FusedFaces, references: tuple[Path, ...] = (SOURCE,)) -> Identity:
    """Each face the pipeline fused (``fused``'s boxes, first face of a frame), found again by detection in the
    output frame and in the input frame (the detected face overlapping its box most, IoU ≥ 0.3), embedded by the
    judge: its cosine to the source (the mean of the ``references`` photos' embeddings), and whether it is closer
    to the source than to the input's face."""
    embeddings = []
    for reference in references:
        analysis = fuser.analyze(reference)
        embeddings.append(judge.embed(analysis.image, max(analysis.faces, key=lambda f: f.area)))
    source = np.mean(embeddings, axis=0)
    source = source / np.linalg.norm(source)
    sims, wins, count = [], [], 0
    for before, after in zip(target, output):
        for box in fused.boxes.get(frame_key(before), []):
            count += 1
            found = []
            for frame in (after, before):
                faces = [f for f in fuser.analyzer.analyze(frame).faces if _overlap(f.box, box) >= 0.3]
                found.append(max(faces, key=lambda f: _overlap(f.box, box)) if faces else None)
            if found[0] is None or found[1] is None:
                continue
            a, b = judge.embed(after, found[0]), judge.embed(before, found[1])
            sims.append(float(a @ source))
            wins.append(float(a @ source) > float(a @ b))
    return Identity(float(np.mean(sims)) if sims else float("nan"), float(np.mean(wins)) if wins else float("nan"),
                    len(wins), count)


def rss_mb() -> float:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2 ** 20


def memory(fuser: Fuser, clip: Path, workdir: Path) -> tuple[float, float, int, float]:
    """RSS (MB, from /proc) after 10 % of a long clip, at its end, and once the job's freed pages are handed back
    (what the service's job runner does when a job ends)."""
    samples: list[tuple[int, float]] = []

    def progress(report: VideoProgress) -> None:
        samples.append((report.frames_done, rss_mb()))

    result = fuse_video(SOURCE, clip, workdir / "long.mp4", fuser=fuser, progress=progress)
    early = next(rss for done, rss in samples if done >= result.frames // 10)
    release_freed_memory()
    return early, samples[-1][1], result.frames, rss_mb()


PORTRAIT_SIZES = {"720p": (1280, 720), "1080p": (1920, 1080)}


def self_swap_rows(fuser: Fuser, clips: dict[str, Path], frames: int, look_ahead: int = 0) -> list[str]:
    """The portrait clips fused with the photo they were made from as the source: the face cannot look different,
    so what the stability columns show is the fused face moving against its frame (tracking and smoothing) — which
    a cross-person row can hide when the judge's landmarks on the new face happen to be steadier. Then the same
    outputs (and a cross-person one) judged by image registration (:mod:`facefuse_eval.motion`), and what the
    landmark judge reads on faces that do not move at all."""
    lines = ["Self-swap: the portrait clips with the photo they were made from as the source (no identity column: "
             "it is the same person).", "", "| clip | smoothing | motion | jitter | flicker |", "|---|---|---|---|---|"]
    registered = [("Registered motion (`facefuse_eval.motion`): the camera's known move undone frame by frame, dense "
                   "optical flow (DIS) from the clip's median frame inside an ellipse over the face; jitter: each "
                   "pixel's displacement from its 5-frame moving average, drift: its displacement from the median "
                   "frame, both in frame pixels at the clip's start; flicker: the frame-to-frame change of the "
                   "ellipse's mean Lab colour (as above, on the same pixels of the face in every frame). Output − "
                   "input, the input clip's own figure (what encoding and resampling leave) in brackets. A judge "
                   "that FaceMesh's reading noise does not enter."), "",
                  "| clip | source | smoothing | jitter (px) | drift (px) | flicker |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for name, clip in clips.items():
            target = rgb_frames(clip)
            floor = portrait_motion(target, PORTRAIT_SIZES[name])
            for source, smoothing in ((OWN_PHOTO[name], True), (OWN_PHOTO[name], False), (SOURCE, True)):
                out = Path(folder) / "self.mp4"
                fuse_video(source, clip, out, FusionOptions(visible_label=False),
                           VideoOptions(smoothing=smoothing, look_ahead=look_ahead), fuser=fuser)
                output = rgb_frames(out)
                moved = portrait_motion(output, PORTRAIT_SIZES[name])
                registered.append(f"| {name} portrait | {'its own photo' if source != SOURCE else source.name} | "
                                  f"{'on' if smoothing else 'off'} | {moved.jitter - floor.jitter:+.3f} "
                                  f"({floor.jitter:.3f}) | {moved.drift - floor.drift:+.3f} ({floor.drift:.3f}) | "
                                  f"{moved.flicker - floor.flicker:+.3f} ({floor.flicker:.3f}) |")
                if source == SOURCE:
                    continue
                s = stability(fuser, target, output)
                lines.append(f"| {name} portrait | {'on' if smoothing else 'off'} | " + " | ".join(
                    f"{s[k + '_output'] - s[k + '_target']:+.3f} ({s[k + '_target']:.3f})"
                    for k in ("motion", "jitter", "flicker")) + " |")
    return [*lines, "", *registered, "", *judge_floor_rows(fuser, clips, frames)]


def several_source_rows(fuser: Fuser, judge: IdentityJudge, clips: dict[str, Path]) -> list[str]:
    """Each clip fused from ``biden.jpg`` alone and from it and ``biden2.jpg`` (each followed face keeps the photo
    turned most like it at its first frame): stability and identity as in the main table."""
    lines = ["## Several source photos in video (`benchmarks/video.py --several-sources`)", "",
             (f"On {machine()}. Default options. The identity judge's reference is the mean of both photos' "
              "embeddings (the same for both rows, so neither photo is favoured); motion, jitter and flicker are "
              "output − input as in \"Video\" (FaceMesh's landmarks); registered jitter / flicker as in "
              "\"Registered motion\" (the portrait only: its camera path is known)."), "",
             "| clip | source photos | motion | jitter | flicker | registered jitter / flicker | identity cos to "
             "Biden | fused faces closer to him | frames fused |", "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for name, clip in clips.items():
            target = rgb_frames(clip)
            for label, source in (("biden.jpg", SOURCE), ("biden.jpg + biden2.jpg", [SOURCE, SECOND_SOURCE])):
                out = Path(folder) / "out.mp4"
                watch = FusedFaces()
                result = fuse_video(source, clip, out, FusionOptions(visible_label=False), VideoOptions(),
                                    fuser=fuser.with_stage(watch, after="align"))
                output = rgb_frames(out)
                s = stability(fuser, target, output)
                found = identity(fuser, judge, target, output, watch, (SOURCE, SECOND_SOURCE))
                registered = "–"
                if clip != HAMILTON:
                    floor, moved = portrait_motion(target, PORTRAIT_SIZES["720p"]), portrait_motion(
                        output, PORTRAIT_SIZES["720p"])
                    registered = f"{moved.jitter - floor.jitter:+.3f} / {moved.flicker - floor.flicker:+.3f}"
                lines.append(f"| {name} | {label} | " + " | ".join(
                    f"{s[k + '_output'] - s[k + '_target']:+.3f}" for k in ("motion", "jitter", "flicker")) +
                    f" | {registered} | {found.cosine:.3f} | {found.closer:.0%} of {found.judged} | "
                    f"{result.frames_fused}/{result.frames} |")
                print(lines[-1], flush=True)
    return [*lines, ""]


def portrait_motion(frames: list[np.ndarray], size: tuple[int, int]) -> RegisteredMotion:
    """The face's own motion in a portrait clip's frames (its camera path undone), in frame pixels at its start."""
    cx, cy, side = portrait_face(size)
    box = (cx - 0.75 * side, cy - 0.9 * side, 1.5 * side, 1.7 * side)  # the face, chin to hairline
    scale = size[1] * 0.4 / side  # the camera's scale at the clip's start (tests/video_clips.camera_matrix)
    return registered_motion(frames, portrait_path(size, len(frames)), box, scale)


def judge_floor_rows(fuser: Fuser, clips: dict[str, Path], frames: int) -> list[str]:
    """The landmark judge on pictures that do not move: each filmed along its portrait clip's exact camera path, so
    any jitter it reads over the clip's is its own reading noise on that picture, not movement."""
    lines = [("The landmark judge's floor: pictures filmed along each portrait clip's own camera path (nothing in "
              "them moves but the camera), judged exactly as the fused clips above against the clip itself. What "
              "it reads over the clip is FaceMesh's reading noise on that picture, which no smoothing can remove."),
             "", "| clip | picture filmed | motion | jitter | flicker |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for name, clip in clips.items():
            size = PORTRAIT_SIZES[name]
            photo = load(portrait_photo(size))
            own = portrait_photo(size).read_bytes()
            pictures = {
                "the photo resampled half a pixel off (bicubic)": cv2.warpAffine(
                    photo, np.float32([[1, 0, 0.5], [0, 1, 0.5]]), photo.shape[1::-1], flags=cv2.INTER_CUBIC,
                    borderMode=cv2.BORDER_REPLICATE),
                "the photo fused with itself (a still), default options": np.asarray(
                    fuser.fuse(own, own, FusionOptions(visible_label=False)).image),
                "the photo fused with itself, feature degree 100": np.asarray(
                    fuser.fuse(own, own, FusionOptions(visible_label=False, feature_degree=100)).image)}
            target = rgb_frames(clip)
            for label, picture in pictures.items():
                out = Path(folder) / "still.mp4"
                portrait_clip(out, size, frames, picture)
                s = stability(fuser, target, rgb_frames(out))
                lines.append(f"| {name} portrait | {label} | " + " | ".join(
                    f"{s[k + '_output'] - s[k + '_target']:+.3f}" for k in ("motion", "jitter", "flicker")) + " |")
    return [*lines, ""]


def followed_mesh_rows(fuser: Fuser, clips: dict[str, Path]) -> list[str]:
    """The tracker's followed meshes themselves, before any rendering, on the portrait clips."""
    options = VideoOptions()
    lines = [("Followed meshes: the landmarks the tracker hands the render, on the portrait clips (a still photo "
              "panned, zoomed and rolled: the head only moves rigidly). Jitter as above; lag: their mean distance "
              "from the centred 9-frame average of the unsmoothed meshes (the head's path without FaceMesh's own "
              "noise). Smoothing: none; the One-Euro filter on the points themselves (until the eighteenth stop); "
              "the shipped one (`facefuse.video.smoothing.MeshSmoother`): the One-Euro filter on the shape in the "
              "head's own frame, an adaptive constant-velocity filter on the head's movement. A filter that lags "
              "draws the new face off the head."), "",
             "| clip | smoothing | jitter (px) | lag (px) |", "|---|---|---|---|"]
    for name, clip in clips.items():
        frames = rgb_frames(clip)

        def followed(smoothing: bool) -> list[np.ndarray]:
            tracker = tracking.FaceTracker(fuser.analyzer, VideoOptions(smoothing=smoothing), fuser.gate, False,
                                           "largest")
            return [tracker.step(frame, i / PORTRAIT_FPS)[0].face.landmarks[:, :2] for i, frame in enumerate(frames)]

        raw = followed(False)
        points = OneEuroFilter(options.landmark_min_cutoff,
                               options.landmark_beta / max(float(tracking.mesh_box(raw[0])[2]), 1.0))
        path = moving_average(raw, 9)
        for label, series in (("none", raw), ("One-Euro on the points", [points(m, i / PORTRAIT_FPS)
                                                                          for i, m in enumerate(raw)]),
                              ("shape and movement apart (shipped)", followed(True))):
            lag = float(np.linalg.norm(np.stack(series)[4:-4] - path, axis=-1).mean())
            lines.append(f"| {name} portrait | {label} | {jitter(series):.3f} | {lag:.3f} |")
    return [*lines, ""]


def variant_rows(fuser: Fuser, judge: IdentityJudge, clips: dict[str, tuple[Path, Path]], label: str,
                 variants: dict[str, Callable[[], contextlib.AbstractContextManager]]) -> list[str]:
    """Stability and identity per (clip, source) under each variant (a patch of one module constant), default
    options otherwise; a self-swap (the clip's own photo as the source) gets no identity columns."""
    lines = [f"| clip | {label} | motion | jitter | flicker | identity cos to source | fused faces closer to source | "
             "frames fused |", "|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        for name, (clip, source) in clips.items():
            target = rgb_frames(clip)
            for value, patch in variants.items():
                out = Path(folder) / "out.mp4"
                watch = FusedFaces()
                with patch():
                    result = fuse_video(source, clip, out, FusionOptions(visible_label=False), VideoOptions(),
                                        fuser=fuser.with_stage(watch, after="align"))
                output = rgb_frames(out)
                s = stability(fuser, target, output)
                cells = [f"{s[k + '_output'] - s[k + '_target']:+.4f}" for k in ("motion", "jitter", "flicker")]
                judged = "– | –"
                if source == SOURCE:
                    found = identity(fuser, judge, target, output, watch)
                    judged = f"{found.cosine:.3f} | {found.closer:.0%} of {found.judged}"
                lines.append(f"| {name} | {value} | " + " | ".join(cells) +
                             f" | {judged} | {result.frames_fused}/{result.frames} |")
                print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short clips, one run each")
    parser.add_argument("--speed", action="store_true",
                        help="only the throughput table, printed, written only with a --section of its own")
    parser.add_argument("--stability-only", action="store_true",
                        help="no throughput or memory rows (runs of several trees at once, for their stability)")
    parser.add_argument("--look-ahead", type=int, default=VideoOptions().look_ahead, metavar="N",
                        help="VideoOptions.look_ahead of the stability rows (default: the option's default, 4 since "
                             "the twenty-first stop; the nineteenth stop's section: 0)")
    parser.add_argument("--section", default="video", help="results section to write (one per check kept)")
    parser.add_argument("--title", default="Video", help="the section's heading")
    parser.add_argument("--stream-weights", default="", metavar="W,W,...",
                        help="only the stability table with the segmenter's running average at these weights "
                             "(section video_stream_weights)")
    parser.add_argument("--roi-extents", default="", metavar="E,E,...",
                        help="only the stability table with FaceMesh following faces in these regions (× the mesh's "
                             "extent; section video_roi_extents)")
    parser.add_argument("--several-sources", action="store_true",
                        help="only the stability and identity of the real clip and the 720p portrait fused from "
                             "biden.jpg alone and from it and a second photo of him (section video_several_sources)")
    parser.add_argument("--gaze-agreements", default="", metavar="G,G,...",
                        help="only the stability table with the eyes=auto gaze check at these limits (× the eye's "
                             "width; 1: the source's eyes always, -1: the target's always; section "
                             "video_gaze_agreements)")
    args = parser.parse_args()
    # the stability rows run on longer clips than the throughput rows: on 60 frames their jitter moved by up to
    # ±0.04 px under changes of the smoothing that the followed meshes showed plainly (eighteenth stop)
    frames, runs, long_frames, steady_frames = (30, 1, 150, 30) if args.quick else (60, 3, 600, 150)
    keep_freed_memory()  # as the CLI does for its process (facefuse.allocator)
    fuser = Fuser()
    judge = IdentityJudge(fuser.store, fuser.runtime)
    lines = [f"## {args.title}", "", (f"`benchmarks/video.py{' --quick' if args.quick else ''}` on {machine()}; the VM was "
             "shared with other jobs, so wall-clock figures are noisy: CPU ms per frame is the steadier one. "
             "Source `biden.jpg`, mesh engine, default options (detection every 10 frames, x264 veryfast CRF 20, "
             "visible label on)" + (f"; the stability rows with look-ahead {args.look_ahead} frames a side "
                                    f"(`--look-ahead {args.look_ahead}`)" if args.look_ahead else "") + "."), ""]
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        clips, steady = {}, {}
        for name, size in PORTRAIT_SIZES.items():
            clips[name], steady[name] = work / f"{name}.mp4", work / f"{name}-steady.mp4"
            portrait_clip(clips[name], size, frames)
            portrait_clip(steady[name], size, steady_frames)
        variants = {"stream_weights": ("weight of each group's own masks", occlusion, "STREAM_WEIGHT"),
                    "roi_extents": ("tracking region ÷ mesh extent", tracking, "TRACKING_EXTENT"),
                    "gaze_agreements": ("gaze check limit (÷ eye width)", eyes, "GAZE_AGREEMENT")}
        if args.several_sources:
            print(write_section("video_several_sources", "\n".join(several_source_rows(
                fuser, judge, {f"720p portrait, {steady_frames} frames": steady["720p"],
                               "short_hamilton_clip": HAMILTON}))).read_text())
            return
        for option, (label, module, constant) in variants.items():
            values = getattr(args, option)
            if not values:
                continue
            portraits = {f"720p portrait, {steady_frames} frames": (steady["720p"], SOURCE),
                         f"720p portrait, {steady_frames} frames, self-swap": (steady["720p"], OWN_PHOTO["720p"]),
                         f"1080p portrait, {steady_frames} frames": (steady["1080p"], SOURCE),
                         "short_hamilton_clip": (HAMILTON, SOURCE)}
            rows = variant_rows(fuser, judge, portraits, label, {
                v: (lambda v=v: replaced(module, constant, float(v))) for v in values.split(",")})
            text = "\n".join([f"## {VARIANT_TITLES[option]} (`benchmarks/video.py --{option.replace('_', '-')}`)", "",
                              (f"On {machine()}. Default options (smoothing on, masks every 3) but `{constant}` "
                               f"({module.__name__}). Motion, jitter and flicker as in \"Video\" (output − input, "
                               "≤ 0 is the goal), to four places; identity: MobileFaceNet's cosine to the source and "
                               "the share of frames closer to it than to the frame's own face (not for the "
                               "self-swap)."), "", *rows, ""])
            print(write_section(f"video_{option}", text).read_text())
            return
        if not args.stability_only:
            lines += speed_rows(fuser, {f"720p portrait, one face, {frames} frames": clips["720p"],
                                        f"1080p portrait, one face, {frames} frames": clips["1080p"],
                                        "short_hamilton_clip.mp4 (640×360, real, several people, cuts), 275 frames":
                                            HAMILTON}, runs, work)
            if args.speed:  # written only to a section named for it, never over the full run's
                print(write_section(args.section, "\n".join(lines)).read_text() if args.section != "video" else
                      "\n".join(lines))
                return
            lines += ["Goals (issue 19): ≥ 20 frames/s at 720p and ≥ 12 at 1080p with one face, decode to encode.",
                      ""]

        lines += ["### Temporal stability and identity", "",
                  ("Motion: mean frame-to-frame movement of the 468 landmarks (px); jitter: their mean distance from "
                  "their own 5-frame moving average (px), so a smooth camera move does not count; flicker: mean "
                  "frame-to-frame change of the face's mean Lab colour (L scaled to 0–100). Each is the output's "
                  "minus the target's, with the target's own value in brackets; landmarks of both clips come from "
                  "per-frame detection (the same measuring noise on both sides). Identity, over the faces the "
                  "pipeline fused (a watcher stage after align records each frame's fused box; the judge's faces are "
                  "the ones detection finds again at that box in the output and the input frame): MobileFaceNet "
                  "(never used by the pipeline) cosine of the output face to the source photo, and the share of "
                  "those faces closer to the source than to the input's own face in that frame, of how many were "
                  "judged (and fused: a face detection does not find again is not judged). Masks every: "
                  "the segmenter's rate (`masks_every`; 3 by default, 1 = every frame as before issue 19's change). "
                  f"The portrait clips here are {steady_frames} frames long."),
                  "",
                  ("| clip | smoothing | masks every | motion | jitter | flicker | identity cos to source | frames "
                  "closer to source (fused faces) | frames fused |"), "|---|---|---|---|---|---|---|---|---|"]
        followed: list[str] = []  # the real clip's rows judged on the fused face
        for name, clip in (("720p portrait", steady["720p"]), ("1080p portrait", steady["1080p"]),
                           ("short_hamilton_clip", HAMILTON)):
            target = rgb_frames(clip)
            for smoothing, every in ((True, 3), (False, 3), (True, 1)):
                out = work / f"s{smoothing}{every}.mp4"
                watch = FusedFaces()
                result = fuse_video(SOURCE, clip, out, FusionOptions(visible_label=False),
                                    VideoOptions(smoothing=smoothing, masks_every=every,
                                                 look_ahead=args.look_ahead),
                                    fuser=fuser.with_stage(watch, after="align"))
                output = rgb_frames(out)
                s = stability(fuser, target, output)
                found = identity(fuser, judge, target, output, watch)
                cells = [f"{s[k + '_output'] - s[k + '_target']:+.3f} ({s[k + '_target']:.3f})"
                         for k in ("motion", "jitter", "flicker")]
                lines.append(f"| {name} | {'on' if smoothing else 'off'} | {every} | " + " | ".join(cells) +
                             f" | {found.cosine:.3f} | {found.closer:.0%} of {found.judged} ({found.fused} fused) | "
                             f"{result.frames_fused}/{result.frames} |")
                if clip == HAMILTON:
                    on_fused = stability(fuser, target, output, watch)
                    followed.append(f"| {name} | {'on' if smoothing else 'off'} | {every} | " + " | ".join(
                        f"{on_fused[k + '_output'] - on_fused[k + '_target']:+.3f} ({on_fused[k + '_target']:.3f})"
                        for k in ("motion", "jitter", "flicker")) + " |")
        lines += ["", "Goal: the output moves and flickers no more than the target (differences ≤ 0).", "",
                  ("The real clip judged on the face the pipeline fused in each frame (found again by its box in the "
                   "input and the output frame, as the identity columns are; frames left unfused left out):"), "",
                  "| clip | smoothing | masks every | motion | jitter | flicker |", "|---|---|---|---|---|---|",
                  *followed, ""]
        lines += self_swap_rows(fuser, steady, steady_frames, args.look_ahead)
        lines += followed_mesh_rows(fuser, steady)

        result = fuse_video(SOURCE, HAMILTON, work / "hamilton.mp4", fuser=fuser)
        same_audio = audio_packets(work / "hamilton.mp4") == audio_packets(HAMILTON)
        lines += ["### The real clip", "",
                  (f"`short_hamilton_clip.mp4`: {result.frames_fused} of {result.frames} frames fused "
                  f"({result.frames_fused / result.frames:.0%}; the rest show no face that passes the gate, or "
                  f"another person than the chosen one), {result.tracks} people tracked; audio packets of the output "
                  f"equal the input's: **{'yes' if same_audio else 'NO'}** "
                  f"({len(audio_packets(HAMILTON))} packets)."), ""]

        if args.stability_only:
            print(write_section(args.section, "\n".join(lines)).read_text())
            return
        long_clip = work / "long.mp4"
        portrait_clip(long_clip, (640, 360), long_frames)
        early, late, count, handed_back = memory(fuser, long_clip, work)
        lines += ["### Memory", "", (f"RSS over a {count}-frame 640×360 clip: {early:.0f} MB after 10 % of the frames, "
                  f"{late:.0f} MB at the end ({late - early:+.0f} MB): frames stream through; nothing holds the clip. "
                  f"Once the job's freed pages are handed back (`release_freed_memory`, as the service's job runner "
                  f"does when a job ends): {handed_back:.0f} MB ({handed_back - late:+.0f} MB)."), ""]
    path = write_section(args.section, "\n".join(lines))
    print(path.read_text())


if __name__ == "__main__":
    main()
