"""The model store with real files, a real local HTTP server and a real (empty or filled) mirror folder.

Covers: verified install from the mirror, download over HTTP with SHA-256 checking, corrupt and partial cached
files detected and replaced (never used), MODEL_MISSING when the mirror is empty and the network unreachable, and
the `facefuse models` commands.
"""

from __future__ import annotations

import dataclasses
import functools
import http.server
import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from range_server import serve

from facefuse.cli import main
from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.models import ModelRegistry, ModelStore, UrlSource, sha256_of
from facefuse.models.download import partial_path


@pytest.fixture
def yunet_entry():
    return ModelRegistry().get("yunet")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_folder(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real HTTP server on 127.0.0.1 serving a temporary folder."""
    folder = tmp_path / "served"
    folder.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def store_with(entry, home: Path, mirror: Path | None, **config) -> ModelStore:
    return ModelStore(StoreConfig(home=home, mirror=mirror, **config), ModelRegistry([entry]))


def test_install_from_mirror_is_verified(tmp_path: Path, mirror_dir: Path, yunet_entry) -> None:
    store = store_with(yunet_entry, tmp_path, mirror_dir)
    assert store.verify("yunet").status == "missing"
    path = store.ensure("yunet")
    assert path == tmp_path / "models" / yunet_entry.filename
    assert sha256_of(path) == yunet_entry.sha256
    assert store.verify("yunet").status == "ok"


@pytest.mark.parametrize("damage", ["flipped byte", "truncated", "empty"])
def test_corrupt_cached_file_is_detected_and_replaced(tmp_path: Path, mirror_dir: Path, yunet_entry,
                                                      damage: str) -> None:
    store = store_with(yunet_entry, tmp_path, mirror_dir)
    path = store.ensure("yunet")
    data = bytearray(path.read_bytes())
    if damage == "flipped byte":
        data[len(data) // 2] ^= 0xFF
    elif damage == "truncated":
        data = data[: len(data) // 3]
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert store.verify("yunet").status == "corrupt"
    assert not store.is_cached("yunet")
    assert sha256_of(store.ensure("yunet")) == yunet_entry.sha256


def test_corrupt_file_is_never_used_even_when_it_cannot_be_replaced(tmp_path: Path, mirror_dir: Path,
                                                                    yunet_entry) -> None:
    store = store_with(yunet_entry, tmp_path, mirror_dir)
    path = store.ensure("yunet")
    path.write_bytes(path.read_bytes()[:1000])
    offline = store_with(yunet_entry, tmp_path, tmp_path / "empty-mirror", offline=True)
    with pytest.raises(FacefuseError) as caught:
        offline.ensure("yunet")
    assert caught.value.code is ErrorCode.MODEL_MISSING
    assert not path.exists(), "the damaged file must be removed, not left for the next caller"


def test_unhashed_models_get_a_recorded_hash_that_catches_damage(tmp_path: Path, mirror_dir: Path,
                                                                  yunet_entry) -> None:
    """Converted models have no published hash: the store records one at install time and checks it after."""
    unhashed = dataclasses.replace(yunet_entry, sha256=None, size=None)
    store = store_with(unhashed, tmp_path, mirror_dir)
    path = store.ensure("yunet")
    sidecar = path.with_name(path.name + ".sha256")
    assert sidecar.read_text().split()[0] == sha256_of(path)
    assert store.verify("yunet").status == "ok"
    path.write_bytes(path.read_bytes()[:-10])
    assert store.verify("yunet").status == "corrupt"


def test_a_cached_file_is_hashed_once_then_trusted_while_size_and_mtime_hold(tmp_path: Path, mirror_dir: Path,
                                                                              yunet_entry) -> None:
    store = store_with(yunet_entry, tmp_path, mirror_dir)
    path = store.ensure("yunet")
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size; the modification time is put back as it was
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert store.verify("yunet").status == "ok"  # trusted from the sidecar: not re-read
    assert store.verify("yunet", rehash=True).status == "corrupt"  # `facefuse models verify` reads every byte
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: hashed again, and caught
    assert store.verify("yunet").status == "corrupt"


def test_interrupted_copies_are_cleaned_on_start_and_resumable_downloads_kept(tmp_path: Path, mirror_dir: Path,
                                                                                 yunet_entry) -> None:
    cache = tmp_path / "models"
    cache.mkdir(parents=True)
    old, fresh, resumable = cache / ".part-k1ll3d", cache / ".part-busy", cache / ".yunet_s_640_640.onnx.part"
    for leftover in (old, fresh, resumable):
        leftover.write_bytes(b"x" * 100)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    os.utime(resumable, (two_hours_ago, two_hours_ago))
    store_with(yunet_entry, tmp_path, mirror_dir)
    assert not old.exists() and fresh.exists() and resumable.exists()


def test_install_is_atomic_and_records_the_hash(tmp_path: Path, mirror_dir: Path, yunet_entry) -> None:
    store = store_with(yunet_entry, tmp_path, mirror_dir)
    made = tmp_path / "made.onnx"
    made.write_bytes(store.ensure("yunet").read_bytes())
    store.registry.get("yunet@int8")  # a locally made variant's entry
    final = store.install("yunet@int8", made, {".report.json": '{"passed": true}'})
    assert final.name == "yunet_s_640_640.int8.onnx" and store.verify("yunet@int8").status == "ok"
    assert final.with_name(final.name + ".report.json").read_text() == '{"passed": true}'
    assert "size=" in final.with_name(final.name + ".sha256").read_text()
    assert not list(final.parent.glob(".part-*"))


def test_missing_when_mirror_empty_and_network_unreachable(tmp_path: Path, yunet_entry) -> None:
    port = closed_port()
    entry = dataclasses.replace(yunet_entry, source=UrlSource(f"http://127.0.0.1:{port}/yunet.onnx"))
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    store = store_with(entry, tmp_path / "home", mirror, download_timeout_s=5)
    with pytest.raises(FacefuseError) as caught:
        store.ensure("yunet")
    error = caught.value
    assert error.code is ErrorCode.MODEL_MISSING and error.exit_code == 4
    assert "'yunet'" in error.message  # names the model
    assert str(mirror) in error.message and str(tmp_path / "home") in error.message  # where it looked
    assert f"127.0.0.1:{port}" in str(error.details["looked_in"])
    assert "facefuse models pull yunet" in error.hint and "FACEFUSE_MODEL_MIRROR" in error.hint  # the fix
    assert not list((tmp_path / "home" / "models").glob(".part-*")), "no partial file left behind"


def test_offline_mode_never_touches_the_network(tmp_path: Path, yunet_entry) -> None:
    store = store_with(yunet_entry, tmp_path, None, offline=True)
    with pytest.raises(FacefuseError) as caught:
        store.ensure("yunet")
    assert caught.value.code is ErrorCode.MODEL_MISSING
    assert "offline" in caught.value.message


def test_download_over_http_is_verified(tmp_path: Path, mirror_dir: Path, yunet_entry, http_folder) -> None:
    folder, base = http_folder
    (folder / "yunet.onnx").write_bytes((mirror_dir / "yunet" / "yunet_s_640_640.onnx").read_bytes())
    entry = dataclasses.replace(yunet_entry, source=UrlSource(f"{base}/yunet.onnx"))
    store = store_with(entry, tmp_path / "home", None)
    assert sha256_of(store.ensure("yunet")) == entry.sha256


def test_download_with_wrong_bytes_is_rejected(tmp_path: Path, yunet_entry, http_folder) -> None:
    folder, base = http_folder
    (folder / "yunet.onnx").write_bytes(b"<html>not a model</html>")
    entry = dataclasses.replace(yunet_entry, source=UrlSource(f"{base}/yunet.onnx"))
    store = store_with(entry, tmp_path / "home", None)
    with pytest.raises(FacefuseError) as caught:
        store.ensure("yunet")
    assert caught.value.code is ErrorCode.MODEL_CORRUPT
    assert list((tmp_path / "home" / "models").iterdir()) == [], "nothing kept under any name"


def test_unknown_model_name(tmp_path: Path) -> None:
    with pytest.raises(FacefuseError) as caught:
        ModelStore(StoreConfig(home=tmp_path, mirror=None)).ensure("no_such_model")
    assert caught.value.code is ErrorCode.MODEL_MISSING
    assert "facefuse models list" in caught.value.hint


# -- CLI -------------------------------------------------------------------------------------------------------


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mirror_dir: Path) -> Path:
    """A fresh cache and the shared mirror, through the environment variables the CLI reads."""
    monkeypatch.setenv("FACEFUSE_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FACEFUSE_MODEL_MIRROR", str(mirror_dir))
    monkeypatch.delenv("FACEFUSE_OFFLINE", raising=False)
    return tmp_path / "home" / "models"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_list_json(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "list", "--json")
    assert code == 0
    rows = {row["name"]: row for row in json.loads(out)["models"]}
    assert set(rows) >= {"blazeface_short", "blazeface_full", "facemesh", "yunet", "retinaface_mbnet025"}
    assert rows["yunet"]["cached"] is False and rows["yunet"]["licence"].startswith("MIT")
    assert rows["yunet"]["task"] == "detector" and rows["yunet"]["size"] == 232589
    assert all(row["commercial_use"] or "non-commercial" in row["licence"] for row in rows.values())


def test_models_pull_verify_path(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "pull", "yunet", "retinaface_mbnet025")
    assert code == 0 and "yunet:" in out
    code, out, _ = run_cli(capsys, "models", "list")
    line = next(line for line in out.splitlines() if line.startswith("yunet "))
    assert " yes " in line and "MIT" in line
    code, out, _ = run_cli(capsys, "models", "path", "yunet")
    assert code == 0 and Path(out.strip()) == cli_env / "yunet_s_640_640.onnx"
    code, out, _ = run_cli(capsys, "models", "verify")
    assert code == 0 and "ok" in out

    model = cli_env / "retinaface_mbnet0.25.onnx"
    model.write_bytes(model.read_bytes()[:5000])  # a partial file
    code, out, err = run_cli(capsys, "models", "verify")
    assert code == 4 and "corrupt" in out and "facefuse models pull retinaface_mbnet025" in err
    code, _, _ = run_cli(capsys, "models", "pull", "retinaface_mbnet025")
    assert code == 0 and run_cli(capsys, "models", "verify")[0] == 0


def test_models_path_missing_offline(cli_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FACEFUSE_MODEL_MIRROR", str(tmp_path))
    monkeypatch.setenv("FACEFUSE_OFFLINE", "1")
    code, out, _ = run_cli(capsys, "models", "path", "yunet", "--json")
    error = json.loads(out)["error"]
    assert code == 4 and error["code"] == "MODEL_MISSING"
    assert "facefuse models pull yunet" in error["hint"]


def test_models_pull_unknown_name(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "models", "pull", "nonexistent")
    assert code == 4 and "MODEL_MISSING" in err and len(err.strip().splitlines()) == 1


def test_an_interrupted_model_download_resumes(tmp_path: Path, mirror_dir: Path, yunet_entry) -> None:
    """The bytes a cut-off pull left beside the cache are continued with a Range request, then verified."""
    whole = (mirror_dir / "yunet" / "yunet_s_640_640.onnx").read_bytes()
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "yunet.onnx").write_bytes(whole)
    with serve(tmp_path / "up") as (server, base):
        entry = dataclasses.replace(yunet_entry, source=UrlSource(f"{base}/yunet.onnx"))
        store = store_with(entry, tmp_path / "home", None)
        part = partial_path(store.cached_path("yunet"))
        part.parent.mkdir(parents=True)
        part.write_bytes(whole[:100_000])
        assert sha256_of(store.ensure("yunet")) == entry.sha256
    assert server.requests == [("/yunet.onnx", "bytes=100000-", 206)] and not part.exists()


# -- models shipped inside the package ---------------------------------------------------------------------------


def shipped_entry(root: Path, payload: bytes):
    """A package-shipped entry whose weights folder is a temporary one (the real folder belongs to the install)."""
    import hashlib

    from facefuse.models import PackageSource

    (root / "tiny.onnx").write_bytes(payload)
    base = ModelRegistry().get("yunet")
    return dataclasses.replace(base, name="tiny_shipped", filename="tiny.onnx", size=len(payload),
                               sha256=hashlib.sha256(payload).hexdigest(), source=PackageSource("tiny.onnx", root),
                               mirror_paths=(), commercial_use=False)


def test_package_shipped_model_is_verified_in_place_and_never_deleted(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    entry = shipped_entry(weights, b"onnx bytes of a model we trained")
    store = store_with(entry, tmp_path / "home", None, offline=True)
    assert store.ensure("tiny_shipped") == weights / "tiny.onnx"
    assert store.verify("tiny_shipped").status == "ok"
    assert not (tmp_path / "home" / "models").exists(), "a shipped model is not copied into the cache"

    (weights / "tiny.onnx").write_bytes(b"onnx bytes of a model we trained, altered")
    with pytest.raises(FacefuseError) as caught:
        store.ensure("tiny_shipped")
    assert caught.value.code is ErrorCode.MODEL_CORRUPT and "reinstall" in caught.value.hint
    assert (weights / "tiny.onnx").is_file(), "the installation's file is reported, not removed"

    (weights / "tiny.onnx").unlink()
    with pytest.raises(FacefuseError) as caught:
        store.ensure("tiny_shipped")
    assert caught.value.code is ErrorCode.MODEL_MISSING and "reinstall" in caught.value.hint


def test_models_list_marks_shipped_and_noncommercial_models(cli_env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "models", "list")
    line = next(line for line in out.splitlines() if line.startswith("face_segmenter "))
    assert code == 0 and " shipped " in line and "NON-COMMERCIAL" in line and "non-commercial only" in line
    assert "NON-COMMERCIAL" not in next(line for line in out.splitlines() if line.startswith("yunet "))
    rows = {row["name"]: row for row in json.loads(run_cli(capsys, "models", "list", "--json")[1])["models"]}
    assert rows["face_segmenter"]["shipped"] and rows["face_segmenter"]["status"] == "ok"
    assert not rows["face_segmenter"]["commercial_use"] and rows["face_segmenter"]["task"] == "segmenter"
    assert not (cli_env / "face_segmenter.onnx").exists(), "a shipped model is used in place, not cached"
