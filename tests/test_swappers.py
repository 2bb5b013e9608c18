"""Swapper engines on small ONNX models built here with the published swappers' exact input/output signatures.

Each stand-in model computes ``output = 0.5 × target + Σ(source × W)``, so the test can recompute, from the
issue's contract table written out below (not from the library's own tables), every step: the alignment crop,
the target normalisation, the source identity transform (emap / converter / source crop) and the output
de-normalisation. The real weights cannot be downloaded here; what these tests prove is the plumbing around them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import cv2
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from facefuse.analysis.analyzer import FaceAnalyzer
from facefuse.config import StoreConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.recognizer import RECOGNIZERS, Recognizer, l2_normalise
from facefuse.fusion.swappers import SwapperFiles, make_swapper
from facefuse.imageio import decode_image
from facefuse.models import ModelStore
from facefuse.optimize.calibration import RecordingSession
from facefuse.runtime import Runtime

RNG = np.random.default_rng(7)
ARCFACE = np.array([[38.2946, 51.6963], [73.5318, 51.5014], [56.0252, 71.7366], [41.5493, 92.3655],
                    [70.7299, 92.2041]])
TEMPLATES = {  # FaceFusion's published warp templates (normalised), and InsightFace's arcface_dst
    "arcface-112": ARCFACE / 112,
    "arcface-112-v1": np.array([[0.35473214, 0.45658929], [0.64526786, 0.45658929], [0.5, 0.61154464],
                                [0.37913393, 0.776875], [0.62086607, 0.776875]]),
    "arcface-128": np.array([[0.36167656, 0.40387734], [0.63696719, 0.40235469], [0.50019687, 0.56044219],
                             [0.38710391, 0.72160547], [0.61507734, 0.72034453]]),
    "ffhq-512": np.array([[0.37691676, 0.46864664], [0.62285697, 0.46912813], [0.50123859, 0.61331904],
                          [0.39308822, 0.725411], [0.61150205, 0.72490465]]),
}
IMAGENET = (np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225]))
HALF = (np.array([0.5] * 3), np.array([0.5] * 3))
UNIT = (np.zeros(3), np.ones(3))
# engine: (template, size, target (mean, std), output (mean, std), identity, source template/size)
CONTRACT = {
    "inswapper_128": ("arcface-128", 128, UNIT, UNIT, "emap", None),
    "hyperswap_1a_256": ("arcface-128", 256, HALF, HALF, "arcface", None),
    "simswap_256": ("arcface-112-v1", 256, IMAGENET, UNIT, "converted", None),
    "simswap_unofficial_512": ("arcface-112-v1", 512, UNIT, UNIT, "converted", None),
    "ghost_2_256": ("arcface-112-v1", 256, HALF, HALF, "converted_raw", None),
    "blendswap_256": ("ffhq-512", 256, UNIT, UNIT, "image", ("arcface-112", 112)),
    "uniface_256": ("ffhq-512", 256, HALF, HALF, "image", ("ffhq-512", 256)),
}
R = RNG.normal(size=(3, 512)).astype(np.float32)  # stand-in recognizer: channel means @ R
C = RNG.normal(size=(512, 512)).astype(np.float32) / 20  # stand-in converter
EMAP = RNG.normal(size=(512, 512)).astype(np.float32) / 20



def render(engine, source, image, face, options):
    """What the align and render stages do with an engine: the crop it asks for, warped once, then its render."""
    from facefuse.geometry.align import aligned_crop

    matrix, size = engine.crop_matrix(face, options)
    return engine.render(source, aligned_crop(image, matrix, size), matrix, face, options)

def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def swapper_model(path: Path, size: int, source_shape: tuple[int, ...], batch: str | int = 1,
                  emap: bool = False) -> tuple[Path, np.ndarray]:
    weights = (RNG.normal(size=source_shape) / np.sqrt(np.prod(source_shape))).astype(np.float32)
    nodes = [
        helper.make_node("Mul", ["source", "W"], ["sw"]),
        helper.make_node("ReduceSum", ["sw", "axes"], ["s"], keepdims=1),
        helper.make_node("Reshape", ["s", "shape"], ["s4"]),
        helper.make_node("Mul", ["target", "half"], ["t"]),
        helper.make_node("Add", ["t", "s4"], ["output"]),
    ]
    inits = [numpy_helper.from_array(weights, "W"),
             numpy_helper.from_array(np.arange(1, len(source_shape) + 1, dtype=np.int64), "axes"),
             numpy_helper.from_array(np.array([-1, 1, 1, 1], dtype=np.int64), "shape"),
             numpy_helper.from_array(np.array(0.5, dtype=np.float32), "half")]
    if emap:
        inits.append(numpy_helper.from_array(EMAP, "emap"))  # unused by the graph, last: as in inswapper_128
    graph = helper.make_graph(
        nodes, "swapper",
        [helper.make_tensor_value_info("target", TensorProto.FLOAT, [batch, 3, size, size]),
         helper.make_tensor_value_info("source", TensorProto.FLOAT, [batch, *source_shape])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 3, size, size])], inits)
    return _save(graph, path), weights


def recognizer_model(path: Path) -> Path:
    nodes = [helper.make_node("GlobalAveragePool", ["input.1"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "R"], ["683"])]
    graph = helper.make_graph(nodes, "recognizer",
                              [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, ["N", 3, 112, 112])],
                              [helper.make_tensor_value_info("683", TensorProto.FLOAT, ["N", 512])],
                              [numpy_helper.from_array(R, "R")])
    return _save(graph, path)


def converter_model(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("MatMul", ["input", "C"], ["output"])], "converter",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 512])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 512])],
                              [numpy_helper.from_array(C, "C")])
    return _save(graph, path)


def expected_matrix(points: np.ndarray, template: str, size: int) -> np.ndarray:
    matrix, _ = cv2.estimateAffinePartial2D(points.astype(np.float32), (TEMPLATES[template] * size).astype(np.float32),
                                            method=cv2.RANSAC, ransacReprojThreshold=100)
    return matrix


def normalise(crop: np.ndarray, norm: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return ((crop / 255.0 - norm[0]) / norm[1]).transpose(2, 0, 1)[None]


@pytest.fixture(scope="module")
def analysed(store_config, faces_dir):
    analyzer = FaceAnalyzer(ModelStore(store_config), Runtime())
    out = {}
    for name in ("obama.jpg", "biden.jpg", "two_people.jpg"):
        image = decode_image(faces_dir / "face_recognition" / name).pixels
        out[name] = (image, analyzer.analyze(image).faces)
    return out


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("swappers")
    return {"recognizer": recognizer_model(folder / "arcface.onnx"),
            "converter": converter_model(folder / "crossface.onnx"), "folder": folder}


def _engine(name: str, model: Path, parts, store_config, allow_unknown: bool = True):
    files = SwapperFiles(model, parts["recognizer"], parts["converter"], allow_unknown)
    return make_swapper(name, ModelStore(store_config), Runtime(), files)


@pytest.mark.parametrize("name", list(CONTRACT))
def test_every_pixel_transform_follows_the_contract(name, parts, analysed, store_config):
    template, size, target_norm, output_norm, identity, source_crop = CONTRACT[name]
    source_shape = (3, source_crop[1], source_crop[1]) if source_crop else (512,)
    model, weights = swapper_model(parts["folder"] / f"{name}.onnx", size, source_shape, emap=identity == "emap")
    engine = _engine(name, model, parts, store_config)
    source_image, (source_face, *_) = analysed["obama.jpg"]
    target_image, (target_face, *_) = analysed["biden.jpg"]

    # source identity
    prepared = engine.prepare_source(source_image, source_face)
    if source_crop:
        s_matrix = expected_matrix(source_face.keypoints, *source_crop)
        s_crop = cv2.warpAffine(source_image, s_matrix, (source_crop[1],) * 2, flags=cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_REFLECT101)
        expected_source = normalise(s_crop, UNIT)
        np.testing.assert_allclose(prepared.payload["source"], expected_source, atol=0.02)
    else:
        a_matrix = expected_matrix(source_face.keypoints, "arcface-112", 112)
        a_crop = cv2.warpAffine(source_image, a_matrix, (112, 112), flags=cv2.INTER_LINEAR,
                                borderMode=cv2.BORDER_REFLECT101)
        raw = normalise(a_crop, HALF).mean(axis=(2, 3)) @ R
        unit = lambda v: v / np.linalg.norm(v)  # noqa: E731
        expected_source = {"emap": lambda: unit(unit(raw) @ EMAP), "arcface": lambda: unit(raw),
                           "converted": lambda: unit(raw @ C), "converted_raw": lambda: raw @ C}[identity]()
        np.testing.assert_allclose(prepared.payload["source"], expected_source, rtol=0.02, atol=2e-3)

    # target alignment, normalisation, model, de-normalisation
    rendered = render(engine, prepared, target_image, target_face, FusionOptions(engine=name))
    np.testing.assert_allclose(rendered.matrix, expected_matrix(target_face.keypoints, template, size), atol=1e-3)
    crop = cv2.warpAffine(target_image, rendered.matrix, (size, size), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_REFLECT101)
    assert np.array_equal(rendered.target_crop, crop)
    shift = float((prepared.payload["source"] * weights).sum())
    output = normalise(crop, target_norm)[0] * 0.5 + shift
    expected = np.clip(np.rint((output.transpose(1, 2, 0) * output_norm[1] + output_norm[0]) * 255), 0, 255)
    assert np.abs(rendered.crop.astype(int) - expected.astype(int)).max() <= 1
    assert rendered.crop.shape == (size, size, 3) and rendered.mask.shape == (size, size)
    # the mask covers the face, not the corners; the target's mouth interior and eyes are kept
    assert rendered.mask[size // 2, size // 2] > 0.5 and rendered.mask[0, 0] == 0
    assert rendered.keep_target is not None and rendered.keep_target.max() > 0.5


def test_batch_of_faces_is_one_run_with_the_same_result(parts, analysed, store_config):
    model, _ = swapper_model(parts["folder"] / "hyper_batch.onnx", 256, (512,), batch="N")
    engine = _engine("hyperswap_1a_256", model, parts, store_config)
    source = engine.prepare_source(*[analysed["obama.jpg"][0], analysed["obama.jpg"][1][0]])
    image, faces = analysed["two_people.jpg"]
    assert len(faces) == 2
    single = [render(engine, source, image, f, FusionOptions()) for f in faces]
    recorder = RecordingSession(engine.session)
    engine.session = recorder
    batched = engine.swap(source.payload["source"], np.stack([one.target_crop for one in single]))
    assert len(recorder.feeds) == 1 and recorder.feeds[0]["target"].shape[0] == 2
    for one, many in zip(single, batched):
        assert np.array_equal(one.crop, many)


def test_a_file_with_another_signature_is_refused(parts, store_config):
    model, _ = swapper_model(parts["folder"] / "looks_like_inswapper.onnx", 128, (512,), emap=True)
    with pytest.raises(FacefuseError) as caught:
        _engine("hyperswap_1a_256", model, parts, store_config)
    assert caught.value.code is ErrorCode.MODEL_MISMATCH
    assert "inswapper_128" in caught.value.details["fits"]


def test_inswapper_without_emap_is_refused(parts, store_config):
    model, _ = swapper_model(parts["folder"] / "no_emap.onnx", 128, (512,), emap=False)
    with pytest.raises(FacefuseError) as caught:
        _engine("inswapper_128", model, parts, store_config)
    assert caught.value.code is ErrorCode.MODEL_MISMATCH


def test_unknown_hash_needs_explicit_opt_in(parts, store_config):
    model, _ = swapper_model(parts["folder"] / "unknown.onnx", 256, (512,))
    with pytest.raises(FacefuseError) as caught:
        _engine("hyperswap_1a_256", model, parts, store_config, allow_unknown=False)
    assert caught.value.code is ErrorCode.MODEL_MISMATCH and "--allow-unknown-model" in caught.value.hint


def test_real_recognizer_path_tells_people_apart(analysed, store_config):
    """The ArcFace code path (arcface-112 crop, normalisation, embedding) with MobileFaceNet's real weights."""
    store = ModelStore(store_config)
    recognizer = Recognizer(Runtime().session(store.ensure("mobilefacenet")), RECOGNIZERS["mobilefacenet"])
    obama = l2_normalise(recognizer.embed(analysed["obama.jpg"][0], [analysed["obama.jpg"][1][0].keypoints]))
    biden = l2_normalise(recognizer.embed(analysed["biden.jpg"][0], [analysed["biden.jpg"][1][0].keypoints]))
    image, faces = analysed["two_people.jpg"]
    pair = l2_normalise(recognizer.embed(image, [f.keypoints for f in faces]))
    same = max(float(obama[0] @ p) for p in pair)
    assert same > 0.5 and float((obama @ biden.T).item()) < same - 0.3


