"""Work started on a second thread, its result (or its exception) waited for where it is needed.

Why a thread per call and not a pool: nothing is shared between requests and there is no pool to size; on two
cores the second thread is what lets decoding, ONNX Runtime and OpenCV (which release the GIL) run beside the
calling thread's work (the two photos' analyses, the segmenter beside the render, the render's masks beside its
warps)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def on_a_thread(work: Callable[[], T], name: str) -> Future[T]:
    """``work()`` on a new daemon thread named ``name``; its exception, if any, is raised where the future's result
    is asked for."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to the caller, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
