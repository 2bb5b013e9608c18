"""facefuse: offline face fusion — the source photo's identity and face shape on the target's pose and scene.

Quick use (one-off; loads the models on every call)::

    import facefuse
    result = facefuse.fuse("me.jpg", "poster.jpg", profile_degree=70, feature_degree=90)
    open("out.jpg", "wb").write(result.encode("jpeg"))

For repeated calls keep one :class:`Fuser` (it owns the loaded models and is thread-safe)::

    fuser = facefuse.Fuser()
    result = fuser.fuse("me.jpg", "poster.jpg", facefuse.FusionOptions(target_face="all"))
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

# Nothing leaves this machine: the onnxruntime wheels (1.32 here) contain Microsoft's 1DS telemetry client, which
# opens a connection to mobile.events.data.microsoft.com about 10 s after the first session is created, even after
# ``onnxruntime.disable_telemetry_events()``. The library reads this variable when it is imported, so it is set
# before any facefuse module imports onnxruntime (tests/test_no_network.py runs the service in a network namespace
# with a listening proxy and fails on any outbound attempt). An explicit ORT_DISABLE_TELEMETRY=0 is respected.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
# OpenCV's own thread pool (resize, remap, blur split over the cores) lets its workers spin for thousands of
# iterations after each parallel call before they sleep; a fusion makes hundreds of such calls, so on a 2-core
# machine that shares its cores with the other photo's analysis, ONNX Runtime and the encoder, that spin was about
# an eighth of a fusion's CPU time (benchmarks/speed_ab.py, docs/speed.md). The workers now sleep at once; the
# calling thread still spins while it waits for them (stopping that too cost 2–3 ms of a photo's wall time).
# OpenCV reads these when it is loaded, so they are set before any facefuse module imports cv2; a value the caller
# set is respected, and a process that imported cv2 before facefuse keeps its pool as it was.
for _wait in ("OPENCV_THREAD_POOL_ACTIVE_WAIT_WORKER", "OPENCV_THREAD_POOL_ACTIVE_WAIT_PAUSE_LIMIT"):
    os.environ.setdefault(_wait, "0")

from .analysis.types import Face, ImageAnalysis, Pose  # noqa: E402
from .errors import ErrorCode, FacefuseError  # noqa: E402
from .fusion.engine import FusionOptions  # noqa: E402
from .imageio import ImageInput  # noqa: E402
from .pipeline import Fuser, FuserConfig, FusionResult  # noqa: E402

__all__ = ["ErrorCode", "Face", "FacefuseError", "Fuser", "FuserConfig", "FusionOptions", "FusionResult",
           "ImageAnalysis", "Pose", "detect", "fuse", "fuse_video"]
__version__ = "0.1.0"


def fuse(source: ImageInput | Sequence[ImageInput], target: ImageInput, *, fuser: Fuser | None = None,
         **options: Any) -> FusionResult:
    """Fuse ``source``'s face into ``target`` (paths, bytes or RGB arrays; ``source`` may be a list of photos of one
    person, :meth:`Fuser.prepare`); ``options`` are :class:`FusionOptions` fields (``profile_degree``,
    ``feature_degree``, ``target_face``, ``engine``, ``visible_label``…)."""
    return (fuser or Fuser()).fuse(source, target, FusionOptions(**options))


def detect(image: ImageInput, *, fuser: Fuser | None = None) -> ImageAnalysis:
    """Faces of one photo with box, score, 468 landmarks, pose and the quality gate's verdict."""
    return (fuser or Fuser()).analyze(image)


def fuse_video(source: ImageInput, target: Any, output: Any, *args: Any, **kwargs: Any) -> Any:
    """Fuse ``source``'s face into every frame of the video ``target``; see :func:`facefuse.video.fuse_video`
    (imported on first use, so photo-only programs never load FFmpeg)."""
    from .video import fuse_video as run

    return run(source, target, output, *args, **kwargs)
