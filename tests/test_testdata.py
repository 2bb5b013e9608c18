"""The test-data manifest and its fetch: checked against the mirror, and downloads exercised against a real HTTP
server on 127.0.0.1 that honours (or ignores) Range requests — fresh download, resume, refused bytes, a dead network.
"""

from __future__ import annotations

import dataclasses
import re
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import testdata
from range_server import RangeServer, serve
from testdata import Manifest, MissingData, ensure

from facefuse.models.download import fetch, partial_path, sha256_of

MANIFEST = Manifest.load()
# a photo, the video clip and a model: one of each kind the tests read
SAMPLE_PATHS = ("faces/face_recognition/obama.jpg", "video/short_hamilton_clip.mp4", "models/yunet/yunet_s_640_640.onnx")
PINNED = re.compile(r"^https://(raw\.githubusercontent\.com|media\.githubusercontent\.com/media)/[\w.-]+/[\w.-]+/"
                    r"[0-9a-f]{40}/\S+$")


@pytest.fixture(scope="module")
def data_root(faces_dir: Path) -> Path:
    """The filled test-data root (the faces fixture fills and verifies it)."""
    return faces_dir.parent


def test_manifest_matches_the_mirror(data_root: Path) -> None:
    """Every listed file is in the mirror with its size and SHA-256 (without a mirror: in the fetched root)."""
    folder = testdata.default_mirror() or data_root
    assert testdata.check(MANIFEST, folder) == []


def test_every_entry_names_a_pinned_public_origin_or_says_why_not() -> None:
    paths = [f.path for f in MANIFEST.files]
    assert len(paths) == len(set(paths))
    for entry in MANIFEST.files:
        source = MANIFEST.sources[entry.source]
        assert not entry.path.startswith("/") and ".." not in entry.path.split("/"), entry.path
        assert MANIFEST.source_of(entry.path) is source, entry.path
        assert re.fullmatch(r"[0-9a-f]{64}", entry.sha256) and entry.size > 0 and entry.licence == source.licence
        if entry.url is None:
            assert source.repo is None and source.note, f"{entry.path}: a mirror-only file must say why"
        else:
            assert PINNED.match(entry.url) and entry.url == source.url_for(entry.path), entry.url


def test_add_lists_a_mirror_file_with_its_origin(data_root: Path) -> None:
    mirror = testdata.default_mirror() or data_root
    listed = {f.path: f for f in MANIFEST.files}
    bare = Manifest(MANIFEST.sources, ())
    added = testdata.add(bare, mirror, [f"./{SAMPLE_PATHS[0]}", SAMPLE_PATHS[2]])
    assert sorted(added.files, key=lambda f: f.path) == [listed[SAMPLE_PATHS[0]], listed[SAMPLE_PATHS[2]]]


def test_add_takes_a_folder_and_refuses_what_it_cannot_list(data_root: Path, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    mirror = testdata.default_mirror() or data_root
    listed = {f.path: f for f in MANIFEST.files}
    added = testdata.add(Manifest(MANIFEST.sources, ()), mirror, ["faces/insightface/inspireface/rotate"])
    assert sorted(added.files, key=lambda f: f.path) == [listed[f"faces/insightface/inspireface/rotate/rot_{a}.jpg"]
                                                         for a in (0, 180, 270, 90)]
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "n.txt").write_text("a file of no listed source")
    with pytest.raises(ValueError, match="no source in data_manifest.json covers notes/n.txt"):
        testdata.add(MANIFEST, tmp_path, ["notes"])
    monkeypatch.setenv("FACEFUSE_TEST_DATA_MIRROR", str(mirror))
    assert testdata.main(["add", "faces/no-such-folder/x.jpg"]) == 1
    assert "nothing added: faces/no-such-folder/x.jpg is not in the mirror" in capsys.readouterr().err
    assert testdata.Manifest.load() == MANIFEST, "the manifest on disk is untouched"


# -- fetching ----------------------------------------------------------------------------------------------------


@pytest.fixture
def upstream(tmp_path: Path, data_root: Path) -> Iterator[tuple[Manifest, RangeServer, Path]]:
    """A manifest of the sample files whose URLs point at a local server holding copies of them."""
    folder = tmp_path / "upstream"
    for path in SAMPLE_PATHS:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes((data_root / path).read_bytes())
    with serve(folder) as (server, base):
        files = tuple(dataclasses.replace(f, url=f"{base}/{f.path}") for f in MANIFEST.files if f.path in SAMPLE_PATHS)
        yield Manifest(MANIFEST.sources, files), server, folder


def test_download_fills_an_empty_root_and_then_only_verifies(upstream, tmp_path: Path) -> None:
    manifest, server, _ = upstream
    root = tmp_path / "root"
    assert ensure(manifest, root, None) == {"present": 0, "mirror": 0, "downloaded": 3}
    assert testdata.check(manifest, root) == []
    assert ensure(manifest, root, None) == {"present": 3, "mirror": 0, "downloaded": 0}
    assert len(server.requests) == 3, "a verified file is never fetched again"
    assert not list(root.rglob(".*.part")), "no partial file left"


def test_an_interrupted_download_resumes_where_it_stopped(upstream, tmp_path: Path) -> None:
    manifest, server, folder = upstream
    root = tmp_path / "root"
    clip = "video/short_hamilton_clip.mp4"
    whole = (folder / clip).read_bytes()
    part = partial_path(root / clip)
    part.parent.mkdir(parents=True)
    part.write_bytes(whole[:250_000])  # what an earlier, cut-off run left
    ensure(manifest, root, None)
    assert (f"/{clip}", "bytes=250000-", 206) in server.requests
    assert sha256_of(root / clip) == sha256_of(folder / clip) and not part.exists()