def offline_home(tmp_path: Path, model_home: Path, recognizer: Path) -> tuple[Path, Path]:
    """A model home with the pipeline's FP32 models and a mirror holding the stand-in ArcFace, for offline runs."""
    mirror, home = tmp_path / "mirror", tmp_path / "home"
    (home / "models").mkdir(parents=True)
    for f in (model_home / "models").iterdir():
        if f.name.startswith(("blazeface", "facemesh")) and ".int8" not in f.name:
            shutil.copy(f, home / "models" / f.name)
    mirror.mkdir()
    shutil.copy(recognizer, mirror / "arcface_w600k_r50.onnx")
    return home, mirror


def test_full_fusion_through_the_pipeline(parts, store_config, model_home, faces_dir, tmp_path):
    """`Fuser.fuse(engine=...)` with stand-in files put in a mirror, as a user's mirror folder would hold them."""
    from facefuse.pipeline import Fuser, FuserConfig

    home, mirror = offline_home(tmp_path, model_home, parts["recognizer"])
    swapper_model(mirror / "hyperswap_1a_256.onnx", 256, (512,))
    fuser = Fuser(FuserConfig(store=StoreConfig(home=home, mirror=mirror, offline=True)))
    source = faces_dir / "face_recognition" / "obama.jpg"
    target = faces_dir / "face_recognition" / "biden.jpg"
    result = fuser.fuse(source, target, FusionOptions(engine="hyperswap_1a_256", visible_label=False))
    original = decode_image(target).pixels
    changed = np.any(result.image != original, axis=2)
    box = fuser.analyze(target).faces[0].box.astype(int)
    inside = changed[box[1]:box[1] + box[3], box[0]:box[0] + box[2]].mean()
    assert inside > 0.3 and changed.mean() < 0.5 * inside


