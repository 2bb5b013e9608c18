"""Every path runs a slice of the one stage list: a photo, a batch, a video, a live frame and detect each name the
stages that ran (from the record's timings), and a stage added to the list runs for photos, batches and video
alike. Real models and real photos throughout; the extra stage is a real stage defined here, not a stand-in."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest
from video_clips import camera, load, write_clip

from facefuse.fusion.engine import FusionOptions
from facefuse.jobs import PhotoTask, fuse_photos
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.stages import SOURCE, Record, Stage
from facefuse.video import fuse_video

ANALYSIS = ["decode", "detect", "landmarks"]
PER_FACE = ["align", "render", "segment", "relight", "blend"]  # post (enhance) is off by default: it does not run
TARGET = [*ANALYSIS, "gate", "restore", *PER_FACE, "label"]


@dataclass(frozen=True, eq=False)
class Recorder(Stage):
    """A stage added to the list: it writes its name into the record's notes and keeps what it saw."""

    name = "recorder"
    seen: list[Record] = field(default_factory=list)

    def __call__(self, record: Record) -> Record:
        self.seen.append(record)
        return record.noted(f"{self.name} ran")


@pytest.fixture(scope="module")
def uncached(store_config) -> Fuser:
    """Analysis cache off, so every photo runs its detector and landmarks and the timings show them."""
    return Fuser(FuserConfig(store=store_config, analysis_cache_mb=0))


def stages_ran(timings: dict[str, float], source: bool = False) -> list[str]:
    """The stage names in a result's ``timings``, in the order they ran: the source's or the target's."""
    if source:
        return [k.removeprefix("source_") for k in timings if k.startswith("source_")]
    return [k for k in timings if not k.startswith("source_") and k != "total"]


def test_the_list_is_the_documented_order(uncached: Fuser) -> None:
    assert uncached.stages.names == ("decode", "detect", "landmarks", "gate", "restore", "align", "render",
                                     "segment", "relight", "blend", "post", "label", "encode")
    assert [s.name for s in uncached.stages.stages if s.per_face] == [*PER_FACE, "post"]


def test_a_photo_runs_the_source_slice_then_the_whole_list(uncached: Fuser, rec: Path) -> None:
    result = uncached.fuse(rec / "biden.jpg", rec / "obama.jpg")
    assert stages_ran(result.timings_ms, source=True) == [*ANALYSIS, "gate", "restore", "render", "segment"]
    assert stages_ran(result.timings_ms) == TARGET  # in the list's order, work done ahead included
    assert set(SOURCE) == {*ANALYSIS, "gate", "restore", "render", "segment"}


def test_a_photo_does_its_targets_own_work_ahead_and_fuses_the_same(uncached: Fuser, rec: Path) -> None:
    """While the source's slice runs, the target's thread aligns its first face and parses it alone
    (``Pipeline.ahead``); the fusion is the one the list gives without that (a prepared source: nothing ahead),
    byte for byte, with one face and with every face of a two-person photo (the second is not done ahead: it sees
    the photo with the first one changed)."""
    for target, options in ((rec / "obama.jpg", FusionOptions()),
                            (rec / "two_people.jpg", FusionOptions(target_face="all"))):
        ahead = uncached.fuse(rec / "biden.jpg", target, options)
        plain = uncached.fuse_prepared(uncached.prepare(rec / "biden.jpg", options), target, options)
        assert np.array_equal(ahead.image, plain.image), target.name
        assert stages_ran(plain.timings_ms) == stages_ran(ahead.timings_ms) == TARGET

    before, rest = uncached.stages.split("align")
    record = before(Record("target", FusionOptions(target_face="all"), input=rec / "two_people.jpg",
                           engine=uncached.engine("mesh")))
    done = rest.ahead(record)
    first, second = done.faces
    assert second.ahead is None and first.ahead is not None and first.ahead.aligned is not None
    assert first.ahead.target_parsing is not None and first.ahead.target_parsing.shape == (8, 128, 128)
    assert list(done.timings_ms)[-2:] == ["align", "segment"]
    # the crop is the align stage's, and the list's run takes it instead of aligning again
    prepared = uncached.prepare(rec / "biden.jpg", FusionOptions())
    aligned = uncached.stages["align"](replace(done.with_face(replace(first, ahead=None)), source=prepared))
    assert aligned.aligned is not None and np.array_equal(aligned.aligned.crop, first.ahead.aligned.crop)
    assert not uncached.stages["align"].wanted(done.with_face(first))
    # nothing is done ahead when no face changes (both degrees 0)
    unchanged = replace(record, options=FusionOptions(target_face="all", profile_degree=0, feature_degree=0))
    assert rest.ahead(unchanged).faces[0].ahead is None


def test_the_source_is_parsed_once_in_its_own_photo_for_an_engine_that_maps_it(uncached: Fuser, rec: Path) -> None:
    """The source's segment stage parses its face in its own photo (the mesh engine says where each new face's
    pixel comes from there); a fusion with segmentation off parses nothing. Issue 19: a photo fusion parses it on
    a thread of its own, off the path the fusion waits on (~4 ms of a 720p fusion's wall time)."""
    prepared = uncached.prepare(rec / "biden.jpg", FusionOptions())
    assert prepared.parsing is not None and prepared.engine.maps_source
    assert prepared.parsing.probabilities.shape == (8, 128, 128)
    # the parsing sees a face: skin in the middle of its crop, and sums to one per pixel (class probabilities)
    labels = prepared.parsing.labels
    assert (labels[48:80, 48:80] == 1).mean() > 0.5
    assert np.allclose(prepared.parsing.probabilities.sum(0), 1.0, atol=1e-4)
    assert uncached.prepare(rec / "biden.jpg", FusionOptions(segmentation="off")).parsing is None
    # a photo fusion parses it aside (its own thread) while the target's face renders: the same parsing, its time
    # and notes among the source's once settled (test above: the same fusion, byte for byte)
    aside = uncached.prepare(rec / "biden.jpg", FusionOptions(), parse_aside=True)
    assert aside.parsing is None and aside.parsing_aside is not None
    parsed = aside.source_parsing()
    assert parsed is not None and np.array_equal(parsed.probabilities, prepared.parsing.probabilities)
    settled = aside.settled()
    assert settled.parsing is parsed and settled.parsing_aside is None
    assert list(settled.timings_ms) == list(prepared.timings_ms) and "segment" in settled.timings_ms


