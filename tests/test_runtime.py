"""The runtime: provider choice and provider options (built for CUDA/TensorRT/DirectML even though only the CPU
provider is installed here), thread division, and real sessions made and cached once."""

from __future__ import annotations

from pathlib import Path

import pytest

from facefuse.config import RuntimeConfig, StoreConfig
from facefuse.models import ModelStore
from facefuse.runtime import (
    Runtime,
    canonical_provider,
    choose_providers,
    intra_op_threads,
    provider_options,
    session_options,
)

GPU_BOX = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
WINDOWS_BOX = ["DmlExecutionProvider", "CPUExecutionProvider"]


@pytest.mark.parametrize("short,full", [("cuda", "CUDAExecutionProvider"), ("TRT", "TensorrtExecutionProvider"),
                                        ("dml", "DmlExecutionProvider"), (" cpu ", "CPUExecutionProvider"),
                                        ("OpenVINOExecutionProvider", "OpenVINOExecutionProvider")])
def test_short_provider_names(short: str, full: str) -> None:
    assert canonical_provider(short) == full


def test_preference_order_follows_what_is_installed() -> None:
    """The preference decides the order, not the order the installed build lists its providers in; providers
    facefuse does not know are never chosen by default."""
    assert choose_providers(None, GPU_BOX[::-1]) == GPU_BOX
    assert choose_providers(None, WINDOWS_BOX[::-1]) == WINDOWS_BOX
    assert choose_providers(None, ["AzureExecutionProvider", "CPUExecutionProvider"]) == ["CPUExecutionProvider"]


