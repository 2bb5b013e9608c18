"""`facefuse optimize` on the pipeline's real models: calibration inputs, INT8/FP16 files, the quality report,
installation as a selectable variant, and the errors a user can run into. Latency is only recorded, never asserted
(benchmarks/optimize.py measures it)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from facefuse.analysis.analyzer import FaceAnalyzer
from facefuse.analysis.nms import Detection
from facefuse.cli import main
from facefuse.analysis.segmentation import SEGMENTER_MODEL
from facefuse.config import AnalysisConfig, StoreConfig
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.models import ModelStore
from facefuse.optimize import Int8Options, OptimizeRequest, optimize_model
from facefuse.optimize.calibration import load_samples, photo_paths, record_feeds
from facefuse.optimize.drivers import model_kind
from facefuse.optimize.quantize import output_heads, quantize_int8
from facefuse.optimize.report import compare_detections, compare_images, compare_masks
from facefuse.optimize.workflow import split_photos
from facefuse.runtime import Runtime


@pytest.fixture()
def home(tmp_path: Path, model_home: Path, mirror_dir: Path) -> StoreConfig:
    """A private cache (variants get installed into it) holding the converted MediaPipe models."""
    (tmp_path / "models").mkdir()
    for f in (model_home / "models").iterdir():
        if f.name.startswith(("blazeface", "facemesh")) and ".int8" not in f.name and ".fp16" not in f.name:
            shutil.copy(f, tmp_path / "models" / f.name)
    return StoreConfig(home=tmp_path, mirror=mirror_dir, offline=True)


@pytest.fixture(scope="module")
def photos(faces_dir: Path, mirror_dir: Path) -> dict[str, Path]:
    return {"calibration": faces_dir.parent / "train" / "utkface" / "images",
            "holdout": faces_dir / "face_recognition" / "knn_examples" / "test"}


def _request(model: str, photos, tmp_path: Path, **kw) -> OptimizeRequest:
    defaults = dict(output=tmp_path / f"{model}.onnx", calibration=photos["calibration"], holdout=photos["holdout"],
                    max_images=16, latency_runs=3)
    defaults.update(kw)
    return OptimizeRequest(model, defaults.pop("precision", "int8"), **defaults)


def _ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path)).graph.node}


def test_calibration_inputs_are_the_pipelines_own(home, photos):
    store = ModelStore(home)
    runtime = Runtime()
    samples = load_samples(photo_paths(photos["holdout"]), FaceAnalyzer(store, runtime))
    assert samples and all(s.faces for s in samples)
    detector = record_feeds(runtime.session(store.ensure("blazeface_full")),
                            model_kind("blazeface_full", store, runtime), samples)
    assert len(detector) == len(samples)  # one letterboxed photo per sample
    tensor = detector[0]["input"]
    assert tensor.shape == (1, 3, 192, 192) and tensor.min() >= -1.0 and tensor.max() <= 1.0 and tensor.min() < -0.9
    mesh = record_feeds(runtime.session(store.ensure("facemesh")), model_kind("facemesh", store, runtime), samples)
    assert len(mesh) == sum(len(s.faces) for s in samples)  # one region of interest per face
    assert mesh[0]["input_1"].shape == (1, 3, 192, 192) and 0.0 <= mesh[0]["input_1"].min() < mesh[0]["input_1"].max() <= 1.0


def test_calibration_reads_every_photo_format_the_decoder_reads(home, tmp_path, faces_dir):
    """PGM photos (the dlib and ORL face sets ship them) used to be skipped by `optimize --calibration`."""
    from PIL import Image

    folder = tmp_path / "mixed"
    folder.mkdir()
    face = Image.open(faces_dir / "face_recognition/obama-480p.jpg")
    face.convert("L").save(folder / "grey.pgm")
    face.save(folder / "colour.png")
    (folder / "notes.txt").write_text("not a photo")
    assert [p.name for p in photo_paths(folder)] == ["colour.png", "grey.pgm"]
    samples = load_samples(photo_paths(folder), FaceAnalyzer(ModelStore(home), Runtime()))
    assert len(samples) == 2 and all(s.faces for s in samples)


def test_calibration_and_holdout_never_overlap(photos, faces_dir):
    calib, held = split_photos(OptimizeRequest("x", "int8", calibration=faces_dir / "face_recognition",
                                               max_images=30))
    assert held and calib and not set(calib) & set(held) and len(held) == len(calib + held) // 5


def test_int8_detector_passes_its_report_and_installs_as_variant(home, photos, tmp_path):
    store = ModelStore(home)
    report = optimize_model(_request("blazeface_full", photos, tmp_path, install=True), store)
    assert report.passed, report.describe()
    assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(Path(report.output))
    assert report.size_bytes["int8"] < report.size_bytes["fp32"] / 2
    assert report.metrics["faces"] >= 5 and report.metrics["missed_faces"] == 0
    # installed: verified like any model, and selected for --precision int8
    assert store.verify("blazeface_full@int8").status == "ok"
    assert store.ensure_precision("blazeface_full", "int8").name == "blazeface_full.int8.onnx"
    assert json.loads((store.cache_dir / "blazeface_full.int8.onnx.report.json").read_text())["passed"]
    assert [entry.name for entry in store.installed_variants()] == ["blazeface_full@int8"]  # `models list` shows it
    # no FP16 variant was made: FP32 is used
    assert store.ensure_precision("blazeface_full", "fp16").name == "blazeface_full.onnx"
    with pytest.raises(FacefuseError) as caught:
        store.ensure("blazeface_full@fp16")
    assert caught.value.code is ErrorCode.MODEL_MISSING and "facefuse optimize" in caught.value.hint
    # a tampered variant is refused
    installed = store.cache_dir / "blazeface_full.int8.onnx"
    installed.write_bytes(installed.read_bytes()[:-10])
    assert store.verify("blazeface_full@int8").status == "corrupt"


def test_int8_segmenter_passes_its_report_and_the_segment_stage_runs_it(home, photos, tmp_path, faces_dir):
    """Our own face segmenter through the toolkit: calibrated on the segment stage's own crops, judged by class
    agreement with FP32, installed, and then the model `precision=int8` fuses with."""
    store = ModelStore(home)
    report = optimize_model(_request(SEGMENTER_MODEL, photos, tmp_path, install=True), store)
    assert report.passed, report.describe()
    assert report.metrics["faces"] >= 5 and report.metrics["min_pixel_agreement"] >= 0.97
    assert {"QuantizeLinear", "DequantizeLinear"} <= _ops(Path(report.output))
    installed = store.ensure_precision(SEGMENTER_MODEL, "int8")
    assert installed.name == "face_segmenter.int8.onnx"
    fp32 = Fuser(FuserConfig(store=home))
    int8 = Fuser(FuserConfig(store=home, analysis=AnalysisConfig(precision="int8")))
    assert int8.segmenter().session is int8.runtime.session(installed, stage="segment")
    assert fp32.segmenter().session is not int8.segmenter().session
    pair = [faces_dir / "face_recognition" / name for name in ("biden.jpg", "obama.jpg")]
    a, b = (f.fuse(*pair, FusionOptions(visible_label=False)).image.astype(np.float64) for f in (fp32, int8))
    assert 0 < np.mean((a - b) ** 2) and 10 * np.log10(255 ** 2 / np.mean((a - b) ** 2)) > 35  # masks moved a little


def test_mask_metric_counts_changed_pixels_and_lost_classes():
    probabilities = np.zeros((8, 10, 10), np.float32)
    probabilities[1] = 1.0  # skin everywhere
    probabilities[7, :2, :2] = 2.0  # a small occluder
    metrics, checks = compare_masks([probabilities], [probabilities])
    assert metrics["min_pixel_agreement"] == 1.0 and all(c.passed for c in checks)
    lost = probabilities.copy()
    lost[7] = 0.0  # the occluder gone: 4 % of the pixels, half of the classes' mean IoU
    metrics, checks = compare_masks([probabilities], [lost])
    assert metrics["min_pixel_agreement"] == pytest.approx(0.96)
    assert metrics["mean_class_iou"] == pytest.approx((96 / 100 + 0.0) / 2)
    assert [c.passed for c in checks] == [False, False]


def test_heads_stay_float_unless_asked(home, photos, tmp_path):
    store = ModelStore(home)
    heads = output_heads(onnx.load(str(store.ensure("blazeface_full"))))
    assert heads == ["classifier_face_4", "regressor_face_4"]
    optimize_model(_request("blazeface_full", photos, tmp_path, max_images=6, output=tmp_path / "q.onnx"), store)
    graph = onnx.load(str(tmp_path / "q.onnx")).graph
    producers = {o: n for n in graph.node for o in n.output}
    for node in (n for n in graph.node if n.name in heads):
        assert node.input[1] not in producers or producers[node.input[1]].op_type != "DequantizeLinear"
    quantised = [n for n in graph.node if n.op_type == "Conv" and n.input[1] in producers
                 and producers[n.input[1]].op_type == "DequantizeLinear"]
    assert quantised and not {n.name for n in quantised} & set(heads)


def test_percentile_per_channel_recognizer(home, photos, tmp_path, mirror_dir):
    store = ModelStore(home)
    report = optimize_model(_request("mobilefacenet", photos, tmp_path,
                                     int8=Int8Options("percentile", per_channel=True)), store)
    assert report.settings == {"method": "percentile", "per_channel": True, "exclude": []}
    assert report.metrics["min_cosine"] > 0.9 and report.checks[0].metric == "min_cosine"
    assert report.passed == (report.metrics["min_cosine"] >= 0.98)


def test_fp16_keeps_float32_inputs_and_outputs(home, photos, tmp_path):
    store = ModelStore(home)
    report = optimize_model(_request("facemesh", photos, tmp_path, precision="fp16", calibration=None), store)
    model = onnx.load(report.output)
    assert all(v.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for v in [*model.graph.input, *model.graph.output])
    assert any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer)
    assert report.passed and report.metrics["mean_nme"] < 0.005  # half precision barely moves the mesh


def test_excluding_a_node_keeps_it_float_and_a_typo_is_an_error(home, photos, tmp_path):
    store = ModelStore(home)
    node = next(n.name for n in onnx.load(str(store.ensure("blazeface_full"))).graph.node if n.op_type == "Conv")
    optimize_model(_request("blazeface_full", photos, tmp_path, max_images=6,
                            int8=Int8Options(exclude=(node,))), store)
    graph = onnx.load(str(tmp_path / "blazeface_full.onnx")).graph
    kept = next(n for n in graph.node if n.name == node)
    assert not any(o in kept.input for n in graph.node if n.op_type == "DequantizeLinear" for o in n.output)
    with pytest.raises(FacefuseError) as caught:
        optimize_model(_request("blazeface_full", photos, tmp_path, int8=Int8Options(exclude=("no_such_node",))),
                       store)
    assert caught.value.code is ErrorCode.INVALID_OPTION


def test_files_are_matched_to_a_contract(home, photos, tmp_path):
    store = ModelStore(home)
    copy = tmp_path / "my_detector.onnx"
    shutil.copy(store.ensure("facemesh"), copy)
    with pytest.raises(FacefuseError) as caught:
        optimize_model(_request(str(copy), photos, tmp_path, contract="mobilefacenet"), store)
    assert caught.value.code is ErrorCode.MODEL_MISMATCH
    other = tmp_path / "unknown.onnx"
    model = onnx.load(str(copy))
    model.doc_string = "changed"
    onnx.save(model, str(other))
    with pytest.raises(FacefuseError) as caught:
        optimize_model(_request(str(other), photos, tmp_path), store)
    assert caught.value.code is ErrorCode.INVALID_OPTION and "--contract" in caught.value.hint


def test_int8_without_photos_is_a_usage_error(capsys):
    assert main(["optimize", "blazeface_full", "--precision", "int8", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "INVALID_OPTION"


def test_cli_writes_report(photos, tmp_path, capsys, model_home):
    report_path = tmp_path / "r.json"
    code = main(["optimize", "mobilefacenet", "--precision", "int8", "--calibration", str(photos["calibration"]),
                 "--holdout", str(photos["holdout"]), "--max-images", "12", "--runs", "3",
                 "--output", str(tmp_path / "m.onnx"), "--report", str(report_path)])
    out, err = capsys.readouterr()
    assert report_path.is_file(), (code, out[-2000:], err[-2000:])  # a failed run says why
    saved = json.loads(report_path.read_text())
    # the printed verdict, the saved verdict and the checks agree, and the printed figure is the saved one
    verdict = all(check["passed"] for check in saved["checks"])
    assert code == 0 and saved["passed"] is verdict
    assert f"RESULT: {'PASS' if verdict else 'FAIL'}" in out.splitlines()
    assert f"min_cosine = {saved['metrics']['min_cosine']:.4f}" in out
    assert saved["size_bytes"]["int8"] < saved["size_bytes"]["fp32"]


def test_detection_metric_counts_moved_and_lost_faces():
    box = np.array([0.0, 0.0, 100.0, 100.0])
    ref = [[Detection(box, 0.9, np.zeros((6, 2))), Detection(box + 500, 0.8, np.zeros((6, 2)))]]
    moved = [[Detection(box + [10, 0, 10, 0], 0.7, np.zeros((6, 2)))]]
    metrics, checks = compare_detections(ref, moved, 0.5)
    assert metrics["missed_faces"] == 1 and metrics["mean_iou"] == pytest.approx(90 * 100 / (110 * 100))
    assert metrics["max_score_drift"] == pytest.approx(0.2)
    assert [c.passed for c in checks] == [False, False, False]


def test_image_metric_thresholds():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    slightly = np.clip(image.astype(int) + rng.integers(-2, 3, image.shape), 0, 255).astype(np.uint8)
    metrics, checks = compare_images([image], [slightly])
    assert metrics["min_psnr_db"] > 40 and all(c.passed for c in checks)
    metrics, checks = compare_images([image], [255 - image])
    assert not any(c.passed for c in checks)


def test_entropy_calibration_clips_rare_outliers_that_minmax_keeps(tmp_path: Path):
    """KL calibration (TensorRT's 2048-bin histogram → 128 levels) gives a tighter input range than min/max when a
    few values are far out; with ONNX Runtime's own entropy settings both would be identical."""
    rng = np.random.default_rng(1)
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["y"], ["out"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 16, 16])],
                              [numpy_helper.from_array(rng.normal(size=(4, 1, 3, 3)).astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    feeds = [{"x": rng.normal(size=(1, 1, 16, 16)).astype(np.float32)} for _ in range(32)]
    feeds[3]["x"][0, 0, 0, 0] = 60.0
    scales = {}
    for method in ("minmax", "entropy"):
        quantize_int8(tmp_path / "m.onnx", tmp_path / f"{method}.onnx", feeds, Int8Options(method, keep_heads=False))
        inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / f"{method}.onnx")).graph.initializer}
        scales[method] = float(inits["x_scale"])
    assert scales["minmax"] > 60 / 255 and scales["entropy"] < scales["minmax"] / 4