def test_cli_model_path_is_checked_before_anything_runs(parts, faces_dir, capsys):
    import json

    from facefuse.cli import main

    model, _ = swapper_model(parts["folder"] / "cli_hyper.onnx", 256, (512,))
    photos = faces_dir / "face_recognition"
    args = ["fuse", "--source", str(photos / "obama.jpg"), "--target", str(photos / "biden.jpg"), "--output",
            str(parts["folder"] / "out.png"), "--engine", "inswapper_128", "--model-path", str(model), "--json"]
    assert main(args) == 4
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "MODEL_MISMATCH"  # unknown hash, no opt-in
    assert main([*args, "--allow-unknown-model"]) == 4
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "MODEL_MISMATCH" and "hyperswap_1a_256" in error["details"]["fits"]


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_a_swapper_file_can_be_optimised_and_judged_on_images(precision, parts, model_home, faces_dir, tmp_path):
    """`facefuse optimize FILE --contract hyperswap_1a_256`: swapped crops of held-out faces, PSNR/SSIM vs FP32."""
    from facefuse.optimize import OptimizeRequest, optimize_model

    home, mirror = offline_home(tmp_path, model_home, parts["recognizer"])
    model, _ = swapper_model(tmp_path / "my_hyperswap.onnx", 256, (512,))
    store = ModelStore(StoreConfig(home=home, mirror=mirror, offline=True))
    report = optimize_model(OptimizeRequest(
        str(model), precision, output=tmp_path / "out.onnx", contract="hyperswap_1a_256",
        calibration=faces_dir / "face_recognition" / "knn_examples" / "train" if precision == "int8" else None,
        holdout=faces_dir / "face_recognition" / "knn_examples" / "test", latency_runs=2), store)
    assert [c.metric for c in report.checks] == ["min_psnr_db", "min_ssim"]
    assert report.metrics["images"] >= 5  # one crop per held-out face
    assert report.passed
    graph = onnx.load(str(tmp_path / "out.onnx")).graph
    if precision == "int8":
        assert any(n.op_type == "QuantizeLinear" for n in graph.node) and report.calibration_images >= 5
    else:
        assert any(i.data_type == TensorProto.FLOAT16 for i in graph.initializer)