def test_a_complete_partial_file_is_verified_and_kept(upstream, tmp_path: Path) -> None:
    """A run cut off after the last byte but before the rename: the server answers 416, the hash decides."""
    manifest, server, folder = upstream
    root = tmp_path / "root"
    photo = SAMPLE_PATHS[0]
    partial_path(root / photo).parent.mkdir(parents=True)
    partial_path(root / photo).write_bytes((folder / photo).read_bytes())
    ensure(manifest, root, None)
    assert (f"/{photo}", f"bytes={(folder / photo).stat().st_size}-", 416) in server.requests
    assert testdata.check(manifest, root) == []


def test_a_server_that_ignores_range_gets_the_file_written_from_the_start(tmp_path: Path, data_root: Path) -> None:
    photo = data_root / SAMPLE_PATHS[0]
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "p.jpg").write_bytes(photo.read_bytes())
    final = tmp_path / "root" / "p.jpg"
    final.parent.mkdir()
    partial_path(final).write_bytes(b"stale bytes of some other file")
    with serve(tmp_path / "up", honour_range=False) as (server, base):
        assert fetch(f"{base}/p.jpg", final, sha256_of(photo), 10) == sha256_of(photo)
        assert server.requests == [("/p.jpg", "bytes=30-", 200)]


def test_wrong_bytes_are_refused_and_nothing_is_kept(upstream, tmp_path: Path) -> None:
    manifest, _, folder = upstream
    model = folder / "models/yunet/yunet_s_640_640.onnx"
    model.write_bytes(model.read_bytes()[:-1] + b"\0")  # one byte changed upstream
    root = tmp_path / "root"
    with pytest.raises(MissingData) as caught:
        ensure(manifest, root, None)
    message = str(caught.value)
    assert "1 of 3 files" in message and "models/yunet (1)" in message
    assert "refused: models/yunet/yunet_s_640_640.onnx" in message
    assert not (root / "models/yunet").exists() or not list((root / "models/yunet").iterdir())
    others = tuple(f for f in manifest.files if f.path != "models/yunet/yunet_s_640_640.onnx")
    assert testdata.check(dataclasses.replace(manifest, files=others), root) == [], "the good files still land"


def test_the_mirror_is_used_before_the_network(upstream, tmp_path: Path, data_root: Path) -> None:
    manifest, server, _ = upstream
    counts = ensure(manifest, tmp_path / "root", testdata.default_mirror() or data_root)
    assert counts == {"present": 0, "mirror": 3, "downloaded": 0} and server.requests == []


def test_a_damaged_mirror_file_is_downloaded_instead(upstream, tmp_path: Path, data_root: Path) -> None:
    manifest, server, _ = upstream
    mirror = tmp_path / "mirror"
    for path in SAMPLE_PATHS:
        (mirror / path).parent.mkdir(parents=True, exist_ok=True)
        (mirror / path).write_bytes((data_root / path).read_bytes())
    (mirror / SAMPLE_PATHS[0]).write_bytes(b"damaged")
    assert ensure(manifest, tmp_path / "root", mirror) == {"present": 0, "mirror": 2, "downloaded": 1}
    assert [r[0] for r in server.requests] == [f"/{SAMPLE_PATHS[0]}"]


def test_no_network_and_no_mirror_give_one_clear_message(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on: connections are refused at once
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    files = tuple(dataclasses.replace(f, url=f"{dead}/{f.path}") for f in MANIFEST.files)
    with pytest.raises(MissingData) as caught:
        ensure(Manifest(MANIFEST.sources, files), tmp_path / "root", None, timeout_s=5)
    message = str(caught.value)
    assert f"{len(files)} of {len(files)} files" in message
    assert "faces/face_recognition (" in message and "train/utkface (256)" in message
    assert "no ../shared beside the repository" in message and "unreachable" in message
    assert "FACEFUSE_TEST_DATA_MIRROR" in message and "raw.githubusercontent.com" in message
    assert message.count("Connection refused") == 1, "one network failure is reported once, not once per file"


def test_fetch_command_prints_the_message_not_a_traceback(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("FACEFUSE_TEST_DATA", str(tmp_path / "root"))
    monkeypatch.setenv("FACEFUSE_TEST_DATA_MIRROR", str(tmp_path / "no-such-mirror"))
    monkeypatch.setenv("FACEFUSE_OFFLINE", "1")
    assert testdata.main(["fetch"]) == 1
    err = capsys.readouterr().err
    assert "no-such-mirror does not exist" in err and "FACEFUSE_OFFLINE" in err and "Traceback" not in err


def test_concurrent_fetches_of_one_file_do_not_mix_their_bytes(upstream, tmp_path: Path) -> None:
    """Four threads, each with its own lock handle as separate processes would have (flock is per open file)."""
    manifest, _, _ = upstream
    clip = next(f for f in manifest.files if f.path.endswith(".mp4"))
    final = tmp_path / "root" / "clip.mp4"
    with ThreadPoolExecutor(4) as pool:
        digests = list(pool.map(lambda _: fetch(clip.url, final, clip.sha256, 10), range(4)))
    assert digests == [clip.sha256] * 4 and sha256_of(final) == clip.sha256