def test_requested_order_is_kept_and_cpu_is_always_last() -> None:
    assert choose_providers(("cuda", "tensorrt"), GPU_BOX) == ["CUDAExecutionProvider", "TensorrtExecutionProvider",
                                                               "CPUExecutionProvider"]
    assert choose_providers(("cpu", "cuda"), GPU_BOX) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_missing_requested_provider_falls_back_to_cpu() -> None:
    """The same command line must run on a laptop: asking for CUDA where it is not installed is not an error."""
    assert choose_providers(("cuda",), ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert choose_providers(("dml",), GPU_BOX) == ["CPUExecutionProvider"]


def test_gpu_flags_and_settings_reach_every_gpu_provider(tmp_path: Path, monkeypatch) -> None:
    """The GPU options are given once (a flag, or a FACEFUSE_* setting of the service) and each provider gets them
    in its own option names; the TensorRT engine cache is always on, so a built engine is reused."""
    from facefuse.cli import build_parser
    from facefuse.cli.options import fuser_config
    from facefuse.serve.settings import ServeSettings

    args = build_parser().parse_args(["detect", "x.jpg", "--device-id", "1", "--trt-workspace-mb", "512",
                                      "--no-trt-fp16", "--trt-cache-dir", str(tmp_path), "--gpu-mem-limit-mb", "3072"])
    from_cli = fuser_config(args).runtime
    monkeypatch.setenv("FACEFUSE_DEVICE_ID", "1")
    monkeypatch.setenv("FACEFUSE_TRT_WORKSPACE_MB", "512")
    monkeypatch.setenv("FACEFUSE_TRT_FP16", "false")
    monkeypatch.setenv("FACEFUSE_TRT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FACEFUSE_GPU_MEM_LIMIT_MB", "3072")
    from_service = ServeSettings().fuser_config().runtime
    for config in (from_cli, from_service):
        trt = provider_options("TensorrtExecutionProvider", config)
        assert (trt["device_id"], trt["trt_max_workspace_size"], trt["trt_fp16_enable"]) == (1, 512 * 2**20, False)
        assert trt["trt_engine_cache_enable"] and trt["trt_engine_cache_path"] == str(tmp_path)
        cuda = provider_options("CUDAExecutionProvider", config)
        assert (cuda["device_id"], cuda["gpu_mem_limit"]) == (1, 3072 * 2**20)
        assert provider_options("DmlExecutionProvider", config)["device_id"] == 1
    default = RuntimeConfig()
    assert "gpu_mem_limit" not in provider_options("CUDAExecutionProvider", default)
    assert provider_options("TensorrtExecutionProvider", default)["trt_engine_cache_path"].endswith("tensorrt")
    assert provider_options("CPUExecutionProvider", default) == {}


def test_threads_are_divided_between_concurrent_calls() -> None:
    assert intra_op_threads(RuntimeConfig(), cores=8) == 8
    assert intra_op_threads(RuntimeConfig(concurrency=4), cores=8) == 2
    assert intra_op_threads(RuntimeConfig(concurrency=16), cores=8) == 1
    assert intra_op_threads(RuntimeConfig(intra_op_threads=3, concurrency=4), cores=8) == 3


def test_session_options_reach_the_real_session(store_config: StoreConfig) -> None:
    """The thread count given to the Runtime is the one the real ONNX Runtime session runs with."""
    path = ModelStore(store_config).ensure("facemesh")
    for threads in (1, 2):
        session = Runtime(RuntimeConfig(intra_op_threads=threads)).session(path)
        assert session.get_session_options().intra_op_num_threads == threads
    assert session_options(RuntimeConfig(intra_op_threads=2)).intra_op_num_threads == 2


def test_real_sessions_are_made_once_and_run(store_config: StoreConfig) -> None:
    path = ModelStore(store_config).ensure("yunet")
    runtime = Runtime(RuntimeConfig(providers=("cuda", "cpu"), intra_op_threads=1))
    assert runtime.providers[-1] == "CPUExecutionProvider"
    session = runtime.session(path)
    assert runtime.session(path) is session
    assert session.get_providers()[-1] == "CPUExecutionProvider"
    assert [info.path for info in runtime.loaded()] == [path.resolve()]
    assert session.get_inputs()[0].shape == [1, 3, 640, 640]


def test_tensorrt_gets_profiles_for_dynamic_axes_only(mirror_dir: Path) -> None:
    """Built on CPU (TensorRT is not installed here): the options a TensorRT session of each model would get."""
    from facefuse.runtime import providers_with_options

    chosen = ("TensorrtExecutionProvider", "CPUExecutionProvider")
    dynamic = dict(providers_with_options(mirror_dir / "yunet/yunet_n_dynamic.onnx", chosen, RuntimeConfig()))
    trt = dynamic["TensorrtExecutionProvider"]
    assert trt["trt_profile_min_shapes"] == "input:1x3x128x128"
    assert trt["trt_profile_opt_shapes"] == "input:1x3x640x640"
    assert trt["trt_profile_max_shapes"] == "input:8x3x1280x1280"
    assert trt["trt_max_workspace_size"] == 256 * 1024 * 1024 and dynamic["CPUExecutionProvider"] == {}
    static = dict(providers_with_options(mirror_dir / "yunet/yunet_s_640_640.onnx", chosen, RuntimeConfig()))
    assert not any(key.startswith("trt_profile") for key in static["TensorrtExecutionProvider"])


def test_concurrent_calls_are_merged_into_one_batched_run(store_config: StoreConfig) -> None:
    """With a batching window, two threads' FaceMesh calls become one run of batch 2, each getting its own rows."""
    import threading

    import numpy as np

    from facefuse.batching import CoalescingSession

    path = ModelStore(store_config).ensure("facemesh")
    plain = Runtime(RuntimeConfig(intra_op_threads=1)).session(path)
    merged = Runtime(RuntimeConfig(intra_op_threads=1, batch_window_ms=2000, batch_max=2)).session(path)
    assert isinstance(merged, CoalescingSession)
    name = plain.get_inputs()[0].name
    rng = np.random.default_rng(7)
    inputs = [rng.random((1, 3, 192, 192), dtype=np.float32) for _ in range(2)]
    results: list[list[np.ndarray] | None] = [None, None]
    start = threading.Barrier(2)

    def call(i: int) -> None:
        start.wait()
        results[i] = merged.run(None, {name: inputs[i]})

    threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert merged.runs == 1 and merged.calls == 2  # batch_max reached: no need to wait out the window
    for i in range(2):
        expected = plain.run(None, {name: inputs[i]})
        assert results[i] is not None
        for got, want in zip(results[i], expected):
            assert got.shape == want.shape and np.allclose(got, want, atol=1e-4)


def test_batching_is_off_by_default_and_for_fixed_batch_models(store_config: StoreConfig) -> None:
    from facefuse.batching import CoalescingSession

    store = ModelStore(store_config)
    assert not isinstance(Runtime().session(store.ensure("facemesh")), CoalescingSession)
    fixed = Runtime(RuntimeConfig(batch_window_ms=5)).session(store.ensure("blazeface_full"))
    assert not isinstance(fixed, CoalescingSession)


def test_service_setting_reaches_the_runtime() -> None:
    from facefuse.serve.settings import ServeSettings

    runtime = ServeSettings(batch_window_ms=5, max_batch=4, workers=2).fuser_config().runtime
    assert (runtime.batch_window_ms, runtime.batch_max, runtime.concurrency) == (5, 4, 2)


@pytest.mark.parametrize("given, expected", [(None, "0"), ("2000", "2000")])
def test_opencvs_pool_workers_sleep_unless_the_caller_said_otherwise(given: str | None, expected: str) -> None:
    """``import facefuse`` sets OpenCV's worker spin to 0 before cv2 is loaded (it is read at load time): a fresh
    interpreter sees it in its environment once cv2 is imported through facefuse, and a value the caller set is kept."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENCV_THREAD_POOL_")}
    if given is not None:
        env["OPENCV_THREAD_POOL_ACTIVE_WAIT_WORKER"] = given
    probe = ("import sys, os; assert 'cv2' not in sys.modules; import facefuse; assert 'cv2' in sys.modules; "
             "print(os.environ['OPENCV_THREAD_POOL_ACTIVE_WAIT_WORKER'], "
             "os.environ['OPENCV_THREAD_POOL_ACTIVE_WAIT_PAUSE_LIMIT'])")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.split() == [expected, "0"]


def test_allocator_tuning_applies_on_glibc_and_can_be_repeated():
    """The CLI, the server and Ray replicas raise glibc's mmap/trim thresholds for their process (fewer page faults
    per video frame); elsewhere the call says it did nothing."""
    import platform

    from facefuse.allocator import keep_freed_memory

    expected = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert keep_freed_memory() is expected
    assert keep_freed_memory() is expected  # idempotent


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


def test_freed_memory_between_blocks_in_use_goes_back_to_the_kernel():
    """What a live session leaves: frame-sized arrays freed between others still alive, in a worker thread's arena.
    With the thresholds raised (the server's process) the freed blocks stay resident until
    :func:`~facefuse.allocator.release_freed_memory` hands their pages back; the blocks in use keep their values."""
    import threading

    import numpy as np

    from facefuse.allocator import keep_freed_memory, release_freed_memory

    assert keep_freed_memory()  # this suite runs on Linux with glibc, as the server does
    kept: list[np.ndarray] = []

    def frames() -> None:  # in a thread of its own, like the server's workers: its own arena
        arrays = [np.full(1 << 20, index % 251, dtype=np.uint8) for index in range(240)]
        kept.extend(arrays[1::2])  # every other block stays in use: the free ones are never at the arena's top

    worker = threading.Thread(target=frames)
    worker.start()
    worker.join()
    before = _rss_mb()
    assert release_freed_memory()
    after = _rss_mb()
    assert before - after > 60, (before, after)  # 120 MB were free between the 120 blocks still in use
    assert all(int(block[0]) == int(block[-1]) == (2 * k + 1) % 251 for k, block in enumerate(kept))
