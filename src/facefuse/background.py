"""Work on a thread of its own, its result (or its exception) in a future: how a fusion uses the second core where
its steps are independent (the two photos' analyses; a photo's crop segmented, and the new face resampled, beside
the rest of the render).

One new thread per call: nothing is shared between requests and there is no pool to size. Started with
``_thread.start_new_thread``, which returns at once (~25 µs): ``threading.Thread.start`` waits until the new thread
has run, which on the loaded machine took 0.6–3.5 ms at the 90th percentile and up to 20 ms (a one-off
measurement at load ~6): more than some of the work it overlaps.
"""

from __future__ import annotations

import _thread
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def in_background(work: Callable[[], T]) -> Future[T]:
    """``work()`` started on a new thread (ended with the interpreter, like a daemon thread); ``.result()`` returns
    it or raises what it raised."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as exc:  # handed to whoever waits on the future, which raises it
            future.set_exception(exc)

    _thread.start_new_thread(run, ())
    return future
