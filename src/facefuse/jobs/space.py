"""The jobs' disk budget: bytes are reserved atomically when a job is admitted, for what it will write.

Why reservations: measuring the disk and then writing (check-then-act) let ten simultaneous 2 MB jobs all pass a
5 MB budget (49 MB on disk), and a job's inputs said nothing of its outputs (one 2 MB photo written as PNG took
16 MB). Admission now takes a lock, adds the disk in use to the reservations of every admitted job that has not
finished, and reserves the new job's estimate before its first byte is written. A finished job's reservation is
released; from then on its files on disk count, and only its result is kept (:meth:`JobStore.keep_result_only`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ErrorCode, FacefuseError
from ..imageio import OUTPUT_BY_PIL, declared_pixels
from .files import tree_bytes
from .store import JobKind, JobStore

if TYPE_CHECKING:
    from ..video.io import VideoSize

_VIDEO_BYTES_PER_PIXEL = 0.05  # H.264/H.265 at CRF 20 write ~0.01; mpeg4 and low CRFs more


def estimate_bytes(kind: JobKind, sources: Sequence[bytes], targets: Sequence[bytes], image_format: str,
                   video: VideoSize | None = None) -> int:
    """The most disk a job is expected to use at once: its inputs, plus its outputs twice (photo outputs and the
    zip of them, or the video's encoded segments and the assembled result, exist together for a moment).
    ``video``: the target video's headers, if the caller has read them already."""
    inputs = sum(len(data) for data in sources) + sum(len(data) for data in targets)
    if kind is JobKind.VIDEO:
        from ..video.io import inspect_video  # FFmpeg's libraries load only for videos

        size = video or inspect_video(targets[0])
        outputs = size.width * size.height * max(size.frames, 1) * _VIDEO_BYTES_PER_PIXEL
    else:
        per_pixel = OUTPUT_BY_PIL[image_format].bytes_per_pixel
        outputs = sum(declared_pixels(data) * per_pixel or len(data) for data in targets)
    return int(inputs + 2 * outputs)


class JobSpace:
    """Thread-safe ledger of the jobs' disk: ``reserve`` at admission (507 when it does not fit), ``release`` when
    the job is finished or deleted."""

    def __init__(self, store: JobStore, max_bytes: int) -> None:
        self.store = store
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._reserved: dict[str, int] = {}

    def _used(self) -> int:
        """Disk in use by jobs, each admitted unfinished job counted at least at its reservation (lock held)."""
        on_disk: dict[str, int] = {}
        for entry in self.store.root.iterdir():
            if entry.is_dir():  # <id>, or .<id>.partial while its inputs are written
                job_id = entry.name.strip(".").removesuffix(".partial")
                on_disk[job_id] = on_disk.get(job_id, 0) + tree_bytes(entry)
        reserved = sum(max(size, on_disk.get(job_id, 0)) for job_id, size in self._reserved.items())
        return reserved + sum(size for job_id, size in on_disk.items() if job_id not in self._reserved)

    def reserve(self, job_id: str, nbytes: int, *, force: bool = False) -> None:
        """Reserve ``nbytes`` for ``job_id``, or raise STORAGE_FULL; ``force`` (a job resumed after a restart,
        admitted before) never refuses."""
        with self._lock:
            used = self._used()
            if not force and used + nbytes > self.max_bytes:
                raise FacefuseError(ErrorCode.STORAGE_FULL, "the server's space for jobs is used up",
                                    "download and delete finished jobs, or try again after older ones expire",
                                    {"used_bytes": used, "needed_bytes": nbytes, "max_bytes": self.max_bytes})
            self._reserved[job_id] = nbytes

    def release(self, job_id: str) -> None:
        with self._lock:
            self._reserved.pop(job_id, None)
