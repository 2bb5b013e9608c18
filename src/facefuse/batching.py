"""Dynamic batching of one model across threads: concurrent ``run`` calls become one batched ``run``.

Why: the service's workers each process their own request, so without this a neural stage only ever sees the
faces of one photo. With a window of a few milliseconds, calls that arrive together (the requests of one scheduler
batch) are concatenated along the batch axis, run once, and split back. On a GPU that is where batching pays; on
this project's 2-core CPU it measured no faster (FaceMesh: batch 4 = 19.2 ms vs 4 × 4.5 ms one by one) and it
serialises work two threads would run in parallel, so it is off by default (``RuntimeConfig.batch_window_ms``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(eq=False)
class _Call:
    feed: dict[str, np.ndarray]
    size: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[np.ndarray] | None = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Batch:
    output_names: tuple[str, ...] | None
    calls: list[_Call]
    full: threading.Event = field(default_factory=threading.Event)

    @property
    def size(self) -> int:
        return sum(call.size for call in self.calls)


class CoalescingSession:
    """Wraps an ONNX Runtime session whose first axis is the batch; thread-safe like the session itself.

    The first caller of a batch leads it: it waits up to ``window_s`` (less once ``max_batch`` items joined), runs
    the concatenated feed, and hands each follower its slice of the outputs (or the error).
    """

    def __init__(self, session: Any, window_s: float, max_batch: int) -> None:
        self._session = session
        self.window_s = window_s
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._open: _Batch | None = None
        self.runs = 0  # batched model runs made
        self.calls = 0  # run() calls served

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, output_names: list[str] | None, feed: dict[str, np.ndarray], *args: Any) -> list[np.ndarray]:
        if args:  # run options are per call: never merged
            return self._session.run(output_names, feed, *args)
        names = tuple(output_names) if output_names else None
        call = _Call(feed, len(next(iter(feed.values()))))
        with self._lock:
            batch = self._open
            leader = batch is None or batch.output_names != names
            if leader:
                batch = self._open = _Batch(names, [call])
            else:
                batch.calls.append(call)
                if batch.size >= self.max_batch:
                    batch.full.set()
        if not leader:
            call.done.wait()
            if call.error is not None:
                raise call.error
            assert call.result is not None
            return call.result
        batch.full.wait(self.window_s)
        with self._lock:
            if self._open is batch:
                self._open = None
        return self._run(batch, output_names)

    def _run(self, batch: _Batch, output_names: list[str] | None) -> list[np.ndarray]:
        calls = batch.calls
        try:  # everything that can fail is in here, so no follower is ever left waiting
            feed = {name: np.concatenate([c.feed[name] for c in calls]) if len(calls) > 1 else calls[0].feed[name]
                    for name in calls[0].feed}
            outputs = self._session.run(output_names, feed)
        except BaseException as exc:
            for follower in calls[1:]:
                follower.error = exc
                follower.done.set()
            raise
        with self._lock:
            self.runs += 1
            self.calls += len(calls)
        start = 0
        for c in calls:
            c.result = [output[start:start + c.size] for output in outputs]
            start += c.size
            c.done.set()
        assert calls[0].result is not None
        return calls[0].result