def test_half_precision_inputs_are_fed_as_half(parts, analysed, store_config, tmp_path):
    """A swapper exported with float16 inputs/outputs (as some _fp16 files are) gets float16 tensors."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model, _ = swapper_model(tmp_path / "hyper32.onnx", 256, (512,))
    onnx.save(convert_float_to_float16(onnx.load(str(model)), keep_io_types=False), str(tmp_path / "hyper16.onnx"))
    engines = [_engine("hyperswap_1a_256", path, parts, store_config) for path in (model, tmp_path / "hyper16.onnx")]
    assert engines[1].dtypes == {"target": np.float16, "source": np.float16}
    image, (face, *_) = analysed["biden.jpg"]
    crops = [render(e, e.prepare_source(*[analysed["obama.jpg"][0], analysed["obama.jpg"][1][0]]), image, face,
                    FusionOptions()).crop for e in engines]
    assert np.abs(crops[0].astype(int) - crops[1].astype(int)).max() <= 2


def test_engine_without_its_identity_models_is_refused(parts, tmp_path):
    from facefuse.fusion.swappers import SwapperEngine

    model, _ = swapper_model(tmp_path / "hyper.onnx", 256, (512,))
    with pytest.raises(FacefuseError) as caught:
        SwapperEngine("hyperswap_1a_256", Runtime().session(model))
    assert caught.value.code is ErrorCode.MODEL_MISSING


def test_registered_swappers_keep_the_published_contract_and_their_hashes_are_enforced(tmp_path):
    """Each swapper's registry entry against the contract table above (not the library's own table), and the store
    refusing a file under a swapper's name whose SHA-256 is not the published one: a registry entry that lost its
    size, its release URL or its hash fails here."""
    from facefuse.fusion.engine_table import ENGINES
    from facefuse.models.registry import ModelRegistry, Task

    registered = {e.name: e for e in ModelRegistry() if e.task is Task.SWAPPER}
    assert set(CONTRACT) <= set(registered) and set(registered) <= set(ENGINES)
    for name, (_, size, *_) in CONTRACT.items():
        entry = registered[name]
        assert entry.input.shape == (1, 3, size, size) and not entry.commercial_use
        assert entry.source.describe().startswith("https://github.com/facefusion/facefusion-assets/releases/download/")
        assert entry.source.describe().endswith(f"/{name}.onnx")
    hashed = [e for e in registered.values() if e.sha256]
    assert {"inswapper_128", "inswapper_128_fp16"} <= {e.name for e in hashed}
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for entry in hashed:
        (mirror / entry.filename).write_bytes(b"not the published weights")
    store = ModelStore(StoreConfig(home=tmp_path / "home", mirror=mirror, offline=True))
    for entry in hashed:
        with pytest.raises(FacefuseError) as caught:
            store.ensure(entry.name)
        assert caught.value.code is ErrorCode.MODEL_CORRUPT and caught.value.details["expected"] == entry.sha256
