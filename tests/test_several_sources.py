"""Several photos of one source person (Fuser.prepare with a list; `--source` repeated): each target face is fused
from the photo turned most like it, the report says which, a bad photo is named by its place, and a stream takes
one photo only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from facefuse.errors import ErrorCode, FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.live import LiveSession
from facefuse.pipeline import MAX_SOURCE_PHOTOS
from facefuse.video import fuse_video

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
    assert "source_photo" not in alone.faces[0]
    # the tilted photo onto itself is its own nearest, whatever order the photos come in
    onto_itself = fuser.fuse([photos["frontal"], photos["tilted"]], photos["tilted"], OPTIONS)
    assert onto_itself.faces[0]["source_photo"] == 1
    assert np.array_equal(onto_itself.image, fuser.fuse(photos["tilted"], photos["tilted"], OPTIONS).image)


def test_a_list_of_one_photo_is_that_photo(fuser, photos):
    listed = fuser.fuse([photos["frontal"]], photos["looking_down"], OPTIONS)
    assert np.array_equal(listed.image, fuser.fuse(photos["frontal"], photos["looking_down"], OPTIONS).image)
    assert "source_photo" not in listed.faces[0]


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


def test_a_video_and_a_live_stream_take_one_photo(fuser, photos, faces_dir: Path, tmp_path: Path):
    pair = [photos["tilted"], photos["frontal"]]
    clip = faces_dir.parent / "video" / "short_hamilton_clip.mp4"
    with pytest.raises(FacefuseError) as caught:
        fuse_video(pair, clip, tmp_path / "out.mp4", OPTIONS, fuser=fuser)
    assert caught.value.code is ErrorCode.INVALID_OPTION and "one source photo" in caught.value.message
    assert not (tmp_path / "out.mp4").exists()
    with pytest.raises(FacefuseError) as caught:
        LiveSession(fuser, pair, detect_aside=False)
    assert caught.value.code is ErrorCode.INVALID_OPTION and "2 were given" in caught.value.message


def test_the_cli_takes_source_more_than_once(store_config, photos, tmp_path: Path):
    env = {**os.environ, "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    done = subprocess.run([sys.executable, "-m", "facefuse", "fuse", "--source", str(photos["tilted"]),
                           "--source", str(photos["frontal"]), "--target", str(photos["looking_down"]),
                           "--output", str(tmp_path / "out.jpg"), "--json"],
                          env=env, timeout=300, check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["faces"][0]["source_photo"] == 1
    assert (tmp_path / "out.jpg").stat().st_size > 10_000
