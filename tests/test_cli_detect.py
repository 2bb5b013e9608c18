"""`facefuse detect` end to end on real photos: JSON shape, --draw, exit codes, one-line errors, no tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from facefuse.cli import main
from facefuse.imageio import decode_image


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, store_config) -> dict[str, str]:
    """The CLI reads its model cache and mirror from the environment, like a user's shell."""
    values = {"FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror)}
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("FACEFUSE_OFFLINE", raising=False)
    return values


def detect(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["detect", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_report(env, faces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = detect(capsys, str(faces_dir / "face_recognition" / "two_people.jpg"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert len(report["faces"]) == 2 and report["rotation"] == 0 and report["selected"] == [0, 1]
    left, right = report["faces"]
    assert left["box"][0] < right["box"][0]  # ordered left to right
    for face in report["faces"]:
        assert len(face["box"]) == 4 and 0.7 <= face["score"] <= 1
        assert set(face["pose"]) == {"yaw", "pitch", "roll"}
        assert np.array(face["landmarks"]).shape == (468, 3)
        assert np.array(face["keypoints"]).shape == (5, 2)
        assert face["quality"] == {"accepted": True, "issues": []}
    assert {"decode", "detect", "landmarks", "total"} <= set(report["timings_ms"])


def test_text_report_and_drawing(env, faces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = faces_dir / "face_recognition" / "obama.jpg"
    drawing = tmp_path / "drawn.png"
    code, out, _ = detect(capsys, str(source), "--draw", str(drawing))
    assert code == 0
    assert out.startswith("*face 0: box ") and "yaw" in out and out.rstrip().endswith("ok")
    drawn = np.asarray(Image.open(drawing).convert("RGB"))
    original = decode_image(source).pixels
    assert drawn.shape == original.shape
    changed = np.any(drawn != original, axis=2)
    _, xs = np.nonzero(changed)
    face_box = json.loads(detect(capsys, str(source), "--json")[1])["faces"][0]["box"]
    assert face_box[0] - 5 <= np.median(xs) <= face_box[0] + face_box[2] + 5  # drawn where the face is
    assert 0.001 < changed.mean() < 0.3


def test_rotated_photo_reports_the_rotation(env, faces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = faces_dir / "insightface" / "inspireface" / "rotate" / "rot_180.jpg"
    code, out, _ = detect(capsys, str(path), "--json", "--no-landmarks")
    report = json.loads(out)
    assert code == 0 and report["rotation"] == 180 and "landmarks" not in report["faces"][0]
    code, out, _ = detect(capsys, str(path))
    assert "turned 180°" in out


@pytest.mark.parametrize("detector", ["blazeface_full", "yunet", "retinaface"])
def test_detector_choice(env, faces_dir: Path, capsys: pytest.CaptureFixture[str], detector: str) -> None:
    code, out, _ = detect(capsys, str(faces_dir / "face_recognition" / "biden.jpg"), "--json", "--detector", detector)
    assert code == 0 and len(json.loads(out)["faces"]) == 1


def test_quality_failure_is_exit_3_with_the_gates_code(env, faces_dir: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = str(faces_dir / "face_recognition" / "knn_examples" / "train" / "kit_harington" / "john2.jpeg")
    code, out, _ = detect(capsys, path, "--json", "--max-yaw", "5")
    error = json.loads(out)["error"]
    assert code == 3 and error["code"] == "POSE_TOO_LARGE" and "yaw" in error["message"] and error["hint"]


def test_face_index_out_of_range(env, faces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = detect(capsys, str(faces_dir / "face_recognition" / "obama.jpg"), "--json", "--face", "3")
    assert code == 3 and json.loads(out)["error"]["code"] == "FACE_INDEX_OUT_OF_RANGE"


def bad_inputs(tmp_path: Path, faces_dir: Path) -> dict[str, tuple[Path, str, int]]:
    jpeg = (faces_dir / "face_recognition" / "obama.jpg").read_bytes()
    files = {"empty.jpg": b"", "notes.jpg": b"shopping list: eggs, milk\n", "cut.jpg": jpeg[: len(jpeg) // 2]}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    return {
        "empty": (tmp_path / "empty.jpg", "CORRUPT_IMAGE", 3),
        "text": (tmp_path / "notes.jpg", "UNSUPPORTED_IMAGE", 3),
        "truncated": (tmp_path / "cut.jpg", "CORRUPT_IMAGE", 3),
        "no face": (faces_dir / "dlib-faces" / "dogs.jpg", "NO_FACE", 3),
        "missing file": (tmp_path / "absent.jpg", "BAD_REQUEST", 2),
    }


@pytest.mark.parametrize("case", ["empty", "text", "truncated", "no face", "missing file"])
def test_bad_input_codes(env, faces_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    path, expected, exit_code = bad_inputs(tmp_path, faces_dir)[case]
    code, out, _ = detect(capsys, str(path), "--json")
    error = json.loads(out)["error"]
    assert (code, error["code"]) == (exit_code, expected)
    assert error["message"] and error["hint"]
    code, out, err = detect(capsys, str(path))
    assert code == exit_code and out == "" and len(err.strip().splitlines()) == 1 and expected in err


def test_unknown_detector_is_a_usage_error(env, faces_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = detect(capsys, str(faces_dir / "face_recognition" / "obama.jpg"), "--json", "--detector", "haar")
    assert code == 2 and json.loads(out)["error"]["code"] == "INVALID_OPTION"


def run_process(args: list[str], extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "facefuse.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **extra_env}, timeout=120, check=False)


def test_real_process_exit_codes_and_no_traceback(env, faces_dir: Path, tmp_path: Path) -> None:
    ok = run_process(["detect", str(faces_dir / "face_recognition" / "obama.jpg"), "--json"], env)
    assert ok.returncode == 0 and len(json.loads(ok.stdout)["faces"]) == 1
    bad = run_process(["detect", str(bad_inputs(tmp_path, faces_dir)["truncated"][0])], env)
    assert bad.returncode == 3 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    usage = run_process(["detect"], env)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr


def test_model_missing_is_exit_4(env, faces_dir: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_process(["detect", str(faces_dir / "face_recognition" / "obama.jpg"), "--json"],
                         {"FACEFUSE_HOME": str(empty), "FACEFUSE_MODEL_MIRROR": str(empty), "FACEFUSE_OFFLINE": "1"})
    error = json.loads(result.stdout)["error"]
    assert result.returncode == 4 and error["code"] == "MODEL_MISSING"
    assert "facefuse models pull" in error["hint"] and "FACEFUSE_MODEL_MIRROR" in error["hint"]
    assert "Traceback" not in result.stderr
