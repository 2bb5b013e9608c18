"""Restorer training for real on a tiny configuration: teacher, iterative pruning, distillation, ONNX export with
parity, and INT8 through `facefuse optimize` (needs the 'train' extra: PyTorch and torch-pruning)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import cv2
import numpy as np
import onnxruntime as ort
import pytest
import torch

from facefuse.cli import main
from facefuse_training.common.loop import LoopSpec, train_loop
from facefuse_training.common.seeding import seed_everything, step_rng
from facefuse_training.restorer.adversarial import (PatchDiscriminator, adversarial_step, discriminator_loss,
                                                   generator_loss)
from facefuse_training.restorer.config import RestorerConfig
from facefuse_training.restorer.degrade import DegradeConfig, blur_kernel, degrade
from facefuse_training.restorer.evaluate import bicubic, bucket_gains
from facefuse_training.restorer.losses import fourier_amplitude_l1
from facefuse_training.restorer.model import UNet, UNetConfig
from facefuse_training.restorer.student import step_ratio
from facefuse_training.restorer.teacher import train_teacher


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`facefuse train restorer --quick`, the way a user runs it."""
    out = tmp_path_factory.mktemp("restorer")
    assert main(["train", "restorer", "--quick", "--out", str(out), "--no-progress"]) == 0
    return out


def test_every_stage_leaves_its_file(quick_run: Path):
    for name in ("teacher.pt", "pruned_1.pt", "pruned_2.pt", "pruned.pt", "pruned_ft.pt", "student.pt",
                 "restorer.onnx", "restorer.md", "summary.json", "train.log.jsonl"):
        assert (quick_run / name).is_file(), name
    records = [json.loads(line) for line in (quick_run / "train.log.jsonl").read_text().splitlines()]
    assert {r["stage"] for r in records} >= {"teacher", "prune1", "prune2", "student", "pruned_ft"}
    assert all(np.isfinite(r["loss"]) for r in records)


def test_student_is_pruned_to_the_goals(quick_run: Path):
    summary = json.loads((quick_run / "summary.json").read_text())
    teacher, student = summary["costs"]["teacher"], summary["costs"]["student"]
    assert student["params"] <= 0.4 * teacher["params"]      # ≥ 60 % fewer parameters
    assert student["macs_256"] <= teacher["macs_256"] / 3    # ≤ 1/3 of the FLOPs
    assert summary["costs"]["pruned"] == student             # distillation keeps the pruned structure


def test_report_fields(quick_run: Path):
    holdout = json.loads((quick_run / "summary.json").read_text())["holdout"]
    assert {"degraded input", "bicubic + unsharp", "teacher", "pruned", "pruned_ft", "student"} <= set(holdout)
    for name in ("pruned", "pruned_ft", "student"):
        assert {"psnr_db", "ssim", "fidelity_psnr_db", "fidelity_ssim"} <= set(holdout[name])
        assert 0 < holdout[name]["ssim"] <= 1 and holdout[name]["psnr_db"] > 10
    buckets = holdout["by_face_px"]
    assert sum(row["count"] for row in buckets.values()) == holdout["images"]["count"]
    assert all({"teacher", "student", "bicubic_db"} <= set(row) for row in buckets.values())


def test_onnx_matches_pytorch_at_any_batch_and_size(quick_run: Path):
    student = torch.load(quick_run / "student.pt", weights_only=False).eval()
    session = ort.InferenceSession(str(quick_run / "restorer.onnx"), providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 32, 32), (3, 3, 48, 80)]:
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        got = session.run(None, {"input": x})[0]
        with torch.no_grad():
            expected = student(torch.from_numpy(x)).numpy()
        assert got.shape == shape
        assert np.abs(got - expected).max() < 1e-4
    assert json.loads((quick_run / "summary.json").read_text())["parity_max_abs_diff"] < 1e-4


def test_int8_through_facefuse_optimize(quick_run: Path, faces_dir: Path, tmp_path: Path, capsys):
    report_path = tmp_path / "report.json"
    code = main(["optimize", str(quick_run / "restorer.onnx"), "--contract", "restorer", "--precision", "int8",
                 "--calibration", str(faces_dir / "face-api-js"), "--max-images", "10", "--runs", "3",
                 "--output", str(tmp_path / "r.int8.onnx"), "--report", str(report_path)])
    assert code in (0, 1)  # the report decides pass/fail; a tiny model may miss the limits
    report = json.loads(report_path.read_text())
    assert {"min_psnr_db", "mean_psnr_db", "min_ssim", "mean_ssim"} <= set(report["metrics"])
    assert report["precision"] == "int8" and (tmp_path / "r.int8.onnx").is_file()


