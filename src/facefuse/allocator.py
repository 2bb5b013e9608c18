"""Process-wide tuning of glibc's allocator, for the shells that own their process (the CLI and the server it
starts, Ray workers); a library caller may call :func:`keep_freed_memory` for the same effect.

Why: a fusion allocates and frees frame-sized arrays by the dozen (crops, masks, float copies, the frame itself).
By default glibc hands freed blocks of a thread's arena back to the kernel and serves big requests with fresh
``mmap``s, so every frame's arrays start as untouched pages that fault in one by one. In a video, whose frames are
fused on a thread per core, that was 9,300 minor page faults and 33 ms of system CPU per 720p frame (about a fifth
of the frame's CPU); with the thresholds below, 1,100–1,300 faults and 5–6 ms (same runs, load ~9). The price is
memory: freed blocks stay in the process for the next frame, so its resident size no longer falls back after a peak
and sits higher (peak RSS of that run 585 → 680–700 MB; a trim threshold of 64 MB instead of 256 MB made no
difference to either).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)
MMAP_THRESHOLD = 32 * 1024 * 1024  # the largest glibc accepts on 64-bit: a 1080p float frame (25 MB) stays on the heap
TRIM_THRESHOLD = 256 * 1024 * 1024  # free memory kept at the top of an arena before it is returned


def _glibc() -> ctypes.CDLL | None:
    """The C library where it is glibc (whose ``mallopt`` and ``malloc_trim`` these calls are), else None."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (fixed, not glibc's sliding ones); False where the C library is not
    glibc or refused. Idempotent; it changes how memory is reused, never what any computation returns."""
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def release_freed_memory() -> bool:
    """Hand the free pages inside every arena back to the kernel (``malloc_trim(0)``): True when some were, False
    when none were free or the C library is not glibc.

    Why: the thresholds above keep freed blocks for the next frame, which is what a stream wants while it runs; but
    a server opening and closing live sessions all day spreads its frames over the arenas of many worker threads,
    and the free space left between the blocks still in use is never at an arena's top, so no threshold returns
    it. Called when such a unit of work ends (a live session), it gives back what the next one would have to fault
    in again anyway, and nothing in use."""
    libc = _glibc()
    return libc is not None and bool(libc.malloc_trim(0))
