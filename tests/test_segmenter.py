"""The face segmenter: real quick training (loss falls, resume is exact), ONNX export parity, the shipped file
verified and loaded through the store and runtime, and its predictions on a real photo with pasted occluders."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from facefuse.analysis.segmentation import FACE_CLASSES, OCCLUDER, SEGMENTER_MODEL, FaceSegmenter
from facefuse.config import RuntimeConfig, StoreConfig
from facefuse.imageio import decode_image
from facefuse.models import ModelRegistry, ModelStore, sha256_of
from facefuse.models.registry import WEIGHTS_DIR
from facefuse.runtime import Runtime
from facefuse_training.segmenter import synth
from facefuse_training.segmenter.labels import label_photo
from facefuse_training.segmenter.metrics import confusion, iou_table


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory, faces_dir: Path):
    """`facefuse train segmenter --quick` up to the ONNX export, for real (labels, training, export, parity)."""
    from facefuse_training.segmenter.cli import quick
    from facefuse_training.segmenter.data import DataConfig
    from facefuse_training.segmenter.run import run_chain
    from facefuse_training.segmenter.train import TrainConfig

    root = tmp_path_factory.mktemp("segmenter")
    # the round-4 options on (hard examples, weighted occluders): the tiny run exercises their code for real
    data, train = quick(DataConfig(faces_dir.parent, root / "cache"),
                        TrainConfig(out=root / "run", progress=False, occluder_weight=3.0, hard_examples=True))
    summary = run_chain(data, train, until="export")
    return data, train, summary


def test_quick_training_lowers_the_loss(quick_run) -> None:
    _, _, summary = quick_run
    assert summary["loss_last"] < summary["loss_first"] - 0.2, summary


def test_resumed_run_takes_exactly_the_uninterrupted_steps(quick_run, tmp_path: Path) -> None:
    import torch

    from facefuse_training.segmenter.data import label_sets
    from facefuse_training.segmenter.train import load_model, train

    data_config, config, _ = quick_run
    data, _ = label_sets(data_config)
    whole = replace(config, out=tmp_path / "whole", steps=6)
    interrupted = replace(config, out=tmp_path / "interrupted", steps=6, stop_at=3)
    train(whole, data)
    assert train(interrupted, data) == []
    assert torch.load(interrupted.checkpoint, weights_only=True)["step"] == 3
    records = train(replace(interrupted, stop_at=None), data)
    assert [r["step"] for r in records] == [4, 5, 6]
    a, b = load_model(whole).state_dict(), load_model(interrupted).state_dict()
    assert all(torch.allclose(a[k].float(), b[k].float(), atol=1e-6) for k in a)


def test_onnx_export_matches_pytorch_with_a_dynamic_batch(quick_run) -> None:
    _, train, summary = quick_run
    assert summary["parity_max_abs_diff"] < 1e-4
    segmenter = FaceSegmenter(Runtime(RuntimeConfig(intra_op_threads=1)).session(summary["onnx"]))
    crops = np.random.default_rng(0).integers(0, 256, (3, 128, 128, 3), dtype=np.uint8)
    assert segmenter.logits(crops).shape == (3, 8, 128, 128)
    assert segmenter.logits(crops[:1]).shape == (1, 8, 128, 128)


def test_a_fine_tune_starts_from_exactly_the_exported_model(quick_run, tmp_path: Path) -> None:
    """``--init model.onnx``: the network rebuilt from an exported file (its batch norm folded into biases) computes
    what ONNX Runtime computes, and training continues from there (the shipped segmenter was fine-tuned this way)."""
    from facefuse_training.common.export import check_parity
    from facefuse_training.segmenter.data import label_sets
    from facefuse_training.segmenter.model import from_onnx
    from facefuse_training.segmenter.train import train

    data_config, config, summary = quick_run
    onnx = Path(summary["onnx"])
    rebuilt = from_onnx(onnx, config.widths, config.full).eval()
    rng = np.random.default_rng(1)
    assert check_parity(rebuilt, onnx, [rng.random((2, 3, 128, 128), dtype=np.float32)]).ok(1e-4)
    data, _ = label_sets(data_config)
    records = train(replace(config, out=tmp_path / "tuned", init=onnx, steps=3, warmup=1), data)
    assert [r["step"] for r in records] == [1, 2, 3]
    assert records[0]["loss"] < summary["loss_first"] - 0.1, (records[0], summary)  # trained, not from scratch


def test_shipped_model_is_verified_and_loads_through_the_runtime(tmp_path: Path) -> None:
    entry = ModelRegistry().get(SEGMENTER_MODEL)
    assert entry.task.value == "segmenter" and not entry.commercial_use
    store = ModelStore(StoreConfig(home=tmp_path, mirror=None, offline=True))
    path = store.ensure(SEGMENTER_MODEL)
    assert path == WEIGHTS_DIR / "face_segmenter.onnx" and sha256_of(path) == entry.sha256
    assert path.stat().st_size <= 3_000_000 and (WEIGHTS_DIR / "face_segmenter.md").is_file()
    segmenter = FaceSegmenter(Runtime(RuntimeConfig(intra_op_threads=1)).session(path))
    assert segmenter.logits(np.zeros((2, 128, 128, 3), np.uint8)).shape == (2, 8, 128, 128)


@pytest.fixture(scope="module")
def obama_crop(fuser, faces_dir: Path):
    """The contract's 128 px crop of a real photo, with FaceMesh's own labels and mesh in crop pixels."""
    analysis = fuser.analyze((faces_dir / "face_recognition/obama.jpg").read_bytes())
    face = analysis.faces[0]
    return label_photo(analysis.image, face.keypoints, face.landmarks)


@pytest.fixture(scope="module")
def shipped(fuser) -> FaceSegmenter:
    return FaceSegmenter(fuser.runtime.session(fuser.store.ensure(SEGMENTER_MODEL)))


def test_shipped_model_parses_a_real_face(shipped: FaceSegmenter, obama_crop) -> None:
    predicted = shipped.logits(obama_crop.image[None])[0].argmax(0)
    table = iou_table(confusion(predicted, obama_crop.labels))
    assert table["face"] >= 0.85 and table["eyes"] >= 0.6 and table["lips"] >= 0.65, table


# IoU floors about 0.1 under what the shipped model scores (0.77, 0.84, 0.68): a retrained model that loses
# occlusion handling fails here; frames of clear glasses are thin, hence the lower floor.
OCCLUDER_FLOORS = {"mask": 0.65, "hand": 0.7, "glasses": 0.55}


@pytest.mark.parametrize("occluder", ["mask", "hand", "glasses"])
def test_shipped_model_finds_a_pasted_occluder(shipped: FaceSegmenter, obama_crop, occluder: str,
                                               faces_dir: Path) -> None:
    """A real photo with an occluder of known mask pasted on: a real mask texture (insightface's photo of a mask
    alone, placed from FaceMesh), a hand-like shape, glasses."""
    rng = np.random.default_rng(3)
    image = obama_crop.image.astype(np.float32)
    labels = obama_crop.labels.copy()
    if occluder == "mask":
        texture = decode_image((faces_dir / "insightface/samples/mask_blue.jpg").read_bytes()).pixels
        synth.add_mask(rng, image, labels, obama_crop.mesh, texture=texture)
    elif occluder == "hand":
        synth.add_hand(rng, image, labels, obama_crop.mesh, np.array([200.0, 160.0, 130.0]))
    else:
        synth.add_glasses(rng, image, labels, obama_crop.mesh)
    truth = labels == OCCLUDER
    assert truth.sum() > 50
    predicted = shipped.logits(image.astype(np.uint8)[None])[0].argmax(0)
    hit = predicted == OCCLUDER
    iou = (hit & truth).sum() / (hit | truth).sum()
    assert iou >= OCCLUDER_FLOORS[occluder], iou
    visible_face = np.isin(labels, FACE_CLASSES)
    assert np.isin(predicted[visible_face], FACE_CLASSES).mean() >= 0.8


def test_a_quick_model_is_never_shipped(capsys: pytest.CaptureFixture[str]) -> None:
    from facefuse.cli import main

    before = sha256_of(WEIGHTS_DIR / "face_segmenter.onnx")
    assert main(["train", "segmenter", "--quick", "--until", "ship"]) == 2
    assert "INVALID_OPTION" in capsys.readouterr().err
    assert sha256_of(WEIGHTS_DIR / "face_segmenter.onnx") == before


def test_hard_negatives_change_the_face_but_not_its_labels(obama_crop) -> None:
    """Side shadow, beard, make-up and dark brows are the face's own looks: the pixels change, the labels do not
    (a segmenter that called them occluders kept the target's beard and shadow on the new face, issue 17)."""
    face = np.isin(obama_crop.labels, FACE_CLASSES)
    for seed, draw in enumerate((synth.add_beard, synth.add_makeup, synth.add_dark_features)):
        image = obama_crop.image.astype(np.float32)
        labels = obama_crop.labels.copy()
        draw(np.random.default_rng(seed), image, labels, obama_crop.mesh)
        assert np.array_equal(labels, obama_crop.labels), draw.__name__
        assert np.abs(image - obama_crop.image)[face].mean() > 1.0, draw.__name__
    image = obama_crop.image.astype(np.float32)
    synth.add_side_shadow(np.random.default_rng(0), image, obama_crop.mesh)
    darker = image.mean(-1) < obama_crop.image.mean(-1) * 0.8
    assert 0.1 < darker[face].mean() < 0.95  # one side darkened, not the whole face


@pytest.mark.parametrize("draw", [synth.add_bar, synth.add_finger, synth.add_stub])
def test_bars_fingers_and_stubs_are_occluders_in_front_of_the_face(obama_crop, draw) -> None:
    skin = np.median(obama_crop.image[obama_crop.labels == 1], 0).astype(np.float32)
    for seed in range(4):
        image = obama_crop.image.astype(np.float32)
        labels = obama_crop.labels.copy()
        draw(np.random.default_rng(seed), image, labels, obama_crop.mesh, skin)
        covered = (labels == OCCLUDER) & np.isin(obama_crop.labels, FACE_CLASSES)
        assert covered.sum() >= 10, (draw.__name__, seed)
        assert np.abs(image - obama_crop.image)[labels == OCCLUDER].mean() > 3.0


def test_stubs_start_and_end_on_the_face(obama_crop) -> None:
    """The short positives (issue 17) lie on the face, unlike the bars and fingers that leave it: every occluder
    pixel of a stub is inside the face's box, and they come in more than one length and angle."""
    from facefuse_training.segmenter.synth import _face_frame

    skin = np.median(obama_crop.image[obama_crop.labels == 1], 0).astype(np.float32)
    _, left, right, top, bottom = _face_frame(obama_crop.mesh)
    extents = set()
    for seed in range(8):
        labels = obama_crop.labels.copy()
        synth.add_stub(np.random.default_rng(seed), obama_crop.image.astype(np.float32), labels, obama_crop.mesh, skin)
        ys, xs = np.nonzero(labels == OCCLUDER)
        assert xs.min() >= left - 1 and xs.max() <= right + 1 and ys.min() >= top - 1 and ys.max() <= bottom + 1
        extents.add((int(np.ptp(xs)) // 4, int(np.ptp(ys)) // 4))
    assert len(extents) >= 4, extents
    # only the hard recipe draws them: the shipped one (make train-segmenter) keeps its kinds and shares
    assert "stub" in synth.HARD_KINDS and "stub" not in synth.KINDS and sum(synth.HARD_SHARES) == pytest.approx(1)


def test_the_occluder_weight_counts_missed_occluder_pixels_more() -> None:
    import torch

    from facefuse_training.segmenter.train import loss_fn

    labels = torch.full((1, 16, 16), 1, dtype=torch.long)
    labels[0, 7:9] = OCCLUDER
    logits = torch.zeros(1, 8, 16, 16)
    logits[:, 1] = 4.0  # skin everywhere: the bar is missed
    plain, weighted = loss_fn(logits, labels, 0.0), loss_fn(logits, labels, 0.0, occluder_weight=3.0)
    missed = float(torch.nn.functional.cross_entropy(logits, labels, reduction="none")[labels == OCCLUDER].sum())
    assert float(weighted - plain) == pytest.approx(2 * missed / labels.numel(), rel=1e-5)


def test_the_export_takes_the_occluder_weight_back_out_of_the_probabilities(quick_run) -> None:
    """Trained with occluder pixels ×3, the exported model's occluder logit is lower by exactly log 3 than the
    trained network's, every other logit unchanged: the weighted loss inflates the occluder's odds by 3 and the
    segment stage's 0.35 floor assumes calibrated probabilities."""
    import torch

    from facefuse_training.segmenter.train import calibrated, load_model

    _, config, summary = quick_run
    assert config.occluder_weight == 3.0
    crops = np.random.default_rng(2).integers(0, 256, (2, 128, 128, 3), dtype=np.uint8)
    exported = FaceSegmenter(Runtime(RuntimeConfig(intra_op_threads=1)).session(summary["onnx"])).logits(crops)
    with torch.no_grad():
        trained = load_model(config)(torch.from_numpy(crops.transpose(0, 3, 1, 2).astype(np.float32) / 255)).numpy()
    shift = trained - exported
    assert np.allclose(shift[:, OCCLUDER], np.log(3.0), atol=1e-4)
    assert np.abs(np.delete(shift, OCCLUDER, axis=1)).max() < 1e-4
    assert calibrated(load_model(config), 1.0).head[-1].bias[OCCLUDER] == load_model(config).head[-1].bias[OCCLUDER]


def test_a_tight_photos_crop_mirrors_the_photo_past_its_edges(obama_crop) -> None:
    """Inference's aligned crop reflects the photo past its edges (a still the face fills: its chin upside down over
    its forehead); the photo-edge samples show the network exactly that, and ask nothing of it outside the photo."""
    image = obama_crop.image.astype(np.float32)
    photo_labels = np.where(obama_crop.labels == synth.IGNORE, synth.BACKGROUND, obama_crop.labels)
    cut_sides = set()
    for seed in range(8):
        cut, labels = synth.past_photo_edges(np.random.default_rng(seed), image, photo_labels, obama_crop.mesh)
        known = labels != synth.IGNORE
        ys, xs = np.nonzero(known)
        y0, y1, x0, x1 = ys.min(), ys.max() + 1, xs.min(), xs.max() + 1
        assert known.sum() == (y1 - y0) * (x1 - x0) < known.size  # one rectangle, smaller than the crop
        assert np.array_equal(cut[y0:y1, x0:x1], image[y0:y1, x0:x1])
        assert np.array_equal(labels[known], photo_labels[y0:y1, x0:x1].ravel())
        if y0 > 1:  # the row above the edge is the row below it (reflect-101: the edge row itself once)
            assert np.array_equal(cut[y0 - 1, x0:x1], image[y0 + 1, x0:x1])
            cut_sides.add("top")
        if x1 < synth.SIZE - 1:
            assert np.array_equal(cut[y0:y1, x1], image[y0:y1, x1 - 2])
            cut_sides.add("right")
    assert cut_sides == {"top", "right"}
