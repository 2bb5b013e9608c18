"""TensorRT optimisation profiles, checked without TensorRT: min/opt/max shapes from a model's dynamic axes and
the ONNX Runtime option strings they become (the engine cache itself is ONNX Runtime's TensorRT provider's)."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from facefuse.errors import ErrorCode, FacefuseError
from facefuse.models import ModelStore
from facefuse.tensorrt_profiles import DimRange, input_profiles, ort_profile_options


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


def test_a_range_must_be_ordered():
    with pytest.raises(FacefuseError) as caught:
        DimRange(4, 2, 8)
    assert caught.value.code is ErrorCode.INVALID_OPTION
