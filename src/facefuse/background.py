"""Work on a thread of its own, its result (or its exception) in a future: how a fusion uses the second core where
its steps are independent (the two photos' analyses, a photo's crop segmented beside the render).

One new thread per call: nothing is shared between requests and there is no pool to size; the work here takes
milliseconds, the thread's start some tens of microseconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T], name: str) -> Future[T]:
    """``work()`` started on a new daemon thread called ``name``; ``.result()`` returns it or raises what it raised."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits on the future, which raises it
            future.set_exception(exc)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future
