"""Our face restorer, compressed the article's way, and what it does for fusion.

1. The article-form table: teacher / pruned (fine-tuned, no distillation) / pruned + distilled / INT8 / FP16 —
   parameters, multiply-accumulates, ms per 256×256 crop (ONNX Runtime, 1 thread, interleaved medians), PSNR / SSIM
   against ground truth on the degraded UTKFace hold-out set, fidelity to the teacher, and the effect on fusion
   identity (restore=on with that variant, degraded sources).
2. `facefuse optimize` reports for INT8 and FP16 of the shipped student (PSNR/SSIM vs FP32 on pipeline crops).
3. Degraded-source fusions (face ≤ 64 px wide, Gaussian blur, JPEG 30): identity top-1 (MobileFaceNet judge, as in
   quality.py) and sharpness of the fused face, restore off vs auto.
4. Restore time per face at 720p (source path and target path), FP32 vs INT8 student.
5. `--grad-checkpoint`: peak memory and time of training steps with and without it (fresh processes).

Needs the 'train' extra (the hold-out set is made by the training code). `--run DIR` is the training output
folder (`facefuse train restorer --out DIR`); the shipped student is used for the pipeline sections.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from common import ARTIFACTS, FACES, child_run, machine, median, write_section
from quality import identity_sets

from facefuse.analysis.quality import sharpness
from facefuse.config import AnalysisConfig, RuntimeConfig, StoreConfig
from facefuse.errors import FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.evaluation import IdentityJudge
from facefuse.optimize.report import paired_latency_ms
from facefuse.optimize.workflow import OptimizeRequest, optimize_model
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.restore import RESTORER, RestoreConfig, Restorer

ONE_THREAD = RuntimeConfig(intra_op_threads=1)


def degrade_photo(rgb: np.ndarray, face_box: np.ndarray, face_px: int = 56, quality: int = 30) -> np.ndarray:
    """The benchmark's poor source: scaled so the face is ``face_px`` wide, blurred (σ 1), JPEG ``quality``."""
    scale = min(1.0, face_px / float(face_box[2]))
    small = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small, (0, 0), 1.0)
    ok, buf = cv2.imencode(".jpg", small[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].copy()


def holdout_metrics(sessions: dict[str, object], run: Path, limit: int | None) -> dict[str, dict[str, float]]:
    from facefuse_training.restorer.config import RestorerConfig
    from facefuse_training.restorer.data import holdout_pairs
    from facefuse_training.restorer.evaluate import bicubic_unsharp, psnr_ssim
    from facefuse_training.restorer.teacher import holdout_images

    config = RestorerConfig(out=run, holdout_images=limit)
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    gt = [p.gt for p in pairs]
    out = {"degraded input": psnr_ssim([p.lq for p in pairs], gt),
           "bicubic + unsharp": psnr_ssim([bicubic_unsharp(p.small, config.size) for p in pairs], gt)}
    outputs = {}
    for name, session in sessions.items():
        outputs[name] = [np.clip(session.run(None, {"input": np.ascontiguousarray(p.lq.transpose(2, 0, 1)[None])})[0][0]
                                 .transpose(1, 2, 0), 0, 1) for p in pairs]
        out[name] = psnr_ssim(outputs[name], gt)
        if name != "teacher":
            fid = psnr_ssim(outputs[name], outputs["teacher"])
            out[name] |= {"fidelity_psnr_db": fid["psnr_db"], "fidelity_ssim": fid["ssim"]}
    out["count"] = {"images": len(pairs)}
    return out


def fusion_identity(fuser: Fuser, judge: IdentityJudge, people, options: FusionOptions) -> dict[str, float]:
    """Degraded sources fused onto every other person's clean photo; top-1 identity and fused-face sharpness."""
    refs = {}
    sources = {}
    for name, photo, reference in people:
        ref = fuser.analyze(reference)
        refs[name] = judge.embed(ref.image, max(ref.faces, key=lambda f: f.area))
        clean = fuser.analyze(photo)
        sources[name] = degrade_photo(clean.image, max(clean.faces, key=lambda f: f.area).box)
    names = list(refs)
    gallery = np.stack([refs[n] for n in names])
    top1, cos, sharp, rejected, restored = [], [], [], 0, 0
    for s_name, _, _ in people:
        for t_name, t_photo, _ in people:
            if s_name == t_name:
                continue
            try:
                result = fuser.fuse(sources[s_name], t_photo, options)
            except FacefuseError:
                rejected += 1
                continue
            restored += any(w.startswith("restored the source") for w in result.warnings)
            out = fuser.analyzer.analyze(result.image)
            if not out.faces:
                rejected += 1
                continue
            box = np.array(result.faces[0]["box"])
            face = min(out.faces, key=lambda f: np.abs(f.box - box).sum())
            scores = gallery @ judge.embed(result.image, face)
            top1.append(names[int(np.argmax(scores))] == s_name)
            cos.append(float(scores[names.index(s_name)]))
            sharp.append(sharpness(result.image, face.keypoints))
    return {"pairs": len(top1) + rejected, "fused": len(top1), "rejected": rejected, "restored": restored,
            "top1": 100 * float(np.mean(top1)) if top1 else float("nan"),
            "cos": float(np.mean(cos)) if cos else float("nan"), "sharpness": median(sharp)}


def restore_ms_720p(fuser: Fuser, files: dict[str, Path], runs: int) -> dict[str, dict[str, float]]:
    """The 720p photo's own (sharp, 175 px) face on both paths, and the same photo degraded so the face is 56 px
    (the case ``auto`` is for) on the source path."""
    photo = fuser.analyze(FACES / "face_recognition" / "obama-720p.jpg")
    face = max(photo.faces, key=lambda f: f.area)
    small = fuser.analyze(degrade_photo(photo.image, face.box))
    small_face = max(small.faces, key=lambda f: f.area)
    restorers = {name: Restorer(fuser.runtime.session(path)) for name, path in files.items()}
    quality = fuser.config.analysis.quality
    times: dict[str, dict[str, list[float]]] = {n: {"source": [], "target": [], "small": []} for n in restorers}
    for _ in range(runs):  # interleaved: load changes hit every variant alike
        for name, r in restorers.items():
            calls = {"source": (r.restore_source, (photo.image, face, quality)),
                     "target": (r.restore_in_place, (photo.image, face)),
                     "small": (r.restore_source, (small.image, small_face, quality))}
            for key, (call, call_args) in calls.items():
                start = time.perf_counter()
                call(*call_args)
                times[name][key].append((time.perf_counter() - start) * 1000)
    return {n: {k: median(v) for k, v in t.items()} | {"face_px": float(face.box[2]),
                                                       "small_px": float(small_face.box[2])}
            for n, t in times.items()}


GRAD_CKPT_CHILD = """
import sys, time, torch
from facefuse_training.restorer.model import UNet, UNetConfig
torch.set_num_threads(1); torch.manual_seed(0)
m = UNet(UNetConfig(base=int(sys.argv[1]))); m.grad_checkpoint = sys.argv[2] == '1'; m.train()
opt = torch.optim.AdamW(m.parameters()); x = torch.rand(int(sys.argv[3]), 3, int(sys.argv[4]), int(sys.argv[4]))
for _ in range(int(sys.argv[5])):
    loss = (m(x) - x).abs().mean(); opt.zero_grad(); loss.backward(); opt.step()
"""


def grad_checkpoint_cost(base: int, batch: int, size: int, steps: int, repeats: int) -> dict[str, float]:
    """Peak RSS and wall time of fresh processes doing ``steps`` training steps, without and with checkpointing;
    the time cost is the difference of medians (import time is the same in both)."""
    results: dict[str, list[tuple[float, float]]] = {"0": [], "1": []}
    for _ in range(repeats):
        for flag in ("0", "1"):
            results[flag].append(child_run([sys.executable, "-c", GRAD_CKPT_CHILD, str(base), flag, str(batch),
                                            str(size), str(steps)]))
    wall = {f: median([w for w, _ in r]) for f, r in results.items()}
    rss = {f: median([m for _, m in r]) for f, r in results.items()}
    return {"base": base, "batch": batch, "size": size, "steps": steps, "rss_off_mb": rss["0"], "rss_on_mb": rss["1"],
            "wall_off_s": wall["0"], "wall_on_s": wall["1"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ARTIFACTS / "restorer", help="training output folder")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    quick = args.quick
    run = args.run
    summary = json.loads((run / "summary.json").read_text())
    store = StoreConfig.from_env()
    fuser = Fuser(FuserConfig(store=store, runtime=ONE_THREAD))
    work = Path(tempfile.mkdtemp(prefix="restorer-bench-"))
    shipped = fuser.store.ensure(RESTORER)
    calibration = FACES / "face-api-js"
    reports = {}
    for precision in ("int8", "fp16"):
        request = OptimizeRequest(model=str(shipped), precision=precision, contract=RESTORER,
                                  output=work / f"restorer.{precision}.onnx", calibration=calibration,
                                  max_images=16 if quick else 48, latency_runs=5 if quick else 30)
        reports[precision] = optimize_model(request, fuser.store, ONE_THREAD, AnalysisConfig())
    files = {"teacher": run / "teacher.onnx", "pruned": run / "pruned_ft.onnx", "pruned + distilled": shipped,
             "INT8": work / "restorer.int8.onnx", "FP16": work / "restorer.fp16.onnx"}
    sessions = {name: fuser.runtime.session(path) for name, path in files.items()}
    feed = {"input": np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)}
    ms = dict(zip(files, paired_latency_ms(list(sessions.values()), feed, 5 if quick else 30)))
    holdout = holdout_metrics(sessions, run, 40 if quick else None)
    people = identity_sets(quick)["colour"][: 2 if quick else 6]
    judge = IdentityJudge(fuser.store, fuser.runtime)
    effect = {}
    for name, path in files.items():
        variant = Fuser(FuserConfig(store=store, runtime=ONE_THREAD, restore=RestoreConfig(model=path)))
        effect[name] = fusion_identity(variant, judge, people[:4], FusionOptions(restore="on"))
    effect["no restore"] = fusion_identity(fuser, judge, people[:4], FusionOptions(restore="off"))
    off = fusion_identity(fuser, judge, people, FusionOptions(restore="off"))
    auto = fusion_identity(fuser, judge, people, FusionOptions(restore="auto"))
    timing = restore_ms_720p(fuser, {"FP32 student": shipped, "INT8 student": files["INT8"]}, 5 if quick else 20)
    ckpt = grad_checkpoint_cost(16, 16, 128, 2 if quick else 4, 1 if quick else 3)
    costs = summary["costs"]
    cost_of = {"teacher": costs["teacher"], "pruned": costs["pruned_ft"]}
    write_section("restorer", render(summary, cost_of, costs["student"], files, ms, holdout, effect, off, auto,
                                     reports, timing, ckpt, quick))
    print((Path(__file__).parent / "results" / "restorer.md").read_text())


def render(summary, cost_of, student_cost, files, ms, holdout, effect, off, auto, reports, timing, ckpt,
           quick) -> str:
    teacher = cost_of["teacher"]
    lines = [
        "## Face restorer: teacher → pruned → distilled → INT8 / FP16" + (" (--quick)" if quick else ""),
        "",
        f"`benchmarks/restorer.py` on {machine()}; the machine was shared with other engineers' jobs (load average 5–20), so "
        "timings are medians of interleaved runs on 1 ONNX Runtime thread. Hold-out: "
        f"{holdout['count']['images']} UTKFace faces (128 px) never trained on, degraded once with the training "
        "degradation (fixed seed). Identity: degraded sources (face scaled to 56 px, blur σ 1, JPEG 30) fused onto "
        "the other people's clean photos (mesh engine), judged by MobileFaceNet against a different photo of each "
        f"person (fusion identity column: restore=on with that variant, {effect['no restore']['pairs']} pairs).",
        "",
        "| model | params | MACs (256²) | ms / 256 crop | PSNR dB | SSIM | fidelity to teacher PSNR / SSIM | "
        "fusion identity top-1 / cos |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in files:
        cost = cost_of.get(name, student_cost)
        h = holdout[name]
        fid = "—" if name == "teacher" else f"{h['fidelity_psnr_db']:.1f} / {h['fidelity_ssim']:.3f}"
        e = effect[name]
        lines.append(f"| {name} | {cost['params'] / 1e3:.0f} k ({cost['params'] / teacher['params']:.0%}) | "
                     f"{cost['macs_256'] / 1e9:.2f} G ({cost['macs_256'] / teacher['macs_256']:.0%}) | "
                     f"{ms[name]:.1f} | {h['psnr_db']:.2f} | {h['ssim']:.3f} | {fid} | "
                     f"{e['top1']:.0f} % / {e['cos']:.3f} |")
    for name in ("degraded input", "bicubic + unsharp"):
        lines.append(f"| {name} | | | | {holdout[name]['psnr_db']:.2f} | {holdout[name]['ssim']:.3f} | | |")
    none = effect["no restore"]
    lines.append(f"| no restore (fusion) | | | | | | | {none['top1']:.0f} % / {none['cos']:.3f} |")
    speed = ms["teacher"] / ms["pruned + distilled"]
    int8 = reports["int8"]
    fp16 = reports["fp16"]
    lines += [
        "",
        f"Student vs teacher: {1 - student_cost['params'] / teacher['params']:.0%} fewer parameters, "
        f"{student_cost['macs_256'] / teacher['macs_256']:.2f} of the MACs, {speed:.2f}× faster per 256 crop; "
        f"PSNR {holdout['pruned + distilled']['psnr_db'] - holdout['teacher']['psnr_db']:+.2f} dB vs the teacher. "
        f"INT8 vs FP32 student: {ms['pruned + distilled'] / ms['INT8']:.2f}× on the 256 crop.",
        "",
        "`facefuse optimize` reports (student variant vs FP32 student on the restore stage's own crops of "
        f"`face-api-js` photos, {int8.holdout_images} held out):",
        "",
        "| variant | min PSNR dB | mean PSNR dB | min SSIM | mean SSIM | latency FP32 → variant (ms) | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, rep in (("INT8", int8), ("FP16", fp16)):
        m = rep.metrics
        lat = list(rep.latency_ms.values())
        lines.append(f"| {label} | {m['min_psnr_db']:.1f} | {m['mean_psnr_db']:.1f} | {m['min_ssim']:.4f} | "
                     f"{m['mean_ssim']:.4f} | {lat[0]:.1f} → {lat[1]:.1f} | {'PASS' if rep.passed else 'FAIL'} |")
    lines += [
        "",
        "Degraded sources, restore off vs auto (shipped FP32 student):",
        "",
        "| restore | pairs | fused | restored | identity top-1 | cos(out, source ref) | fused-face sharpness |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, r in (("off", off), ("auto", auto)):
        lines.append(f"| {label} | {r['pairs']} | {r['fused']} | {r['restored']} | {r['top1']:.0f} % | "
                     f"{r['cos']:.3f} | {r['sharpness']:.0f} |")
    lines += ["", "Restore time per face on `obama-720p.jpg` (median, 1 thread): its sharp face on both paths, and the "
              "photo degraded to a small face (the case `auto` restores) on the source path:", "",
              "| model | face px | source path ms | target path ms (in place) | degraded: face px | source path ms |",
              "|---|---|---|---|---|---|"]
    for name, t in timing.items():
        lines.append(f"| {name} | {t['face_px']:.0f} | {t['source']:.1f} | {t['target']:.1f} | {t['small_px']:.0f} | "
                     f"{t['small']:.1f} |")
    saving = 1 - ckpt["rss_on_mb"] / ckpt["rss_off_mb"]
    lines += ["", f"`--grad-checkpoint` (U-Net base {ckpt['base']}, batch {ckpt['batch']} × {ckpt['size']}², "
              f"{ckpt['steps']} steps, fresh process each, medians): peak RSS {ckpt['rss_off_mb']:.0f} → "
              f"{ckpt['rss_on_mb']:.0f} MB ({saving:.0%} less), wall {ckpt['wall_off_s']:.1f} → "
              f"{ckpt['wall_on_s']:.1f} s ({ckpt['wall_on_s'] / ckpt['wall_off_s'] - 1:+.0%}, includes the same "
              "import time in both).", "",
              "Training time on this machine (1 PyTorch thread, shared CPU): "
              + ", ".join(f"{k} {v / 60:.1f} min" for k, v in summary.get("train_seconds", {}).items()) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
