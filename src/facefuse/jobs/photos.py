"""A batch of photos: one source fused into many targets, each output written whole, failures kept per photo.

Shared by the service's job runner and ``facefuse batch``, so both skip finished items the same way, write the same
file names and report the same per-item error codes. The source goes through its slice of the pipeline once
(:meth:`~facefuse.pipeline.Fuser.prepare`: analysed, gated, restored, the engine's payload made) and every target
reuses it; a problem with the source ends the whole batch, a problem with one target only that item.
"""

from __future__ import annotations

import json
import logging
import threading
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..imageio import OUTPUT_BY_PIL, ImageInput
from ..pipeline import Encoding, Fuser
from ..files import atomic_output, write_atomic

log = logging.getLogger("facefuse.jobs")

@dataclass(frozen=True)
class PhotoTask:
    index: int
    name: str  # a label (the upload's or the file's name), never a path to write to
    path: Path


ItemDone = Callable[[PhotoTask, "str | None", "FacefuseError | None"], None]


def output_name(task: PhotoTask, fmt: str) -> str:
    """``0003-beach.jpg``: numbered so outputs keep the input order and two ``img.jpg`` never collide."""
    stem = Path(task.name).stem or "photo"
    return f"{task.index + 1:04d}-{stem}.{OUTPUT_BY_PIL[fmt].extension}"


def fuse_photos(fuser: Fuser, source: ImageInput | Sequence[ImageInput], tasks: Iterable[PhotoTask],
                out_dir: Path, options: FusionOptions, fmt: str, quality: int, on_item: ItemDone,
                cancel: threading.Event | None = None) -> bool:
    """Fuses ``source`` (one photo, or several of one person: :meth:`Fuser.prepare`) into each task's photo, writing
    ``out_dir/<output_name>``; false when cancelled.

    ``on_item(task, output_name | None, error | None)`` is called after each output is renamed into place.
    Errors about the source are raised (no item could succeed); errors about a target go to ``on_item``.
    """
    prepared = fuser.prepare(source, options)
    encoding = Encoding(fmt, quality)
    for task in tasks:
        if cancel is not None and cancel.is_set():
            return False
        try:
            data = fuser.fuse_prepared(prepared, task.path, options, encoding).data
            assert data is not None
        except FacefuseError as exc:
            on_item(task, None, exc)
            continue
        except Exception as exc:  # one odd photo must not end a batch of hundreds; the log keeps the trace
            log.exception("item %d (%s) failed unexpectedly", task.index, task.name)
            on_item(task, None, FacefuseError(ErrorCode.INTERNAL, f"unexpected {type(exc).__name__} on this photo",
                                              "report it to the operator; the log has the details"))
            continue
        name = output_name(task, fmt)
        write_atomic(out_dir / name, data)
        on_item(task, name, None)
    return True


def write_zip(path: Path, outputs: Iterable[tuple[str, Path]], errors: list[dict[str, object]]) -> None:
    """The results as one zip (stored, not deflated: JPEG/PNG/WebP do not shrink), plus ``errors.json`` naming
    the photos that failed, if any; written to a temporary file and renamed."""
    with atomic_output(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as archive:
        for name, file in outputs:
            archive.write(file, name)
        if errors:
            archive.writestr("errors.json", json.dumps(errors, indent=2))
