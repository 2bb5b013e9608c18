"""Job folders: files written in place inside a folder renamed whole, measured and removed here (whole files are
written by :mod:`facefuse.files`)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..files import sync_dir

__all__ = ["remove_tree", "sync_dir", "tree_bytes", "write_synced"]


def write_synced(path: Path, data: bytes) -> None:
    """Written and flushed to disk, in place: for files inside a folder that is itself renamed into place."""
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def tree_bytes(folder: Path) -> int:
    """Bytes of every regular file under ``folder`` (0 when it does not exist)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # removed while we walked (a job finishing or being cleaned)
                continue
    return total


def remove_tree(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
