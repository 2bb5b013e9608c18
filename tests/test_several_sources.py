"""Several photos of one source person (Fuser.prepare with a list; `--source` and the service's `source` field
repeated): each target face is fused from the photo turned most like it, the report says which, a bad photo is
named by its place, and a video or live track keeps the photo it was given at its first frame."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import cv2
import httpx
import numpy as np
import pytest
from job_helpers import submit, wait_for
from serve_helpers import LiveServer, assert_error
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from facefuse.errors import ErrorCode, FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.live import LiveSession
from facefuse.pipeline import MAX_SOURCE_PHOTOS
from facefuse.serve.live_routes import FRAME_HEADER, PROTOCOL, REPLY_HEADER
from facefuse.video import VideoOptions, fuse_video
from facefuse.video.tracking import TrackedFace
from facefuse.video.turns import FaceTurns
from video_clips import OBAMA_720P, camera, load, write_clip

OPTIONS = FusionOptions(visible_label=False)


@pytest.fixture(scope="module")
def photos(faces_dir: Path) -> dict[str, Path]:
    same = faces_dir / "hard" / "same-person"
    return {"tilted": same / "jay_chou/01_studio_tilted_warm.jpg",  # chin up 17°, rolled −19°
            "frontal": same / "jay_chou/02_aligned_crop_frontal.jpg",
            "looking_down": same / "yang_mi/01_selfie_indoor_ambient.jpg",  # chin down 23°, rolled 24°
            "no_face": faces_dir / "insightface/inspireface/bulk/view.jpg"}


def test_each_face_is_fused_from_the_photo_turned_most_like_it(fuser, photos):
    pair = [photos["tilted"], photos["frontal"]]
    onto_looking_down = fuser.fuse(pair, photos["looking_down"], OPTIONS)
    assert onto_looking_down.faces[0]["source_photo"] == 1  # the frontal photo: 26° nearer in pitch
    # every stage took that photo (render, the source's parsing, post): the same pixels as that photo alone
    alone = fuser.fuse(photos["frontal"], photos["looking_down"], OPTIONS)
    assert np.array_equal(onto_looking_down.image, alone.image)
    assert alone.faces[0]["source_photo"] == 0
    # the tilted photo onto itself is its own nearest, whatever order the photos come in
    onto_itself = fuser.fuse([photos["frontal"], photos["tilted"]], photos["tilted"], OPTIONS)
    assert onto_itself.faces[0]["source_photo"] == 1
    assert np.array_equal(onto_itself.image, fuser.fuse(photos["tilted"], photos["tilted"], OPTIONS).image)


def test_a_list_of_one_photo_is_that_photo(fuser, photos):
    listed = fuser.fuse([photos["frontal"]], photos["looking_down"], OPTIONS)
    assert np.array_equal(listed.image, fuser.fuse(photos["frontal"], photos["looking_down"], OPTIONS).image)
    assert listed.faces[0]["source_photo"] == 0


def test_a_photo_without_a_face_is_named_by_its_place(fuser, photos):
    with pytest.raises(FacefuseError) as caught:
        fuser.fuse([photos["frontal"], photos["no_face"]], photos["looking_down"], OPTIONS)
    assert caught.value.code is ErrorCode.NO_FACE
    assert caught.value.message.startswith("source photo 2 of 2: ")
    assert caught.value.details["source_photo"] == 1


@pytest.mark.parametrize("count", [0, MAX_SOURCE_PHOTOS + 1])
def test_too_few_or_too_many_photos_are_refused(fuser, photos, count: int):
    with pytest.raises(FacefuseError) as caught:
        fuser.fuse([photos["frontal"]] * count, photos["looking_down"], OPTIONS)
    assert caught.value.code is ErrorCode.INVALID_OPTION
    assert caught.value.details == {"source_photos": count}


def test_a_stream_keeps_each_tracks_photo_while_the_head_turns(fuser, photos):
    prepared = fuser.prepare([photos["tilted"], photos["frontal"]], OPTIONS)
    looking_down = max(fuser.analyze(photos["looking_down"]).faces, key=lambda f: f.area)
    chin_up = max(fuser.analyze(photos["tilted"]).faces, key=lambda f: f.area)
    assert prepared.nearest(looking_down) is prepared.others[0] and prepared.nearest(chin_up) is prepared
    turns = FaceTurns(VideoOptions(), prepared)

    def frame(face, cut: bool = False):
        targets, used = turns.take([TrackedFace(7, face)], cut)
        for turn in used:
            turn.close()
        return targets[0].source

    assert frame(looking_down) is prepared.others[0]  # chosen at the track's first frame
    assert frame(chin_up) is prepared.others[0]  # the head turned: the track keeps its photo
    assert frame(chin_up, cut=True) is prepared  # a new shot chooses again
    assert FaceTurns(VideoOptions(), fuser.prepare(photos["frontal"], OPTIONS)).take(
        [TrackedFace(1, chin_up)], False)[0][0].source is None  # one photo: nothing to choose


def test_a_video_takes_several_photos(fuser, photos, faces_dir: Path, tmp_path: Path):
    clip = tmp_path / "clip.mp4"
    portrait = load(faces_dir / "face_recognition" / "obama-720p.jpg")
    write_clip(clip, [camera(portrait, (640, 360), i / 11, OBAMA_720P, pan=0.1) for i in range(12)], fps=15)
    biden = faces_dir / "face_recognition"
    done = fuse_video([biden / "biden.jpg", biden / "knn_examples/train/biden/biden2.jpg"], clip,
                      tmp_path / "out.mp4", OPTIONS, fuser=fuser)
    assert done.frames == 12 and done.frames_fused == 12
    with pytest.raises(FacefuseError) as caught:
        LiveSession(fuser, [photos["frontal"], photos["no_face"]], detect_aside=False)
    assert caught.value.details["source_photo"] == 1


def test_the_cli_takes_source_more_than_once(store_config, photos, tmp_path: Path):
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    done = subprocess.run([sys.executable, "-m", "facefuse", "fuse", "--source", str(photos["tilted"]),
                           "--source", str(photos["frontal"]), "--target", str(photos["looking_down"]),
                           "--output", str(tmp_path / "out.jpg"), "--json"],
                          env=env, timeout=300, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["faces"][0]["source_photo"] == 1
    assert (tmp_path / "out.jpg").stat().st_size > 10_000


@pytest.fixture(scope="module")
def server(store_config, tmp_path_factory: pytest.TempPathFactory):
    with LiveServer(store_config, jobs_dir=tmp_path_factory.mktemp("jobs")) as live:
        yield live


def test_the_service_takes_the_source_field_more_than_once(server, photos):
    target = ("t.jpg", photos["looking_down"].read_bytes())
    sources = [("source", ("a.jpg", photos["tilted"].read_bytes())),
               ("source", ("b.jpg", photos["frontal"].read_bytes()))]
    with httpx.Client(base_url=server.url, timeout=120) as http:
        answered = http.post("/v1/fuse", files=[*sources, ("target", target)])
        assert answered.status_code == 200, answered.text
        assert answered.json()["faces"][0]["source_photo"] == 1
        # the same as JSON: a list of base64 photos
        encoded = [base64.b64encode(path.read_bytes()).decode() for path in (photos["tilted"], photos["frontal"])]
        as_json = http.post("/v1/fuse", json={"source": encoded,
                                              "target": base64.b64encode(target[1]).decode()})
        assert as_json.status_code == 200, as_json.text
        assert as_json.json()["faces"][0]["source_photo"] == 1
        assert as_json.json()["image_base64"] == answered.json()["image_base64"]
        # one photo without a face is named by its place; more than MAX_SOURCE_PHOTOS is refused before any work
        bad = http.post("/v1/fuse", files=[sources[0], ("source", ("c.jpg", photos["no_face"].read_bytes())),
                                           ("target", target)])
        error = assert_error(bad, ErrorCode.NO_FACE)
        assert error["details"]["source_photo"] == 1 and error["message"].startswith("source photo 2 of 2: ")
        many = http.post("/v1/fuse", files=[*[sources[0]] * (MAX_SOURCE_PHOTOS + 1), ("target", target)])
        assert assert_error(many, ErrorCode.INVALID_OPTION)["details"] == {"source_photos": MAX_SOURCE_PHOTOS + 1}
        missing = http.post("/v1/fuse", files=[("target", target)])
        assert assert_error(missing, ErrorCode.BAD_REQUEST)["details"] == {"field": "source"}


def _job_pixels(server, sources: list[Path], targets: list[Path]) -> list[np.ndarray]:
    """The decoded outputs of a batch job from ``sources`` into ``targets``, in order."""
    job = wait_for(server.url, submit(server.url, sources, targets, visible_label="false").json()["id"])
    assert job["state"] == "done" and job["errors"] == [], job
    archive = zipfile.ZipFile(io.BytesIO(httpx.get(server.url + job["result_url"], timeout=60).content))
    return [cv2.imdecode(np.frombuffer(archive.read(name), np.uint8), cv2.IMREAD_COLOR)
            for name in sorted(archive.namelist())]


def test_a_batch_job_takes_the_source_field_more_than_once(server, photos):
    both = _job_pixels(server, [photos["tilted"], photos["frontal"]], [photos["looking_down"], photos["tilted"]])
    frontal = _job_pixels(server, [photos["frontal"]], [photos["looking_down"]])
    tilted = _job_pixels(server, [photos["tilted"]], [photos["tilted"], photos["looking_down"]])
    # each target was fused from the photo turned most like it, pixel for pixel as that photo alone
    assert np.array_equal(both[0], frontal[0]) and np.array_equal(both[1], tilted[0])
    assert not np.array_equal(both[0], tilted[1])  # and the choice mattered
    # a photo without a face fails the job with its place; one that is no photo, or too many, is refused at once
    failed = wait_for(server.url, submit(server.url, [photos["frontal"], photos["no_face"]],
                                         [photos["looking_down"]]).json()["id"])
    assert failed["state"] == "failed" and failed["error"]["code"] == "NO_FACE", failed
    assert failed["error"]["details"]["source_photo"] == 1
    assert failed["error"]["message"].startswith("source photo 2 of 2: ")
    files = [("source", ("a.jpg", photos["frontal"].read_bytes())), ("source", ("b.txt", b"not a photo")),
             ("targets", ("t.jpg", photos["looking_down"].read_bytes()))]
    not_a_photo = httpx.post(server.url + "/v1/jobs", files=files, timeout=60)
    error = assert_error(not_a_photo, ErrorCode.UNSUPPORTED_IMAGE)
    assert error["details"]["source_photo"] == 1 and error["details"]["image"] == "source"
    many = httpx.post(server.url + "/v1/jobs", files=[files[0]] * (MAX_SOURCE_PHOTOS + 1) + [files[2]], timeout=60)
    assert assert_error(many, ErrorCode.INVALID_OPTION)["details"] == {"source_photos": MAX_SOURCE_PHOTOS + 1}
    schema = httpx.get(server.url + "/openapi.json").json()["paths"]["/v1/jobs"]["post"]["requestBody"]
    source = schema["content"]["multipart/form-data"]["schema"]["properties"]["source"]
    assert source["type"] == "array" and source["maxItems"] == MAX_SOURCE_PHOTOS


def _live_frame(server, sources: list[bytes], frame: bytes, start: dict | None = None) -> bytes | tuple[dict, int]:
    """The fused first frame of a live session started with ``sources`` (the start message's ``sources`` count
    unless ``start`` says otherwise), or the error and close code that ended the session."""
    url = server.url.replace("http://", "ws://") + "/v1/live"
    with connect(url, subprotocols=[PROTOCOL], open_timeout=30, max_size=2**24) as ws:
        ws.send(json.dumps({"type": "start", "options": {}, "sources": len(sources), **(start or {})}))
        try:
            for source in sources:
                ws.send(source)
        except ConnectionClosed:  # a refused start message: the server has already closed
            pass
        answer = json.loads(ws.recv(timeout=60))
        if answer["type"] == "error":
            with pytest.raises(ConnectionClosed) as caught:
                ws.recv(timeout=30)
            assert caught.value.rcvd is not None
            return answer["error"], caught.value.rcvd.code
        assert answer["type"] == "ready", answer
        ws.send(FRAME_HEADER.pack(0) + frame)
        reply = ws.recv(timeout=60)
    assert REPLY_HEADER.unpack_from(reply)[3] == 1  # the face was fused
    return reply[REPLY_HEADER.size:]


def test_a_live_session_takes_several_photos(server, photos):
    tilted, frontal, frame = (photos[name].read_bytes() for name in ("tilted", "frontal", "looking_down"))
    both = _live_frame(server, [tilted, frontal], frame)
    assert both == _live_frame(server, [frontal], frame)  # the face took the photo turned most like it
    assert both != _live_frame(server, [tilted], frame)
    error, code = _live_frame(server, [frontal, photos["no_face"].read_bytes()], frame)
    assert code == 4422 and error["details"]["source_photo"] == 1, error
    error, code = _live_frame(server, [frontal], frame, {"sources": MAX_SOURCE_PHOTOS + 1})
    assert code == 4400 and error["details"] == {"source_photos": MAX_SOURCE_PHOTOS + 1}
    error, code = _live_frame(server, [frontal], frame, {"sources": "two"})
    assert code == 4400 and error["details"] == {"field": "sources"}
