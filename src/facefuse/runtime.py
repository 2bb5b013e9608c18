"""The only place that creates ONNX Runtime sessions.

Why one place: provider choice, provider options, thread counts and graph optimisation must agree across the
library, the CLI and the service, and a model must be loaded once per process however many requests use it.
ONNX Runtime's ``InferenceSession.run`` is thread-safe, so one cached session serves every worker thread.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort

from .batching import CoalescingSession
from .config import RuntimeConfig
from .tensorrt_profiles import input_profiles, ort_profile_options

PROVIDER_PREFERENCE: tuple[str, ...] = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "DmlExecutionProvider",
    "ROCMExecutionProvider",
    "OpenVINOExecutionProvider",
    "CoreMLExecutionProvider",
    "CPUExecutionProvider",
)

_SHORT_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "directml": "DmlExecutionProvider",
    "dml": "DmlExecutionProvider",
    "rocm": "ROCMExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


def canonical_provider(name: str) -> str:
    """Accept ``cuda`` as well as ``CUDAExecutionProvider`` on the command line."""
    return _SHORT_NAMES.get(name.strip().lower(), name.strip())


def choose_providers(requested: tuple[str, ...] | None, available: list[str]) -> list[str]:
    """Requested providers (or the preference order) that this onnxruntime build offers; CPU always last.

    An explicit request for a provider that is not installed is dropped rather than failing, because the same
    command line must run on a laptop and on a GPU box; the caller can read the chosen list back from the session.
    """
    wanted = [canonical_provider(p) for p in requested] if requested else list(PROVIDER_PREFERENCE)
    chosen = [p for p in wanted if p in available and p != "CPUExecutionProvider"]
    return chosen + ["CPUExecutionProvider"]


def provider_options(provider: str, config: RuntimeConfig) -> dict[str, Any]:
    """Options for one provider, sized for 4–6 GB cards by default."""
    gpu = config.gpu
    if provider == "TensorrtExecutionProvider":
        cache = str(gpu.engine_cache())  # engines built once are loaded from here by later sessions
        return {
            "device_id": gpu.device_id,
            "trt_max_workspace_size": gpu.trt_workspace_mb * 1024 * 1024,
            "trt_fp16_enable": gpu.trt_fp16,
            "trt_engine_cache_enable": True,
            "trt_timing_cache_enable": True,
            "trt_engine_cache_path": cache,
            "trt_timing_cache_path": cache,
        }
    if provider == "CUDAExecutionProvider":
        options: dict[str, Any] = {
            "device_id": gpu.device_id,
            "arena_extend_strategy": "kSameAsRequested",
            "cudnn_conv_algo_search": "HEURISTIC",
            "do_copy_in_default_stream": True,
        }
        if gpu.gpu_mem_limit_mb:
            options["gpu_mem_limit"] = gpu.gpu_mem_limit_mb * 1024 * 1024
        return options
    if provider in ("DmlExecutionProvider", "ROCMExecutionProvider"):
        return {"device_id": gpu.device_id}
    return {}


# The most intra-op threads a stage's sessions get, whatever the core count. Measured on 2 cores (benchmarks/
# results/fusion_speed.md, docs/speed.md): the detectors see 128–192 px and run in ~1.5–4 ms, where waking a second
# thread costs more than it saves (BlazeFace short range: 3.1 ms CPU on one thread, 4.4 ms on two, with no wall
# time gained on a busy machine). FaceMesh (one 192 px face) and the segmenter (two 128 px crops) likewise, and
# their callers already keep both cores busy: a photo analyses its two photos on two threads, a video or live
# session fuses frames on a thread per core (medians of 55 interleaved runs, load ~8: FaceMesh 6.6 ms CPU / 13.4
# wall on one thread, 7.7 / 14.1 on two; segmenter 8.0 / 9.3 against 8.7 / 22.2). Others get the cores' share.
STAGE_THREADS: dict[str, int] = {"detect": 1, "landmarks": 1, "segment": 1}


def intra_op_threads(config: RuntimeConfig, cores: int | None = None, stage: str | None = None) -> int:
    """Threads per session: all cores for one caller, cores split evenly when ``concurrency`` calls run at once,
    and at most :data:`STAGE_THREADS` for the stages whose models are too small to share."""
    if config.intra_op_threads > 0:
        threads = config.intra_op_threads
    else:
        cores = cores or os.cpu_count() or 1
        threads = max(1, cores // max(1, config.concurrency))
    return min(threads, STAGE_THREADS.get(stage or "", threads))


def size_opencv_pool(concurrent: int, cores: int | None = None) -> int:
    """Give OpenCV's thread pool one concurrent fusion's share of the cores (at least one thread), as ONNX
    Runtime's sessions get theirs (:func:`intra_op_threads`); returns that size. For a shell that owns its process
    and runs ``concurrent`` fusions at once (the server's workers, a video's fusion threads): process-wide, so the
    library never calls it.

    Why: OpenCV's default, a thread per core, splits every large call of every fusion while the other fusions keep
    the other cores busy anyway, and the hand-offs cost CPU that those need (issue 19, benchmarks/opencv_pool.py,
    one thread against two on 2 cores: a live frame 33.5 → 27.2 ms of CPU, its server time p95 38.4 → 42.9 ms; a
    720p video frame 93.9 → 88.8 ms, 18.9 → 19.9 frames/s). A single photo on an idle machine is ~6 ms faster with
    the split, so the library and the photo commands keep OpenCV's default."""
    import cv2

    threads = max(1, (cores or os.cpu_count() or 1) // max(1, concurrent))
    cv2.setNumThreads(threads)
    return threads


def session_options(config: RuntimeConfig, stage: str | None = None) -> ort.SessionOptions:
    """Why no spinning: ONNX Runtime's pool threads busy-wait after each run by default; on a 2-core machine that
    shares its cores with decode, encode and other requests, the spin is CPU taken from them (FaceMesh on 2 threads
    on a loaded machine: 14 ms wall with spinning off, 25 ms with it on, at the same CPU time)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = intra_op_threads(config, stage=stage)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return options


def trt_profile_options(model_path: Path) -> dict[str, str]:
    """TensorRT optimisation profiles (min/opt/max) for a model with dynamic axes; none for a static graph.

    TensorRT cannot build an engine for a dynamic axis without a range (batch 1/1/8, image sides 128/640/1280).
    """
    profiles = input_profiles(model_path)
    if all(profile.min == profile.max for profile in profiles):
        return {}
    return ort_profile_options(profiles)


def providers_with_options(model_path: Path, providers: tuple[str, ...] | list[str],
                           config: RuntimeConfig) -> list[tuple[str, dict[str, Any]]]:
    """(provider, options) pairs for one model: the provider's options, plus TensorRT's profiles for this graph."""
    pairs = []
    for provider in providers:
        options = provider_options(provider, config)
        if provider == "TensorrtExecutionProvider":
            options.update(trt_profile_options(model_path))
        pairs.append((provider, options))
    return pairs


@dataclass(frozen=True)
class SessionInfo:
    path: Path
    providers: list[str]


class Runtime:
    """Creates and caches sessions: one per (model file, provider list) for the lifetime of this object."""

    def __init__(self, config: RuntimeConfig | None = None) -> None:
        self.config = config or RuntimeConfig()
        self._sessions: dict[tuple[str, tuple[str, ...], int], ort.InferenceSession | CoalescingSession] = {}
        self._lock = threading.Lock()

    @property
    def providers(self) -> list[str]:
        return choose_providers(self.config.providers, ort.get_available_providers())

    def session(self, model_path: Path | str, providers: list[str] | None = None,
                stage: str | None = None) -> ort.InferenceSession | CoalescingSession:
        """The cached session of a model; ``stage`` (e.g. "detect") picks its thread count from :data:`STAGE_THREADS`."""
        chosen = tuple(providers or self.providers)
        key = (str(Path(model_path).resolve()), chosen, intra_op_threads(self.config, stage=stage))
        with self._lock:
            cached = self._sessions.get(key)
            if cached is None:
                cached = ort.InferenceSession(
                    str(model_path),
                    sess_options=session_options(self.config, stage),
                    providers=providers_with_options(Path(model_path), chosen, self.config),
                )
                if self.config.batch_window_ms > 0 and not isinstance(cached.get_inputs()[0].shape[0], int):
                    cached = CoalescingSession(cached, self.config.batch_window_ms / 1000, self.config.batch_max)
                self._sessions[key] = cached
            return cached

    def loaded(self) -> list[SessionInfo]:
        return [SessionInfo(Path(path), list(providers)) for path, providers, _ in self._sessions]
