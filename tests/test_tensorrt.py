"""TensorRT configuration that can be checked without TensorRT: profiles from a model's dynamic axes, the engine
cache key, the ONNX Runtime option strings, and the fallback to ONNX Runtime when TensorRT is absent."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from facefuse.errors import ErrorCode, FacefuseError
from facefuse.models import ModelStore
from facefuse.optimize.tensorrt import (DimRange, TrtBuildConfig, cache_key, engine_or_onnx, engine_path,
                                        input_profiles, ort_profile_options, tensorrt_available)


def test_dynamic_axes_get_min_opt_max_and_fixed_axes_stay(store_config):
    store = ModelStore(store_config)
    (dynamic,) = input_profiles(store.ensure("retinaface_mbnet025"))  # [?, 3, ?, ?]
    assert (dynamic.min, dynamic.opt, dynamic.max) == ((1, 3, 128, 128), (1, 3, 640, 640), (8, 3, 1280, 1280))
    (fixed,) = input_profiles(store.ensure("yunet"))
    assert fixed.min == fixed.opt == fixed.max == (1, 3, 640, 640)


def test_named_axis_ranges_override_the_defaults(tmp_path: Path):
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "h", "w"])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    (profile,) = input_profiles(path, {"h": DimRange(64, 128, 256)}, max_batch=4)
    assert profile.min == (1, 3, 64, 128) and profile.opt == (1, 3, 128, 640) and profile.max == (4, 3, 256, 1280)
    assert ort_profile_options((profile,)) == {"trt_profile_min_shapes": "x:1x3x64x128",
                                               "trt_profile_opt_shapes": "x:1x3x128x640",
                                               "trt_profile_max_shapes": "x:4x3x256x1280"}


def test_an_axis_with_no_known_role_needs_a_range(tmp_path: Path):
    graph = helper.make_graph([helper.make_node("Identity", ["tokens"], ["y"])], "g",
                              [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, [1, "length"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "length"])])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph), str(path))
    with pytest.raises(FacefuseError) as caught:
        input_profiles(path)
    assert caught.value.code is ErrorCode.INVALID_OPTION and "length" in caught.value.message
    assert input_profiles(path, {"length": DimRange(1, 16, 64)})[0].max == (1, 64)


def test_cache_key_changes_with_each_of_its_four_parts():
    base = ("a" * 64, "NVIDIA GeForce RTX 3060", "10.0.1", "fp16")
    key = cache_key(*base)
    assert key == cache_key(*base) and len(key) == 64
    for i, other in enumerate(["b" * 64, "NVIDIA GeForce RTX 4090", "10.0.2", "int8"]):
        changed = list(base)
        changed[i] = other
        assert cache_key(*changed) != key
    assert engine_path(Path("/c"), Path("/m/yunet.onnx"), key) == Path(f"/c/yunet-{key[:20]}.engine")


def test_build_config_defaults_and_validation():
    config = TrtBuildConfig()
    assert config.precision == "fp16" and config.workspace_bytes == 256 * 2**20
    with pytest.raises(FacefuseError):
        TrtBuildConfig(precision="int4")
    with pytest.raises(FacefuseError):
        TrtBuildConfig(workspace_mb=4)
    with pytest.raises(FacefuseError):
        DimRange(4, 2, 8)


def test_without_tensorrt_the_onnx_file_is_used(store_config, tmp_path: Path):
    path = ModelStore(store_config).ensure("yunet")
    result = engine_or_onnx(path, TrtBuildConfig(), tmp_path)
    if tensorrt_available():  # a GPU machine builds (or finds) a cached engine instead
        assert result.suffix == ".engine" and result.parent == tmp_path
    else:
        assert result == path and not any(tmp_path.iterdir())
