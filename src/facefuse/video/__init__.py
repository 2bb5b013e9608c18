"""Video fusion: a source face into every frame of a clip, tracked, smoothed over time, with its sound, resumable.

``fuse_video(source, target_clip, output)`` is the entry point; see :mod:`facefuse.video.fuse` for the stages.
PyAV (FFmpeg's libraries) is imported only when ``fuse_video`` is first used, so building the CLI or the options
costs nothing.
"""

from __future__ import annotations

from typing import Any

from .options import VideoOptions, VideoProgress, VideoResult

__all__ = ["VideoOptions", "VideoProgress", "VideoResult", "fuse_video"]


def __getattr__(name: str) -> Any:
    if name == "fuse_video":
        from .fuse import fuse_video

        return fuse_video
    raise AttributeError(name)