def test_resumed_training_equals_uninterrupted(tmp_path: Path):
    """4 steps, stop, 2 more from the checkpoint == 6 steps in one go (same batches, same optimiser state)."""
    def fresh() -> UNet:
        seed_everything(3)
        return UNet(UNetConfig(base=4, levels=2))

    def loss_for(model: UNet):
        def loss_at(step: int):
            x = torch.from_numpy(step_rng(7, step).random((2, 3, 16, 16), dtype=np.float32))
            return (model(x) - x.flip(-1)).abs().mean(), {}
        return loss_at

    straight = fresh()
    train_loop({"m": straight}, straight.parameters(), loss_for(straight), LoopSpec(steps=6, progress=False))
    ckpt = tmp_path / "m.ckpt"
    first = fresh()
    train_loop({"m": first}, first.parameters(), loss_for(first), LoopSpec(steps=4, checkpoint=ckpt, progress=False))
    resumed = fresh()  # a new process: weights from the checkpoint, not from memory
    train_loop({"m": resumed}, resumed.parameters(), loss_for(resumed),
               LoopSpec(steps=6, checkpoint=ckpt, progress=False))
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_grad_checkpoint_gives_the_same_gradients():
    seed_everything(0)
    model = UNet(UNetConfig(base=4, levels=3)).train()
    x = torch.rand(2, 3, 32, 32)
    grads = []
    for flag in (False, True):
        model.grad_checkpoint = flag
        model.zero_grad()
        model(x).square().mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        assert torch.allclose(a, b, atol=1e-6)


def test_iterative_ratios_reach_the_total():
    kept = 1.0
    for k in (1, 2, 3):
        kept *= 1 - step_ratio(0.5, 3, k)
        assert kept == pytest.approx(1 - 0.5 * k / 3)


def test_degradation_covers_what_users_send(faces_dir: Path):
    """Faces 32–128 px, blur σ ≤ 3, JPEG 15–70, noise ≤ 15; no colour jitter: the degraded face keeps the clean
    face's mean colour (within what JPEG and noise move)."""
    config = DegradeConfig(size=128)
    assert config.kernel_size >= 2 * 3 * config.blur_sigma[1] + 1
    assert blur_kernel(np.random.default_rng(0), config)[0].sum() == pytest.approx(1.0, abs=1e-5)
    first = min((faces_dir.parent / "train" / "utkface" / "images").iterdir())
    face = cv2.resize(cv2.imread(str(first))[:, :, ::-1], (128, 128))
    a, b = degrade(face, np.random.default_rng(5), config), degrade(face, np.random.default_rng(5), config)
    assert np.array_equal(a.lq, b.lq), "the same generator gives the same degradation"
    assert a.lq.shape == a.gt.shape == (128, 128, 3) and a.lq.dtype == np.float32
    pairs = [degrade(face, np.random.default_rng(s), config) for s in range(60)]
    sides = [p.small.shape[0] for p in pairs]
    assert 32 <= min(sides) < 48 and max(sides) == 128
    for p in pairs:
        assert 0 <= p.lq.min() and p.lq.max() <= 1 and not np.array_equal(p.lq, p.gt)
        assert np.abs(p.lq.mean(axis=(0, 1)) - p.gt.mean(axis=(0, 1))).max() < 0.03
        # what was done is recorded, for the per-bucket report
        assert p.side == p.small.shape[0] and 15 <= p.quality <= 70 and 0 <= p.blur <= 3.0
    assert 0 < sum(p.blur > 0 for p in pairs) < len(pairs)


def test_bucket_report_splits_by_face_size(faces_dir: Path):
    """Every pair lands in one face-size bucket; an output equal to bicubic gains 0 dB there, the truth gains more."""
    first = min((faces_dir.parent / "train" / "utkface" / "images").iterdir())
    face = cv2.resize(cv2.imread(str(first))[:, :, ::-1], (128, 128))
    pairs = [degrade(face, np.random.default_rng(s), DegradeConfig()) for s in range(30)]
    plain = [bicubic(p.small, 128) for p in pairs]
    report = bucket_gains(pairs, {"bicubic again": plain, "truth-ish": [0.5 * (b + p.gt) for b, p in zip(plain, pairs)]},
                          128)
    assert sum(row["count"] for row in report.values()) == len(pairs)
    for row in report.values():
        assert row["bicubic again"] == pytest.approx(0.0, abs=1e-9) and row["truth-ish"] > 0


def _tiny_config(out: Path, **changes) -> RestorerConfig:
    return replace(RestorerConfig(out=out).quick(), progress=False, **changes)


