"""The job runner: a few worker threads inside the service that take queued jobs, run them, and resume after a crash.

Resume rules: at start-up every job found ``queued`` or ``running`` is queued again. A photo job keeps the items it
had finished (their outputs were renamed into place before they were marked done) and does the rest; a video job
calls :func:`facefuse.fuse_video` again with the same working folder, which continues after its last finished
segment. The result file is renamed into place before the job is marked done, so a job marked done always has a
whole result and a killed one never shows a partial file.

Stopping the service interrupts running jobs without changing their state, so they resume at the next start;
deleting a job (``DELETE``) removes its row at once (it answers 404 from then on), interrupts its worker, and its
files go once that worker has let go of them: nothing of a deleted job stays on disk.

Photo and video jobs have workers of their own (``workers`` and ``video_workers``), so a long video never holds
up the photo jobs queued behind it.

When a job ends, the pages its frames freed are handed back to the kernel (:func:`facefuse.allocator.
release_freed_memory`): the service's process keeps freed blocks for the next frame, and after a video job they
are hundreds of megabytes that an idle service would otherwise hold (``benchmarks/video.py``, "Memory").
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..allocator import release_freed_memory
from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..pipeline import Fuser
from ..video.options import VideoOptions
from .metrics import JobMetrics
from .photos import PhotoTask, fuse_photos, write_zip
from .space import JobSpace, estimate_bytes
from .store import ACTIVE, JobKind, JobRecord, JobState, JobStore

log = logging.getLogger("facefuse.jobs")

_PROGRESS_EVERY_S = 0.5  # database writes of video progress; every frame would be hundreds of fsyncs a second


@dataclass(frozen=True)
class JobOptions:
    """What a job was asked for; stored with it as JSON so a resumed job runs with the same options."""

    fusion: FusionOptions = field(default_factory=FusionOptions)
    image_format: str = "JPEG"
    quality: int = 92
    video: VideoOptions = field(default_factory=VideoOptions)

    def to_dict(self) -> dict[str, Any]:
        return {"fusion": self.fusion.model_dump(mode="json"), "image_format": self.image_format,
                "quality": self.quality, "video": self.video.model_dump(mode="json")}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobOptions:
        return cls(FusionOptions(**data["fusion"]), data["image_format"], data["quality"],
                   VideoOptions(**data["video"]))


class JobRunner:
    """``start()`` resumes what a previous process left; ``submit(id)`` queues a new job; ``stop()`` interrupts."""

    def __init__(self, store: JobStore, fuser: Callable[[], Fuser | None], *, workers: int = 1,
                 video_workers: int = 1, space: JobSpace | None = None, metrics: JobMetrics | None = None,
                 clean_every_s: float = 60.0) -> None:
        self.store = store
        self._fuser = fuser  # None until the models are loaded; workers wait for it
        self.space = space
        self.metrics = metrics
        self.clean_every_s = clean_every_s
        self._queues: dict[JobKind, queue.Queue[str | None]] = {kind: queue.Queue() for kind in JobKind}
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        lanes = {JobKind.PHOTOS: workers, JobKind.VIDEO: video_workers}
        self._workers = [(self._queues[kind], threading.Thread(target=self._work, args=(self._queues[kind],),
                                                               name=f"job-{kind.value}-worker-{i}", daemon=True))
                         for kind, count in lanes.items() for i in range(count)]
        self._cleaner = threading.Thread(target=self._clean, name="job-cleaner", daemon=True)

    def start(self) -> None:
        self.store.expire_due()
        self.store.remove_orphans()
        for record in self.store.resumable():
            if self.space is not None:  # admitted before the restart: its reservation is taken again, never refused
                self.space.reserve(record.id, self._estimate(record), force=True)
            self._queues[record.kind].put(record.id)
        for _, thread in self._workers:
            thread.start()
        self._cleaner.start()

    def _estimate(self, record: JobRecord) -> int:
        inputs = sorted((self.store.folder(record.id) / "in").glob("[0-9]*"))
        try:
            return estimate_bytes(record.kind, [path.read_bytes() for path in self.store.source_paths(record.id)],
                                  [path.read_bytes() for path in inputs],
                                  JobOptions.from_dict(record.options).image_format)
        except (OSError, FacefuseError):  # unreadable inputs: the job fails when it runs, and says why
            return 0

    def submit(self, job_id: str, kind: JobKind) -> None:
        self._queues[kind].put(job_id)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        with self._lock:
            for event in self._running.values():
                event.set()
        for jobs, _ in self._workers:
            jobs.put(None)
        for thread in (*(thread for _, thread in self._workers), self._cleaner):
            thread.join(timeout_s)

    def delete(self, job_id: str) -> JobState | None:
        """Deletes a job in any state; returns the state it had (None: unknown job). A running job is interrupted
        and its worker removes the files once it has stopped writing them (see :meth:`_run`)."""
        before = self.store.delete(job_id)
        if before is None:
            return None
        with self._lock:
            event = self._running.get(job_id)
        if event is not None:
            event.set()
        else:
            self.store.remove_files(job_id)
        if self.space is not None:
            self.space.release(job_id)
        return before

    # ---- workers ------------------------------------------------------------------------------------------------

    def _work(self, jobs: queue.Queue[str | None]) -> None:
        while True:
            job_id = jobs.get()
            if job_id is None:
                return
            fuser = self._wait_for_fuser()
            if fuser is None:
                return
            self._run(job_id, fuser)

    def _wait_for_fuser(self) -> Fuser | None:
        while not self._stopping.is_set():
            fuser = self._fuser()
            if fuser is not None:
                return fuser
            self._stopping.wait(0.2)
        return None

    def _clean(self) -> None:
        while not self._stopping.wait(self.clean_every_s):
            try:
                for job_id in self.store.expire_due():
                    log.info("job %s expired; its files were removed", job_id)
            except Exception:  # a transient disk problem must not end the cleaner for the process's lifetime
                log.exception("cleaning expired jobs failed")

    def _run(self, job_id: str, fuser: Fuser) -> None:
        record = self.store.get(job_id)
        if record is None or record.state not in ACTIVE:
            return
        interrupt = threading.Event()
        with self._lock:
            self._running[job_id] = interrupt
        try:
            if not self.store.start(job_id):
                return
            record = self.store.get(job_id) or record
            self.store.remove_partials(job_id)
            log.info("job %s (%s) running", job_id, record.kind.value)
            try:
                if record.kind is JobKind.PHOTOS:
                    self._run_photos(record, fuser, interrupt)
                else:
                    self._run_video(record, fuser, interrupt)
            except FacefuseError as exc:
                if not interrupt.is_set():
                    self._finish(record, JobState.FAILED, error=exc)
            except Exception as exc:
                log.exception("job %s failed unexpectedly", job_id)
                self._finish(record, JobState.FAILED, error=FacefuseError(
                    ErrorCode.INTERNAL, f"unexpected {type(exc).__name__} while running the job",
                    "report the job id to the operator; the log has the details"))
        finally:
            with self._lock:
                self._running.pop(job_id, None)
            after = self.store.get(job_id)  # read after leaving _running: see delete()
            if after is None:
                self.store.remove_files(job_id)
            elif after.state not in ACTIVE:
                self.store.keep_result_only(job_id)
            if self.space is not None and (after is None or after.state not in ACTIVE):
                self.space.release(job_id)
            release_freed_memory()

    def _finish(self, record: JobRecord, state: JobState, *, result: str | None = None,
                error: FacefuseError | None = None, warnings: Sequence[str] = ()) -> None:
        if self.store.finish(record.id, state, result=result, error=error, warnings=warnings) and self.metrics:
            finished = self.store.get(record.id)
            if finished is not None and finished.started is not None and finished.finished is not None:
                self.metrics.duration.labels(record.kind.value, state.value).observe(
                    finished.finished - finished.started)
        log.info("job %s %s%s", record.id, state.value, f" ({error})" if error else "")

    def _run_photos(self, record: JobRecord, fuser: Fuser, interrupt: threading.Event) -> None:
        options = JobOptions.from_dict(record.options)
        items = self.store.items(record.id)
        out_dir = self.store.output_dir(record.id)
        todo = [PhotoTask(i.index, i.name, self.store.target_path(record.id, i.index))
                for i in items if i.state == "pending"]
        finished = len(items) - len(todo)
        start = time.monotonic()
        done_here = 0

        def on_item(task: PhotoTask, output: str | None, error: FacefuseError | None) -> None:
            nonlocal done_here
            done_here += 1
            rate = done_here / max(time.monotonic() - start, 1e-6)
            self.store.item_finished(record.id, task.index, output, error, frames_done=finished + done_here, fps=rate,
                                     eta_s=(len(todo) - done_here) / rate)
            if self.metrics is not None:
                self.metrics.frames.labels(JobKind.PHOTOS.value).inc()
                self.metrics.items.labels("failed" if error else "done").inc()

        if not fuse_photos(fuser, self.store.source_paths(record.id), todo, out_dir, options.fusion, options.image_format, options.quality,
                           on_item, interrupt):
            return
        items = self.store.items(record.id)
        if not items:  # deleted meanwhile
            return
        outputs = [(i.output, out_dir / i.output) for i in items if i.state == "done" and i.output]
        errors = [i.to_dict() for i in items if i.state == "failed"]
        if not outputs:
            first = items[0].error or {}
            raise FacefuseError(ErrorCode(first.get("code", ErrorCode.INTERNAL.value)),
                                f"none of the {len(items)} photos could be fused (first: {first.get('message')})",
                                str(first.get("hint", "")), {"items": len(items)})
        write_zip(self.store.folder(record.id) / "result.zip", outputs, errors)
        self._finish(record, JobState.DONE, result="result.zip")

    def _run_video(self, record: JobRecord, fuser: Fuser, interrupt: threading.Event) -> None:
        from ..video import fuse_video  # the tracker and smoothing load only when a video job runs

        options = JobOptions.from_dict(record.options)
        last = {"frames": 0, "written": 0.0}

        def progress(update: Any) -> None:
            if self.metrics is not None:
                self.metrics.frames.labels(JobKind.VIDEO.value).inc(max(0, update.frames_done - last["frames"]))
            last["frames"] = update.frames_done
            now = time.monotonic()
            if now - last["written"] >= _PROGRESS_EVERY_S or update.frames_done >= update.frames_total:
                last["written"] = now
                self.store.progress(record.id, update.frames_done, update.frames_total, update.fps, update.eta_s)

        output = self.store.folder(record.id) / "result.mp4"
        outcome = fuse_video(self.store.source_paths(record.id), self.store.target_path(record.id, 0), output,
                             options.fusion, options.video, fuser=fuser, progress=progress, cancel=interrupt,
                             workdir=self.store.work_dir(record.id))
        if interrupt.is_set():
            return
        self.store.progress(record.id, outcome.frames, outcome.frames, outcome.fps, 0.0)
        self._finish(record, JobState.DONE, result="result.mp4", warnings=outcome.warnings)

