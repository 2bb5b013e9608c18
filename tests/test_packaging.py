"""`pip install facefuse` brings the inference package only: the wheel built from this tree holds ``facefuse`` and
none of ``facefuse_training`` or ``facefuse_eval``, which are their own distributions (dists/)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what a wheel is built from, so no build folder in the work tree can leave stale files in it."""
    copy = tmp_path_factory.mktemp("tree")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for part in ("src", "dists"):
        shutil.copytree(REPO / part, copy / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, copy / name)
    return copy


def _wheel(project: Path, out: Path) -> list[str]:
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(out), str(project)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_inference_wheel_holds_no_training_or_evaluation_code(tree: Path, tmp_path: Path) -> None:
    names = _wheel(tree, tmp_path)
    top = {name.split("/")[0] for name in names}
    assert top == {"facefuse", "facefuse-0.1.0.dist-info"}, top
    assert "facefuse/pipeline.py" in names and "facefuse/stages/gate.py" in names
    assert any(name.startswith("facefuse/models/weights/") for name in names)  # the shipped models come along


@pytest.mark.parametrize("package", ["facefuse_training", "facefuse_eval"])
def test_training_and_evaluation_are_their_own_distributions(package: str, tree: Path, tmp_path: Path) -> None:
    names = _wheel(tree / "dists" / package.replace("_", "-"), tmp_path)
    assert {name.split("/")[0] for name in names} == {package, f"{package}-0.1.0.dist-info"}
    assert f"{package}/__init__.py" in names