def test_detect_runs_decode_to_gate_with_the_fusions_verdict(uncached: Fuser, faces_dir: Path, rec: Path) -> None:
    ok = uncached.detect(rec / "obama.jpg")
    assert list(ok.timings_ms) == [*ANALYSIS, "gate"] and ok.refusal is None
    refused = uncached.detect(faces_dir / "dlib-faces" / "dogs.jpg")
    assert refused.refusal is not None and refused.refusal.code.value == "NO_FACE"


def test_an_added_stage_runs_for_photos_batches_and_video(uncached: Fuser, rec: Path, tmp_path: Path) -> None:
    recorder = Recorder()
    fuser = uncached.with_stage(recorder, after="post")
    assert fuser.stages.names[-4:] == ("post", "recorder", "label", "encode")
    assert uncached.stages.names[-3:] == ("post", "label", "encode")  # the original list is left as it was

    photo = fuser.fuse(rec / "biden.jpg", rec / "obama.jpg")
    assert "recorder ran" in photo.warnings
    assert stages_ran(photo.timings_ms) == [*TARGET[:-1], "recorder", "label"]

    recorder.seen.clear()
    done: list[tuple[str, str | None]] = []
    tasks = [PhotoTask(i, name, rec / name) for i, name in enumerate(["obama.jpg", "obama2.jpg"])]
    fuse_photos(fuser, rec / "biden.jpg", tasks, tmp_path / "batch", FusionOptions(), "JPEG", 90,
                lambda task, name, error: done.append((task.name, name)))
    assert [name for _, name in done] == ["0001-obama.jpg", "0002-obama2.jpg"]
    assert [r.role for r in recorder.seen] == ["target", "target"]
    # the source was prepared once for the batch: both targets carry the same prepared source
    assert recorder.seen[0].source is recorder.seen[1].source is not None
    assert all(list(r.timings_ms) == TARGET[:-1] for r in recorder.seen)

    recorder.seen.clear()
    photo_frames = load(rec / "obama-720p.jpg")
    frames = [camera(photo_frames, (320, 240), t / 5, (663.0, 190.0, 175.0), pan=0.1) for t in range(6)]
    clip = tmp_path / "clip.mp4"
    write_clip(clip, frames, audio=False)
    result = fuse_video(rec / "biden.jpg", clip, tmp_path / "out.mp4", fuser=fuser)
    assert result.frames_fused == 6 and "recorder ran" in result.warnings
    assert len(recorder.seen) == 6 and {r.role for r in recorder.seen} == {"frame"}
    # the tracker stands in for decode, detect and landmarks; nothing else differs from a photo
    assert all(list(r.timings_ms) == ["gate", "restore", *PER_FACE] for r in recorder.seen)
    assert {"gate", "restore", "render", "recorder", "label"} <= set(result.timings_s)


def test_a_live_frame_runs_gate_to_label_on_the_faces_it_is_given(uncached: Fuser, rec: Path) -> None:
    options = FusionOptions()
    source = uncached.prepare(rec / "biden.jpg", options)
    frame = load(rec / "obama-480p.jpg")
    faces = uncached.analyzer.find(frame)  # a tracker's faces (here: found in the frame itself)
    record = uncached.fuse_frame(source, frame, faces, options)
    assert list(record.timings_ms) == ["gate", "restore", *PER_FACE, "label"]
    assert len(record.faces) == 1 and not np.array_equal(record.image, frame)
    # the same stages on a photo fused as a target give the same pixels
    photo = uncached.fuse_prepared(source, frame, options)
    assert np.array_equal(photo.image, record.image)
    nobody = uncached.fuse_frame(source, frame, [], options)
    assert nobody.faces == () and list(nobody.timings_ms) == ["gate", "restore", "label"]


def test_post_fusion_enhancement_runs_as_the_post_stage_and_never_softens(uncached: Fuser, faces_dir: Path) -> None:
    """``enhance=auto`` is the post stage: on a source face about half the target's size it runs and says what it
    did, and the fused skin is never softer than without it (measured on the skin zone, as the restorer benchmark
    does)."""
    from facefuse.fusion.enhance import skin_sharpness, skin_zone

    source = faces_dir / "face-api-js" / "sheldon" / "sheldon1.png"  # a 150 px still: a ~140 px face
    target = faces_dir / "face_recognition" / "obama.jpg"  # a ~280 px face
    plain = uncached.fuse(source, target, FusionOptions(enhance="off"))
    enhanced = uncached.fuse(source, target, FusionOptions(enhance="auto"))
    assert "post" not in plain.timings_ms and "post" in enhanced.timings_ms
    assert any("post-fusion enhancement" in w or "enhanced the fused face" in w for w in enhanced.warnings), \
        enhanced.warnings
    face = uncached.analyze(target, "target").faces[0]
    zone = skin_zone(face, plain.image.shape)
    assert skin_sharpness(enhanced.image, zone) >= skin_sharpness(plain.image, zone)
