"""The runtime: provider choice and provider options (built for CUDA/TensorRT/DirectML even though only the CPU
provider is installed here), thread division, and real sessions made and cached once."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest

from facefuse.config import RuntimeConfig, StoreConfig
from facefuse.models import ModelStore
from facefuse.runtime import (
    PROVIDER_PREFERENCE,
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
    assert choose_providers(None, GPU_BOX) == GPU_BOX
    assert choose_providers(None, WINDOWS_BOX) == WINDOWS_BOX
    assert choose_providers(None, ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert PROVIDER_PREFERENCE[-1] == "CPUExecutionProvider"


def test_requested_order_is_kept_and_cpu_is_always_last() -> None:
    assert choose_providers(("cuda", "tensorrt"), GPU_BOX) == ["CUDAExecutionProvider", "TensorrtExecutionProvider",
                                                               "CPUExecutionProvider"]
    assert choose_providers(("cpu", "cuda"), GPU_BOX) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_missing_requested_provider_falls_back_to_cpu() -> None:
    """The same command line must run on a laptop: asking for CUDA where it is not installed is not an error."""
    assert choose_providers(("cuda",), ["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert choose_providers(("dml",), GPU_BOX) == ["CPUExecutionProvider"]


def test_tensorrt_options(tmp_path: Path) -> None:
    config = RuntimeConfig(device_id=1, trt_workspace_mb=512, trt_fp16=False, trt_cache_dir=tmp_path)
    options = provider_options("TensorrtExecutionProvider", config)
    assert options["device_id"] == 1
    assert options["trt_max_workspace_size"] == 512 * 1024 * 1024
    assert options["trt_fp16_enable"] is False
    assert options["trt_engine_cache_enable"] is True and options["trt_engine_cache_path"] == str(tmp_path)
    assert options["trt_timing_cache_path"] == str(tmp_path)
    no_cache = provider_options("TensorrtExecutionProvider", RuntimeConfig())
    assert no_cache["trt_engine_cache_enable"] is False and "trt_engine_cache_path" not in no_cache


def test_cuda_options() -> None:
    options = provider_options("CUDAExecutionProvider", RuntimeConfig(device_id=2, gpu_mem_limit_mb=3072))
    assert options["device_id"] == 2
    assert options["gpu_mem_limit"] == 3072 * 1024 * 1024
    assert options["arena_extend_strategy"] == "kSameAsRequested"
    assert "gpu_mem_limit" not in provider_options("CUDAExecutionProvider", RuntimeConfig())


def test_directml_and_cpu_options() -> None:
    assert provider_options("DmlExecutionProvider", RuntimeConfig(device_id=1)) == {"device_id": 1}
    assert provider_options("CPUExecutionProvider", RuntimeConfig()) == {}


def test_threads_are_divided_between_concurrent_calls() -> None:
    assert intra_op_threads(RuntimeConfig(), cores=8) == 8
    assert intra_op_threads(RuntimeConfig(concurrency=4), cores=8) == 2
    assert intra_op_threads(RuntimeConfig(concurrency=16), cores=8) == 1
    assert intra_op_threads(RuntimeConfig(intra_op_threads=3, concurrency=4), cores=8) == 3


def test_session_options() -> None:
    options = session_options(RuntimeConfig(intra_op_threads=2))
    assert options.intra_op_num_threads == 2
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL


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
