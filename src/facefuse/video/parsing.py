"""The segmenter at a lower rate in a video: its output for a tracked face computed on every n-th frame of the track
and carried to the frames between (issue 19: the segment stage was ~14 ms of a 720p frame).

Why it may be carried: the segmenter sees the face's aligned crop, which follows the face, so a fringe, glasses or
a hand sit at nearly the same crop pixels from one frame to the next; its probabilities (128 px), scaled to the
crop once by the group's first frame (:class:`~facefuse.fusion.occlusion.SegmenterPlanes`; again by a frame whose
crop has another size), are combined with each frame's own pixels and skin mask, so only the class map is a few
frames old. A new group starts after a scene cut and whenever the face was missing
from a frame (the video loop drops the carrier then).

Why turns: frames are fused on several threads at once. The frame loop takes a :meth:`ParsingCarry.turn` per
frame in frame order (one thread); the first turn of each group of ``every`` runs the segmenter and hands its
result on, the others wait for it (an earlier frame, so no cycle) — or run it themselves when that frame had none
(its face was refused, or it failed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class ParsingCarry:
    """One tracked face's segmenter output, shared by the frames of each group of ``every``; ``chained``: each group's
    first frame computes with the group before's result (None for the first group, or when that had none)."""

    def __init__(self, every: int, chained: bool = False) -> None:
        self.every = every
        self.chained = chained
        self._issued = 0
        self._parsed: dict[int, Any] = {}  # a group's first frame → its result (None: it had none)
        self._users: dict[int, int] = {}  # a group's first frame → its turns not yet finished
        self._ready = threading.Condition()

    def turn(self) -> ParsingTurn:
        """The next frame's turn (call in frame order)."""
        with self._ready:
            index = self._issued
            self._issued += 1
            key = index - index % self.every
            # chained: the next group's first frame is one more user of this group's result
            self._users[key] = self._users.get(key, 0) + 1 + (index == key and self.chained)
        return ParsingTurn(self, key, index == key)

    def _publish(self, key: int, parsed: Any) -> None:
        with self._ready:
            self._parsed[key] = parsed
            self._ready.notify_all()
            if self.chained and key - self.every in self._users:
                self._users[key - self.every] -= 1  # read by this group's first frame (or never to be)
                self._let_go(key - self.every)

    def _lead(self, key: int, compute: Callable[..., Any]) -> Any:
        """A group's first frame's result: chained, computed with the group before's (waited for: an earlier
        frame, so no cycle)."""
        if not self.chained:
            return compute()
        return compute(self._await(key - self.every) if key else None)

    def _await(self, key: int) -> Any:
        with self._ready:
            self._ready.wait_for(lambda: key in self._parsed)
            return self._parsed[key]

    def _finish(self, key: int) -> None:
        """One turn of group ``key`` is done."""
        with self._ready:
            self._users[key] -= 1
            self._let_go(key)

    def _let_go(self, key: int) -> None:
        """Drop group ``key``'s result (lock held) once every turn the group can have was issued and every user is
        done (chained, the next group's first frame too)."""
        if self._users.get(key) == 0 and self._issued >= key + self.every:
            del self._users[key]
            self._parsed.pop(key, None)


class ParsingTurn:
    """One frame's use of a :class:`ParsingCarry` (``record.face.parsing``): called at most once with the work that
    computes this frame's probabilities, then closed (the video loop closes every turn, used or not)."""

    def __init__(self, carry: ParsingCarry, key: int, leads: bool) -> None:
        self._carry, self._key, self._leads = carry, key, leads
        self._done = False

    def __call__(self, compute: Callable[..., Any]) -> Any:
        """The group's first frame computes and hands on; the others take its result (or compute their own when
        it had none). Chained, the first frame's ``compute`` is given the group before's result."""
        assert not self._done, "a turn is used once"
        if self._leads:
            parsed = self._carry._lead(self._key, compute)
            self._carry._publish(self._key, parsed)
        else:
            parsed = self._carry._await(self._key)
            if parsed is None:
                parsed = compute()
        self.close()
        return parsed

    def close(self) -> None:
        """Give the turn up (used or not), so the frames after it never wait for nothing."""
        if not self._done:
            self._done = True
            if self._leads:
                with self._carry._ready:
                    published = self._key in self._carry._parsed
                if not published:
                    self._carry._publish(self._key, None)
            self._carry._finish(self._key)
