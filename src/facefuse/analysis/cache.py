"""Face analyses of recently seen photos, keyed by a hash of their bytes.

Why: fusion apps reuse photos — a template (the target) fused with many users' selfies, or one selfie tried on
many templates. Decoding and analysing a 720p photo costs ~15 ms of CPU; a hit costs the hash of the file
(~0.2 ms for a 200 kB JPEG). Bounded by the decoded pixels it holds, not by a count, so large photos cannot
exhaust memory. Cached analyses are shared read-only: no stage mutates an ImageAnalysis after it is made.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from .types import Face, ImageAnalysis

T = TypeVar("T")


def content_key(data: bytes) -> str:
    """The cache's key for a photo's bytes. SHA-256: collision-resistant (one client's photo must never be taken
    for another's), and on CPUs with the SHA extensions (x86 since AMD Zen and Intel Ice Lake, ARMv8) ~2.5× faster
    than BLAKE2b (0.20 against 0.50 ms for a 354 KB JPEG on this EPYC), paid by every photo a fusion reads."""
    return hashlib.sha256(data).hexdigest()


def reduced_key(key: str, reduction: int) -> str:
    """The key of a photo's analysis made on it decoded at 1/``reduction`` of its size (a fusion's source, see
    :mod:`facefuse.stages.decode`): kept apart from the full-size one, which a target or a detect call needs."""
    return key if reduction == 1 else f"{key}/{reduction}"


def full_key(key: str) -> str:
    """The key of the same photo's full-size analysis."""
    return key.partition("/")[0]


class AnalysisCache:
    """Least-recently-used cache of :class:`ImageAnalysis` holding at most ``max_bytes`` of decoded pixels."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, ImageAnalysis] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: str) -> ImageAnalysis | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: str, analysis: ImageAnalysis) -> None:
        """Keep ``analysis`` for ``key``; a later put of the same photo (its faces measured by the gate) replaces
        the earlier one."""
        size = analysis.image.nbytes
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._items:
                self._items[key] = analysis  # the same pixels: the byte count does not change
                self._items.move_to_end(key)
                return
            self._items[key] = analysis
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= evicted.image.nbytes

    def __len__(self) -> int:
        return len(self._items)


class FaceMemo:
    """Work that depends on one face of a cached photo alone — its segmenter output in the engine's crop, its
    aligned crop, its triangles; a source face's parsing and the engine's payload — kept as long as the analysis
    cache keeps the face.

    Why: a template fused with many users' selfies (``benchmarks/fusion_speed.py``, "photos seen before") paid for
    the target's half of the segmenter and its triangulation on every fusion although neither changes. Keyed weakly
    by the :class:`~facefuse.analysis.types.Face` object the cache hands to every request for that photo, so an
    entry goes when the cached analysis does (a value must never hold its face) and needs no size bound of its own
    beyond ``per_face`` entries (the segmenter's half, the crop and the triangles for each crop a face was rendered
    in: the default keeps four crop sizes, the oldest going first). Values are shared read-only by the requests of
    several threads.
    """

    def __init__(self, per_face: int = 12) -> None:
        self.per_face = per_face
        self._items: weakref.WeakKeyDictionary[Face, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def get(self, face: Face, key: Hashable, compute: Callable[[], T]) -> T:
        """The value kept for ``face`` under ``key``, or ``compute()``'s, then kept (two requests that miss at once
        both compute: the same value, and the work a cache saves is never waited for)."""
        with self._lock:
            found = self._items.get(face, {}).get(key, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[no-any-return]
        value = compute()
        with self._lock:
            entries = self._items.setdefault(face, {})
            entries[key] = value
            while len(entries) > self.per_face:
                del entries[next(iter(entries))]
        return value


_MISSING = object()
