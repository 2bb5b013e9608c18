"""Shared fixtures: real photos and models from ../shared, one warm Fuser per test session.

Tests fail (never skip) when ../shared is missing: a green run must mean the real data was exercised.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("FACEFUSE_SHARED", REPO.parent / "shared"))
FACES = SHARED / "faces"
MODELS_MIRROR = SHARED / "models"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"test data missing: {path} (the tests need ../shared beside the repository)", pytrace=False)
    return path


@pytest.fixture(scope="session")
def faces_dir() -> Path:
    return _require(FACES)


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

