"""Verified file transfer: resumable HTTP download, SHA-256 check, atomic rename into place.

One implementation for everything the project fetches by URL + SHA-256 (the model store, and the test-data fetch
in ``tests/testdata.py``). Why resumable: a model or a data set cut off half-way (laptop lid, flaky link) continues
from the bytes it has instead of starting again. Why a fixed partial name (``.NAME.part`` beside the final file):
that is what lets the next run find those bytes; an exclusive lock on it keeps two processes fetching the same file
from writing into it at once. A file is only ever renamed to its final name after its hash matched.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

_CONTENT_RANGE = re.compile(r"bytes (\d+)-")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


class DigestMismatch(OSError):
    """The bytes at ``path`` do not have the SHA-256 they were published with."""

    def __init__(self, path: Path, digest: str, expected: str) -> None:
        super().__init__(f"{path} has SHA-256 {digest}, expected {expected}")
        self.path, self.digest, self.expected = path, digest, expected


def partial_path(final: Path) -> Path:
    return final.with_name(f".{final.name}.part")


def place(source: Path, final: Path, sha256: str | None, *, copy: bool) -> str:
    """Verify ``source`` and copy (or move) it atomically to ``final``; return its SHA-256.

    A mismatch raises :class:`DigestMismatch`; a moved (downloaded) source is deleted then, a copied one (a mirror
    file, not ours) is left alone.
    """
    digest = sha256_of(source)
    if sha256 is not None and digest != sha256:
        if not copy:
            source.unlink(missing_ok=True)
        raise DigestMismatch(source, digest, sha256)
    final.parent.mkdir(parents=True, exist_ok=True)
    if copy:
        fd, tmp_name = tempfile.mkstemp(dir=final.parent, prefix=".part-")
        os.close(fd)
        shutil.copyfile(source, tmp_name)
        source = Path(tmp_name)
    os.chmod(source, 0o644)
    os.replace(source, final)
    return digest


def fetch(url: str, final: Path, sha256: str | None, timeout_s: float) -> str:
    """Download ``url`` to ``final`` (resuming an earlier partial download), verified; return its SHA-256.

    Raises ``OSError`` (``urllib.error.URLError`` included) when the transfer fails — the partial bytes stay for
    the next try — and :class:`DigestMismatch` when the finished file is not the published one (nothing is kept).
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    part = partial_path(final)
    with _exclusive(part):
        if sha256 is not None and final.is_file() and sha256_of(final) == sha256:
            part.unlink(missing_ok=True)  # another process finished it while this one waited for the lock
            return sha256
        try:
            _download(url, part, timeout_s)
        except BaseException:
            if part.is_file() and part.stat().st_size == 0:
                part.unlink()  # nothing worth resuming: leave no trace
            raise
        return place(part, final, sha256, copy=False)


def _download(url: str, part: Path, timeout_s: float) -> None:
    """Append the bytes of ``url`` that ``part`` lacks (HTTP Range), or write them all when the server sends all."""
    offset = part.stat().st_size
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        response = urllib.request.urlopen(request, timeout=timeout_s)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and offset:  # nothing left to send: the part is complete (its hash decides)
            return
        raise
    with response:
        resumed = response.status == 206
        if resumed:
            match = _CONTENT_RANGE.match(response.headers.get("Content-Range", ""))
            if match is None or int(match.group(1)) != offset:
                part.unlink()
                raise OSError(f"{url} answered a range request with {response.headers.get('Content-Range')!r}; "
                              "the partial file was dropped, try again")
        with open(part, "ab" if resumed else "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)


@contextlib.contextmanager
def _exclusive(part: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``part`` (created if absent); POSIX only, a no-op elsewhere."""
    try:
        import fcntl
    except ImportError:  # Windows: no concurrent-fetch protection, everything else works
        part.touch()
        yield
        return
    while True:
        fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_ino == os.stat(part).st_ino:
                break  # still the file at that name (the previous holder did not rename or delete it)
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        os.close(fd)
