"""The one way a file is written whole or not at all: a temporary file beside it, flushed, renamed into place.

Why: a process killed with ``kill -9`` (or a power cut) must never leave a half-written file where a finished one
is expected (a job's output, a video's checkpoint, a model's sidecar); a reader sees the old file or the new one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


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
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from the other users of a shared cache
        os.replace(tmp, path)
        sync_dir(path.parent)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path, data: bytes) -> None:
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data).encode())


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
