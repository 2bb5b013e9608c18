"""Shared fixtures: real photos and models from the test-data root, one warm Fuser per test session.

The test-data root holds the files listed in tests/data_manifest.json, in ../shared's layout; the first fixture that
needs data fills and verifies it (from ../shared or FACEFUSE_TEST_DATA_MIRROR, else by URL: see tests/testdata.py).
Tests fail (never skip) when data is missing: a green run must mean the real data was exercised.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import testdata

DATA = testdata.default_root()
SHARED = DATA  # the name fixtures written against ../shared use; same layout, only the listed files
FACES = DATA / "faces"
MODELS_MIRROR = DATA / "models"


@functools.cache
def _data_problem() -> str | None:
    """Fill and verify the test-data root once per session; the reason it cannot be, or None."""
    try:
        testdata.ensure(testdata.Manifest.load(), DATA, testdata.default_mirror(), allow_network=not testdata.offline())
    except testdata.MissingData as exc:
        return str(exc)
    return None


def _require(path: Path) -> Path:
    problem = _data_problem()
    if problem:
        pytest.fail(problem, pytrace=False)
    if not path.exists():
        pytest.fail(f"test data missing: {path} is not listed in tests/data_manifest.json; list it with "
                    f"`python tests/testdata.py add {path.relative_to(DATA)}`", pytrace=False)
    return path


@pytest.fixture(scope="session")
def faces_dir() -> Path:
    return _require(FACES)


@pytest.fixture(scope="session")
def rec(faces_dir: Path) -> Path:
    """face_recognition's photos (obama, biden, two_people…): the pairs most tests fuse."""
    return faces_dir / "face_recognition"


@pytest.fixture(scope="session")
def service_photos(faces_dir: Path, rec: Path) -> dict[str, Path]:
    """The photos the service tests send: a source, a target, a group of two and a photo without a face."""
    return {"source": rec / "obama.jpg", "target": rec / "biden.jpg", "group": rec / "two_people.jpg",
            "no_face": faces_dir / "insightface/inspireface/bulk/view.jpg"}


@pytest.fixture(scope="session")
def mirror_dir() -> Path:
    return _require(MODELS_MIRROR)


@pytest.fixture(scope="session")
def model_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model cache the suite uses: FACEFUSE_HOME when set (CI pre-fills it), else a fresh temp folder."""
    home = os.environ.get("FACEFUSE_HOME")
    return Path(home) if home else tmp_path_factory.mktemp("facefuse-home")


@pytest.fixture(scope="session")
def store_config(model_home: Path, mirror_dir: Path):
    from facefuse.config import StoreConfig

    return StoreConfig(home=model_home, mirror=mirror_dir)


@pytest.fixture(scope="session")
def fuser(store_config):
    from facefuse.pipeline import Fuser, FuserConfig

    return Fuser(FuserConfig(store=store_config))



@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium under Playwright, one for the whole session (see tests/browser.py)."""
    from browser import chromium_browser

    with chromium_browser() as chromium:
        yield chromium
