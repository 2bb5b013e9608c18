"""Files a job writes: every output appears whole or not at all, and job folders are measured and removed here.

Why temp + fsync + rename: a process killed with ``kill -9`` (or a power cut) must never leave a half-written
result where a finished one is expected; after a restart a job either finds a complete file or redoes the work.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_output(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``; when the block ends without error it is flushed to disk and renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=".part-", suffix=path.suffix)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        sync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def write_synced(path: Path, data: bytes) -> None:
    """Written and flushed to disk, in place: for files inside a folder that is itself renamed into place."""
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def sync_dir(folder: Path) -> None:
    """Makes the rename itself durable (POSIX); a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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
