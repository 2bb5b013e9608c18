"""Admission by decoded size: the megapixels all requests in progress may hold at once, shared by every worker.

Why: memory follows decoded pixels, not upload bytes — a 73 KB PNG can declare 5000×5000 (75 MB of RGB, several
times that in intermediate copies), and twenty of those at concurrency 8 took the process from 0.5 to 1.6 GB. The
per-image pixel limit bounds one photo; this bounds their sum. Pixels are read from the image headers before
anything is decoded; a request waits (on the event loop, not in a worker) until its photos fit, within its deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..errors import ErrorCode, FacefuseError


class PixelBudget:
    def __init__(self, max_pixels: int) -> None:
        self.max_pixels = max_pixels
        self.in_use = 0
        self.peak = 0  # the most ever held at once
        self._room = asyncio.Condition()

    @asynccontextmanager
    async def hold(self, pixels: int, deadline: float) -> AsyncIterator[None]:
        """Hold ``pixels`` for the block; waits for room until ``deadline`` (:func:`time.monotonic`), then 504.
        A request larger than the whole budget runs alone rather than never."""
        pixels = min(pixels, self.max_pixels)
        async with self._room:
            try:
                await asyncio.wait_for(self._room.wait_for(lambda: self.in_use + pixels <= self.max_pixels),
                                       max(0.0, deadline - time.monotonic()))
            except asyncio.TimeoutError:
                raise FacefuseError(ErrorCode.DEADLINE_EXCEEDED, "the server is busy with large photos",
                                    "retry later, or send smaller photos",
                                    {"pixels": pixels, "in_use": self.in_use}) from None
            self.in_use += pixels
            self.peak = max(self.peak, self.in_use)
        try:
            yield
        finally:
            async with self._room:
                self.in_use -= pixels
                self._room.notify_all()
