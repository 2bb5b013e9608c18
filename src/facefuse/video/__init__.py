"""Video fusion: a source face into every frame of a clip, tracked, smoothed over time, with its sound, resumable.

``fuse_video(source, target_clip, output)`` is the entry point; see :mod:`facefuse.video.fuse` for the stages.
"""

from __future__ import annotations

from .fuse import fuse_video
from .options import VideoOptions, VideoProgress, VideoResult

__all__ = ["VideoOptions", "VideoProgress", "VideoResult", "fuse_video"]