def _faces(n: int = 6, size: int = 64) -> np.ndarray:
    """Smooth random 'faces' (a blurred noise field): training data without the dataset."""
    rng = np.random.default_rng(0)
    return np.stack([cv2.GaussianBlur(rng.integers(0, 256, (size, size, 3)).astype(np.uint8), (0, 0), 2)
                     for _ in range(n)])


def test_teacher_continues_from_given_weights(tmp_path: Path):
    """--teacher-init: the continuation starts from the earlier teacher's weights (0 steps: it *is* that teacher)."""
    seed_everything(11)
    earlier = UNet(UNetConfig(base=8, levels=3))
    torch.nn.init.normal_(earlier.head.weight, std=0.01)
    torch.save(earlier, tmp_path / "earlier.pt")
    (tmp_path / "run").mkdir()
    config = _tiny_config(tmp_path / "run", teacher_init=tmp_path / "earlier.pt", teacher_steps=0)
    continued = torch.load(train_teacher(config, _faces()), weights_only=False)
    for a, b in zip(earlier.state_dict().values(), continued.state_dict().values()):
        assert torch.equal(a, b)


def test_adversarial_term_is_logged_and_checkpointed(tmp_path: Path):
    config = _tiny_config(tmp_path, teacher_steps=3, adversarial_weight=0.05)
    train_teacher(config, _faces())
    records = [json.loads(line) for line in (tmp_path / "train.log.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["g_adv"]) and np.isfinite(r["d_loss"]) for r in records)
    state = torch.load(tmp_path / "teacher.ckpt", weights_only=True)
    assert set(state["modules"]) == {"model", "disc"}


def test_fourier_amplitude_term_asks_for_texture_not_its_place(tmp_path: Path):
    """The term is blind to where texture sits (a circularly shifted patch scores 0, where L1 is large) and sees
    texture missing (a blurred patch scores more than the shifted one); a run with it logs it every record."""
    torch.manual_seed(0)
    texture = torch.rand(2, 3, 32, 32)
    shifted = torch.roll(texture, shifts=(5, 7), dims=(2, 3))
    blurred = torch.nn.functional.avg_pool2d(texture, 3, 1, 1, count_include_pad=False)
    assert fourier_amplitude_l1(shifted, texture).item() < 1e-5 < (shifted - texture).abs().mean().item()
    assert fourier_amplitude_l1(blurred, texture).item() > 0.05
    config = _tiny_config(tmp_path, teacher_steps=3, frequency_weight=1.0)
    train_teacher(config, _faces())
    records = [json.loads(line) for line in (tmp_path / "train.log.jsonl").read_text().splitlines()]
    assert records and all(r["fft_amp"] > 0 for r in records)


def test_discriminator_learns_to_tell_smooth_from_textured():
    """The patch discriminator and its LSGAN step work: a few updates separate real texture from a smooth fake,
    and the generator term is then larger for the fake than for real patches."""
    torch.manual_seed(0)
    disc = PatchDiscriminator(width=8)
    step = adversarial_step(disc, torch.optim.AdamW(disc.parameters(), lr=2e-3, betas=(0.5, 0.999)))
    real = torch.rand(4, 3, 32, 32)
    fake = torch.full_like(real, 0.5).requires_grad_()
    first = discriminator_loss(disc, real, fake.detach()).item()
    for _ in range(30):
        step(fake, real)
    assert discriminator_loss(disc, real, fake.detach()).item() < 0.5 * first
    assert generator_loss(disc, fake).item() > generator_loss(disc, real).item()


def test_whole_face_patches_train_and_a_bad_patch_side_is_a_usage_error(tmp_path: Path, capsys):
    """--patch: the side of the training patches, up to the whole face (the tiny configuration's 64 px here): the
    sampler hands out whole degraded faces and the teacher trains on them. A side the U-Net
    cannot take or larger than the faces is refused before anything is loaded."""
    from facefuse_training.restorer.data import PatchSampler

    config = _tiny_config(tmp_path, patch=64, teacher_steps=2)
    faces = _faces()
    lq, gt = PatchSampler(faces, config.degrade, config.patch, 3, seed=1)(0)
    assert lq.shape == gt.shape == (3, 3, 64, 64)
    train_teacher(config, faces)
    assert (tmp_path / "teacher.pt").exists()
    for side in ("130", "60", "0"):
        with pytest.raises(SystemExit):
            main(["train", "restorer", "--patch", side, "--out", str(tmp_path / "refused")])
        assert "a patch side is a multiple of 8 from 8 to 128" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
