"""Face restorer: does it earn its place? Every goal of issue 21, measured in one run.

1. Hold-out (UTKFace faces never trained on, 128 px, the training degradation with a fixed seed): PSNR / SSIM of the
   degraded input, bicubic upscaling, the teacher, the pruned model without distillation, the distilled student and
   its INT8 variant (ONNX Runtime); the teacher's gain over bicubic and the share of it the student keeps.
2. Student cost: parameters and multiply-accumulates against the teacher (torch-pruning's counter, from the run's
   ``summary.json``).
3. Speed: the student FP32 vs INT8 on a 128² and a 256² input, and ``Restorer.restore_source`` for a 128 px face —
   medians of interleaved runs, wall and CPU (thread) time, 1 ONNX Runtime thread. INT8 fidelity: SSIM to FP32 on
   the hold-out set and ``facefuse optimize``'s report on the restore stage's own crops.
4. Poor sources in a fusion: a photo of each person degraded so the face is 40–64 px + JPEG 30–40, fused onto other
   people's photos with restore off / on / auto; MobileFaceNet (not used by the pipeline) cosine of the fused face to
   a *different, sharp* photo of the source person, and the fused face's sharpness (restore on ÷ off). Good (not
   degraded) sources: auto vs off, to show auto never lowers identity there.
5. Post-fusion enhancement on small-source pairs (source face ~48 px, target face ≥ 120 px): skin sharpness ratio
   to the target (variance of the Laplacian of L on the bare-skin zone), smear (blotch share: low-pass |ΔL| > 8 on
   the face hull, ``facefuse_eval.lighting``) and identity, before vs after ``facefuse.fusion.enhance``.
6. Tiling: a 600×700 face region in 256 px tiles, feathered vs Poisson-stitched: seam score and distance to the
   one-pass output.
7. Contact sheets (PNG, under the run folder, never committed: the photos' licences): the student on
   ``faces/hard/poor`` and on the hold-out faces where it gains least.

``--int8`` measures only the INT8 figures of sections 1 and 3 (every quantizer layout, the FP32 and INT8 student's
speed, ``facefuse optimize``'s INT8 report) on the shipped student, without a training run folder, into a section of
its own: they depend on the CPU's instruction sets (VNNI), which differ between this project's machines.

Needs the 'train' extra (the hold-out set is made by the training code). ``--run DIR`` is the training output
folder (``facefuse train restorer --out DIR``): its teacher.onnx, pruned_ft.onnx, restorer.onnx and summary.json.
``--section`` / ``--title`` write a run that is measured but not shipped into a section of its own, so the shipped
student's section stays.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np

from common import ARTIFACTS, FACES, cpu_name, machine, median, write_section
from quality import identity_sets

from facefuse.analysis.quality import sharpness
from facefuse.config import AnalysisConfig, RuntimeConfig, StoreConfig
from facefuse.errors import FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.enhance import enhance_fused, skin_sharpness, skin_zone
from facefuse.optimize.workflow import OptimizeRequest, optimize_model
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.fusion.restorer import RESTORER, RestoreConfig, Restorer, face_region
from facefuse.models.registry import WEIGHTS_DIR
from facefuse.tiling import STITCHES, seam_score
from facefuse_eval.fusion import IdentityJudge
from facefuse_eval.lighting import lighting_error

ONE_THREAD = RuntimeConfig(intra_op_threads=1)
RESTORER_WEIGHTS = WEIGHTS_DIR / "restorer.onnx"  # the shipped student
TITLE = "Face restorer: a model worth compressing (issue 21)"
GOALS = {"teacher_db": 2.0, "teacher_ssim": 0.05, "cos": 0.03, "sharpness": 1.2, "params_fewer": 0.60,
         "macs": 1 / 3, "gain_kept": 0.90, "int8_speedup": 1.5, "int8_ssim": 0.98, "ms_128": 15.0}


def jpeg(rgb: np.ndarray, quality: int) -> np.ndarray:
    ok, buf = cv2.imencode(".jpg", rgb[:, :, ::-1], [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)[:, :, ::-1].copy()


def poor_photo(rgb: np.ndarray, face_side: float, face_px: float, quality: int | None) -> np.ndarray:
    """What a user sends when the photo is poor: scaled so the face is ``face_px`` wide, then JPEG ``quality``."""
    scale = min(1.0, face_px / face_side)
    small = cv2.resize(rgb, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    return jpeg(small, quality) if quality else small


def timed(calls: dict[str, Callable[[], object]], runs: int, warmup: int = 2) -> dict[str, dict[str, float]]:
    """Median wall and CPU (this thread) ms of each call, the calls taking turns run by run."""
    for _ in range(warmup):
        for call in calls.values():
            call()
    wall: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(runs):
        for name, call in calls.items():
            w, c = time.perf_counter(), time.thread_time()
            call()
            cpu[name].append((time.thread_time() - c) * 1000)
            wall[name].append((time.perf_counter() - w) * 1000)
    return {k: {"wall": median(wall[k]), "cpu": median(cpu[k])} for k in calls}


def run_session(session, image: np.ndarray) -> np.ndarray:
    out = session.run(None, {"input": np.ascontiguousarray(image.transpose(2, 0, 1)[None])})[0][0]
    return np.clip(out.transpose(1, 2, 0), 0, 1)


def holdout(sessions: dict[str, object], run: Path, summary: dict, limit: int | None) -> tuple[dict, list, dict]:
    """PSNR / SSIM on the hold-out set: the PyTorch stages from the run's own report (all hold-out faces), the
    shipped FP32 student and its INT8 variant in ONNX Runtime here; and the ONNX outputs (for the contact sheet)."""
    from facefuse_training.restorer.config import RestorerConfig
    from facefuse_training.restorer.data import holdout_pairs
    from facefuse_training.restorer.evaluate import bicubic, bucket_gains, psnr_ssim
    from facefuse_training.restorer.teacher import holdout_images

    config = RestorerConfig(out=run, holdout_images=limit)
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    gt = [p.gt for p in pairs]
    outputs = {"degraded input": [p.lq for p in pairs], "bicubic": [bicubic(p.small, config.size) for p in pairs]}
    outputs |= {name: [run_session(s, p.lq) for p in pairs] for name, s in sessions.items()}
    table = {name: summary["holdout"][key] for name, key in (("degraded input", "degraded input"),
                                                             ("bicubic", "bicubic"), ("teacher", "teacher"),
                                                             ("pruned, no distillation", "pruned_ft"),
                                                             ("student", "student"))}
    table["student (ONNX)"] = psnr_ssim(outputs["student"], gt)
    table["INT8 student"] = psnr_ssim(outputs["INT8 student"], gt)
    table["INT8 vs FP32 student"] = psnr_ssim(outputs["INT8 student"], outputs["student"])
    table["by_face_px"] = bucket_gains(pairs, {n: outputs[n] for n in ("student", "INT8 student")}, config.size)
    table["count"] = int(summary["holdout"]["images"]["count"])
    table["onnx_count"] = len(pairs)
    return table, pairs, outputs


INT8_LAYOUTS = {  # name: (format, activations, weights, per-channel, reduce_range); the first is `facefuse optimize`'s
    "QDQ U8S8": ("QDQ", "u8", "s8", False, False),
    "QDQ U8S8 per-channel": ("QDQ", "u8", "s8", True, False),
    "QDQ U8S8 reduce_range": ("QDQ", "u8", "s8", False, True),
    "QDQ U8S8 per-channel + reduce_range": ("QDQ", "u8", "s8", True, True),
    "QDQ U8U8": ("QDQ", "u8", "u8", False, False),
    "QDQ S8S8": ("QDQ", "s8", "s8", False, False),
    "QOperator U8S8": ("QOperator", "u8", "s8", False, False),
    "QOperator U8S8 per-channel + reduce_range": ("QOperator", "u8", "s8", True, True),
}


def int8_layouts(student: Path, pairs, work: Path, runs: int) -> dict:
    """Every INT8 layout ONNX Runtime's static quantizer offers, on the student: CPU ms on a 256² input (1 thread,
    interleaved medians), speed-up over FP32 and SSIM to FP32 on hold-out faces (16 calibrate, the rest test).
    Why: on a CPU without VNNI the U8S8 kernels may not beat FP32 at all; this shows which layout, if any, does
    (and on one with VNNI, by how much)."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    from skimage.metrics import structural_similarity

    feeds = [np.ascontiguousarray(p.lq.transpose(2, 0, 1)[None]) for p in pairs[:40]]
    calib, test = feeds[:16], feeds[16:]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.feeds = iter({"input": f} for f in calib)

        def get_next(self):
            return next(self.feeds, None)

    prepared = work / "layouts-prepared.onnx"
    quant_pre_process(str(student), str(prepared), skip_optimization=True, skip_symbolic_shape=True)
    types = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    sessions = {"FP32": ort.InferenceSession(str(student), options)}
    for name, (fmt, act, weight, per_channel, reduce_range) in INT8_LAYOUTS.items():
        out = work / f"layout-{len(sessions)}.onnx"
        quantize_static(str(prepared), str(out), Reader(), quant_format=getattr(QuantFormat, fmt),
                        activation_type=types[act], weight_type=types[weight], per_channel=per_channel,
                        reduce_range=reduce_range)
        sessions[name] = ort.InferenceSession(str(out), options)
    feed = np.random.default_rng(0).random((1, 3, 256, 256), dtype=np.float32)
    times = timed({n: (lambda s=s: s.run(None, {"input": feed})) for n, s in sessions.items()}, runs)

    def image(session, x: np.ndarray) -> np.ndarray:
        return np.clip(session.run(None, {"input": x})[0][0].transpose(1, 2, 0), 0, 1)

    reference = [image(sessions["FP32"], x) for x in test]
    return {"faces": len(test), "layouts": {name: {"cpu": times[name]["cpu"], "wall": times[name]["wall"],
                   "speedup": times["FP32"]["cpu"] / times[name]["cpu"],
                   "ssim": float(np.mean([structural_similarity(image(s, x), r, channel_axis=-1, data_range=1.0)
                                          for x, r in zip(test, reference)]))}
                                            for name, s in sessions.items()}}


def fused_face(fuser: Fuser, source: np.ndarray, target, options: FusionOptions):
    """(fused image, warnings) or None when the pipeline refuses the pair."""
    try:
        result = fuser.fuse(source, target.image, options)
    except FacefuseError:
        return None
    return result.image, result.warnings


def poor_sources(fusers: dict[str, Fuser], judge: IdentityJudge, people, rng: np.random.Generator,
                 degrade: bool, targets: int = 2, modes: dict[str, dict] | None = None, jpeg: bool = True) -> dict:
    """Each person's photo (degraded when ``degrade``: made small, then JPEG unless not ``jpeg``) fused onto the
    next ``targets`` people's photos, per mode: cosine to a different sharp photo of the source person, fused-face
    sharpness (the gate's, whole face at 112 px) and bare-skin sharpness ÷ the target photo's (the enhancer's
    measure), blotch share, how often it was restored. ``fusers`` is keyed by the ``restore`` option, or by a label
    that ``modes`` maps to fusion options (two models, both "on"; restore + enhance); the label "off" is the
    reference every Δ is taken against."""
    modes = modes or {}
    any_fuser = next(iter(fusers.values()))
    analyses = {name: any_fuser.analyze(photo) for name, photo, _ in people}
    refs = {}
    for name, _, reference in people:
        ref = any_fuser.analyze(reference)
        refs[name] = judge.embed(ref.image, max(ref.faces, key=lambda f: f.area))
    rows: dict[str, dict[str, list]] = {mode: {"cos": [], "sharp": [], "skin": [], "blotch": [], "restored": [],
                                               "enhanced": []} for mode in fusers}
    target_sharp: list[float] = []  # the photo each face was fused into: the detail step matches its fine detail
    skipped = 0
    sizes = []
    for i, (s_name, _, _) in enumerate(people):
        clean = analyses[s_name]
        face = max(clean.faces, key=lambda f: f.area)
        if degrade:
            face_px, quality = float(rng.uniform(40, 64)), int(rng.integers(30, 41))
            source = poor_photo(clean.image, float(face.box[2]), face_px, quality if jpeg else None)
            sizes.append(face_px)
        else:
            source = clean.image
        for k in range(1, targets + 1):
            target = analyses[people[(i + k) % len(people)][0]]
            t_face = max(target.faces, key=lambda f: f.area)
            results = {mode: fused_face(f, source, target, FusionOptions(**modes.get(mode, {"restore": mode}),
                                                                         visible_label=False))
                       for mode, f in fusers.items()}
            if any(r is None for r in results.values()):
                skipped += 1
                continue
            target_sharp.append(sharpness(target.image, t_face.keypoints))
            zone = skin_zone(t_face, target.image.shape)
            target_skin = max(skin_sharpness(target.image, zone), 1e-9)
            for mode, (image, warnings) in results.items():
                rows[mode]["cos"].append(float(judge.embed(image, t_face) @ refs[s_name]))
                rows[mode]["sharp"].append(sharpness(image, t_face.keypoints))
                rows[mode]["skin"].append(skin_sharpness(image, zone) / target_skin)
                rows[mode]["blotch"].append(100 * lighting_error(image, target.image, t_face).blotch_share)
                rows[mode]["restored"].append(any(w.startswith("restored the source") for w in warnings))
                rows[mode]["enhanced"].append(any(w.startswith("enhanced the fused face") for w in warnings))
    off = rows["off"]
    out = {"pairs": len(off["cos"]), "skipped": skipped, "face_px": (min(sizes), max(sizes)) if sizes else None}
    for mode, r in rows.items():
        out[mode] = {"cos": float(np.mean(r["cos"])), "sharp": median(r["sharp"]),
                     "restored": int(np.sum(r["restored"])), "enhanced": int(np.sum(r["enhanced"])),
                     "delta_cos": float(np.mean(np.subtract(r["cos"], off["cos"]))),
                     "worst_delta_cos": float(np.min(np.subtract(r["cos"], off["cos"]))),
                     "sharp_ratio": median(list(np.divide(r["sharp"], off["sharp"]))),
                     "sharp_vs_target": median(list(np.divide(r["sharp"], target_sharp))),
                     "skin_vs_target": median(r["skin"]), "blotch": median(r["blotch"]),
                     "worst_blotch_change": float(np.max(np.subtract(r["blotch"], off["blotch"]))),
                     "sharp_each": r["sharp"], "cos_each": r["cos"], "skin_each": r["skin"], "blotch_each": r["blotch"]}
    return out


def post_fusion(fuser: Fuser, restorer: Restorer, judge: IdentityJudge, people, sheet: list) -> dict:
    """Small sources (face ~48 px) onto large target faces, restore off: the fused face before / after
    enhancement."""
    analyses = {name: fuser.analyze(photo) for name, photo, _ in people}
    refs = {}
    for name, _, reference in people:
        ref = fuser.analyze(reference)
        refs[name] = judge.embed(ref.image, max(ref.faces, key=lambda f: f.area))
    rows: dict[str, list[float]] = {k: [] for k in ("ratio_before", "ratio_after", "smear_before", "smear_after",
                                                    "cos_before", "cos_after", "gain", "upscale")}
    for i, (s_name, _, _) in enumerate(people):
        clean = analyses[s_name]
        face = max(clean.faces, key=lambda f: f.area)
        source = poor_photo(clean.image, float(face.box[2]), 48.0, None)
        for t_name, _, _ in (people[(i + 1) % len(people)], people[(i + 2) % len(people)]):
            target = analyses[t_name]
            t_face = max(target.faces, key=lambda f: f.area)
            if t_face.box[2] < 120:
                continue
            fused = fused_face(fuser, source, target, FusionOptions(restore="off", visible_label=False))
            if fused is None:
                continue
            result = enhance_fused(fused[0], target.image, t_face, 48.0, restorer)
            for when, image in (("before", fused[0]), ("after", result.image)):
                rows[f"smear_{when}"].append(100 * lighting_error(image, target.image, t_face).blotch_share)
                rows[f"cos_{when}"].append(float(judge.embed(image, t_face) @ refs[s_name]))
            rows["ratio_before"].append(result.ratio_before)
            rows["ratio_after"].append(result.ratio_after)
            rows["gain"].append(result.gain)
            rows["upscale"].append(float(t_face.box[2]) / 48.0)
            x0, y0, x1, y1 = face_region(target.image, t_face, 0.2)
            sheet.append([cv2.resize(img[y0:y1, x0:x1], (192, 192), interpolation=cv2.INTER_AREA)
                          for img in (target.image, fused[0], result.image)])
    return {"pairs": len(rows["gain"]), **{k: median(v) for k, v in rows.items()},
            "ratio_p10_before": float(np.percentile(rows["ratio_before"], 10)) if rows["gain"] else float("nan"),
            "ratio_p10_after": float(np.percentile(rows["ratio_after"], 10)) if rows["gain"] else float("nan"),
            "smear_max_after_minus_before": float(np.max(np.subtract(rows["smear_after"], rows["smear_before"])))
            if rows["gain"] else float("nan"),
            "cos_min_delta": float(np.min(np.subtract(rows["cos_after"], rows["cos_before"])))
            if rows["gain"] else float("nan")}


def tiling(session, photo: np.ndarray, runs: int) -> dict:
    region = photo[150:850, 150:750]
    whole = Restorer(session, RestoreConfig(tile=4096)).restore(region)
    out = {"shape": region.shape[:2], "one pass": seam_score(whole, 256, 32)["ratio"]}
    restorers = {s: Restorer(session, RestoreConfig(tile=256, overlap=32, stitch=s)) for s in STITCHES}
    times = timed({s: (lambda r=r: r.restore(region)) for s, r in restorers.items()}, runs, warmup=0)
    for stitch, r in restorers.items():
        img = r.restore(region)
        out[stitch] = {"seam": seam_score(img, 256, 32)["ratio"],
                       "diff": float(np.abs(img.astype(float) - whole).mean()), **times[stitch]}
    return out


def face_128(fuser: Fuser) -> tuple[np.ndarray, object]:
    """obama.jpg scaled so its face is 128 px wide, with the face found in it."""
    photo = fuser.analyze(FACES / "face_recognition" / "obama.jpg")
    face = max(photo.faces, key=lambda f: f.area)
    scaled = fuser.analyze(poor_photo(photo.image, float(face.box[2]), 128.0, None))
    return scaled.image, max(scaled.faces, key=lambda f: f.area)


def poor_photo_rows(fuser: Fuser, restorers: list[Restorer]) -> list[np.ndarray]:
    """One contact-sheet row per faces/hard/poor photo: its largest face's region bicubic-upscaled, then as each of
    ``restorers`` restores it as a source (192 px high tiles)."""
    import testdata  # tests/testdata.py, on the path through benchmarks/common.py

    poor = sorted((testdata.default_mirror() or FACES.parent).joinpath("faces", "hard", "poor").glob("*.*"))
    rows = []
    for path in poor:
        try:
            analysis = fuser.analyze(path)
        except FacefuseError:
            continue
        if not analysis.faces:
            continue
        face = max(analysis.faces, key=lambda f: f.area)
        crops = [r.restore_source(analysis.image, face)[0] for r in restorers]
        x0, y0, x1, y1 = face_region(analysis.image, face, restorers[0].config.margin)
        plain = cv2.resize(analysis.image[y0:y1, x0:x1], crops[0].shape[1::-1], interpolation=cv2.INTER_CUBIC)
        rows.append(cv2.resize(np.concatenate([plain, *crops], axis=1), (192 * (1 + len(crops)), 192),
                               interpolation=cv2.INTER_AREA))
    return rows


def contact_sheets(fuser: Fuser, restorer: Restorer, teacher, pairs, outputs, gain: list[float],
                   folder: Path) -> list[Path]:
    """Two PNGs: the student on the largest face of each faces/hard/poor photo as the pipeline applies it to a
    source (the region bicubic-upscaled | restored) and the 8 hold-out faces where the student gains least over
    bicubic, then 8 at random (degraded | bicubic | teacher | student | INT8 | truth)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = poor_photo_rows(fuser, [restorer])
    written = []
    if rows:
        written.append(folder / "hard_poor.png")
        cv2.imwrite(str(written[-1]), np.concatenate(rows, axis=0)[:, :, ::-1])
    order = list(np.argsort(gain)[:8]) + list(np.random.default_rng(0).choice(len(pairs), 8, replace=False))
    grid = [np.concatenate([outputs["degraded input"][i], outputs["bicubic"][i], run_session(teacher, pairs[i].lq),
                            outputs["student"][i], outputs["INT8 student"][i], pairs[i].gt], axis=1) for i in order]
    written.append(folder / "holdout.png")
    cv2.imwrite(str(written[-1]), (np.concatenate(grid, axis=0)[:, :, ::-1] * 255 + 0.5).astype(np.uint8))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, default=ARTIFACTS / "restorer", help="training output folder")
    parser.add_argument("--quick", action="store_true", help="a few images and pairs (checks the script runs)")
    parser.add_argument("--holdout", type=int, default=None,
                        help="hold-out faces for the ONNX FP32/INT8 rows (default all; the PyTorch rows use all)")
    parser.add_argument("--people", type=int, default=None, help="people of the colour set in the fusion sections")
    parser.add_argument("--fusion-only", action="store_true",
                        help="rerun only the fusion sections (poor and good sources, post-fusion); the model sections "
                             "come from the run folder's benchmark.json (the same model's last full run)")
    parser.add_argument("--int8", action="store_true",
                        help="only the INT8 figures (layouts, speed, optimize) of the shipped student, on this CPU; "
                             "needs no training run folder")
    parser.add_argument("--section", default=None,
                        help="results section to write (default restorer, or restorer_int8 with --int8): a run "
                             "measured but not shipped, or one on another machine, gets its own")
    parser.add_argument("--title", default=TITLE, help="the section's heading")
    args = parser.parse_args()
    quick, run = args.quick, args.run
    if args.int8:
        fuser = Fuser(FuserConfig(store=StoreConfig.from_env(), runtime=ONE_THREAD))
        print(write_section(args.section or "restorer_int8",
                            render_int8(int8_sections(fuser, RESTORER_WEIGHTS, quick))).read_text())
        return
    summary = json.loads((run / "summary.json").read_text())
    store = StoreConfig.from_env()
    student_path = run / "restorer.onnx"
    fusers = {mode: Fuser(FuserConfig(store=store, runtime=ONE_THREAD, restore=RestoreConfig(model=student_path)))
              for mode in ("off", "on", "auto")}
    fusers["auto + enhance"] = fusers["auto"]
    fuser = fusers["off"]
    if args.fusion_only:  # the model sections as the last full run on this run folder measured them
        results = {k: v for k, v in json.loads((run / "benchmark.json").read_text()).items()
                   if k in ("holdout", "speed", "int8_layouts", "tiling", "optimize")}
        results["speed"] = {int(k) if k.isdigit() else k: v for k, v in results["speed"].items()}  # JSON keys
        student = Restorer(fuser.runtime.session(student_path))
        sheets = []
    else:
        results, student, sheets = model_sections(fuser, run, summary, student_path, args.holdout, quick)
    post_sheet: list = []
    results |= {"summary": summary, **fusion_sections(fusers, student, quick, args.people, post_sheet)}
    if post_sheet:
        sheets.append(run / "sheets" / "post_fusion.png")
        sheets[-1].parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(sheets[-1]), np.concatenate([np.concatenate(r, axis=1) for r in post_sheet], 0)[:, :, ::-1])
    results["sheets"] = [str(s) for s in sheets]
    (run / "benchmark.json").write_text(json.dumps(results, indent=2, default=float))
    print(write_section(args.section or "restorer", render(results, quick, args.title)).read_text())


def model_sections(fuser: Fuser, run: Path, summary: dict, student_path: Path, holdout_limit: int | None,
                   quick: bool) -> tuple[dict, Restorer, list[Path]]:
    """Sections 1–3, 6 and 7: hold-out, INT8 layouts, speed, `facefuse optimize`, tiling, contact sheets."""
    work = Path(tempfile.mkdtemp(prefix="restorer-bench-"))
    reports = {}
    for precision in ("int8", "fp16"):
        request = OptimizeRequest(model=str(student_path), precision=precision, contract=RESTORER,
                                  output=work / f"restorer.{precision}.onnx", calibration=FACES / "face-api-js",
                                  max_images=16 if quick else 48, latency_runs=5 if quick else 20)
        reports[precision] = optimize_model(request, fuser.store, ONE_THREAD, AnalysisConfig())
    files = {"teacher": run / "teacher.onnx", "student": student_path, "INT8 student": work / "restorer.int8.onnx"}
    sessions = {name: fuser.runtime.session(path) for name, path in files.items()}
    table, pairs, outputs = holdout({n: sessions[n] for n in ("student", "INT8 student")}, run, summary,
                                    24 if quick else holdout_limit)

    layouts = int8_layouts(student_path, pairs, work, 3 if quick else 9)
    restorers = {n: Restorer(sessions[n]) for n in ("student", "INT8 student")}
    speed = student_speed(fuser, sessions, restorers, 5 if quick else 30)
    tiles = tiling(sessions["student"], fuser.analyze(FACES / "face_recognition" / "obama.jpg").image,
                   2 if quick else 5)
    gain = [10 * np.log10(np.mean((b - p.gt) ** 2) / max(np.mean((t - p.gt) ** 2), 1e-12))
            for b, t, p in zip(outputs["bicubic"], outputs["student"], pairs)]
    sheets = contact_sheets(fuser, restorers["student"], sessions["teacher"], pairs, outputs, gain, run / "sheets")
    results = {"holdout": table, "speed": speed, "int8_layouts": layouts, "tiling": tiles,
               "optimize": {p: {"metrics": r.metrics, "latency_ms": r.latency_ms, "passed": r.passed}
                            for p, r in reports.items()}}
    return results, restorers["student"], sheets


def student_speed(fuser: Fuser, sessions: dict, restorers: dict[str, Restorer], runs: int) -> dict:
    """The FP32 and INT8 student on a 128² and a 256² input and ``restore_source`` on a 128 px face, interleaved."""
    speed: dict = {}
    for side in (128, 256):
        feed = np.random.default_rng(0).random((side, side, 3), dtype=np.float32)
        speed[side] = timed({n: (lambda s=sessions[n], x=feed: run_session(s, x))
                             for n in ("student", "INT8 student")}, runs)
    image, face = face_128(fuser)
    speed["restore_source"] = timed({n: (lambda r=r: r.restore_source(image, face))
                                     for n, r in restorers.items()}, runs)
    speed["face_px"] = float(face.box[2])
    return speed


def int8_sections(fuser: Fuser, student_path: Path, quick: bool) -> dict:
    """``--int8``: the INT8 figures on the shipped student alone — no teacher, no run folder. The hold-out pairs are
    the same faces and degradations as the full run's (the training code's fixed split and seed)."""
    from facefuse_training.restorer.config import RestorerConfig
    from facefuse_training.restorer.data import holdout_pairs
    from facefuse_training.restorer.evaluate import psnr_ssim
    from facefuse_training.restorer.teacher import holdout_images

    work = Path(tempfile.mkdtemp(prefix="restorer-int8-"))
    request = OptimizeRequest(model=str(student_path), precision="int8", contract=RESTORER,
                              output=work / "restorer.int8.onnx", calibration=FACES / "face-api-js",
                              max_images=16 if quick else 48, latency_runs=5 if quick else 20)
    report = optimize_model(request, fuser.store, ONE_THREAD, AnalysisConfig())
    sessions = {"student": fuser.runtime.session(student_path), "INT8 student": fuser.runtime.session(request.output)}
    config = RestorerConfig(out=work, holdout_images=24 if quick else 120)
    pairs = holdout_pairs(holdout_images(config), config.degrade)
    outputs = {n: [run_session(s, p.lq) for p in pairs] for n, s in sessions.items()}
    restorers = {n: Restorer(s) for n, s in sessions.items()}
    return {"faces": len(pairs), "int8_layouts": int8_layouts(student_path, pairs, work, 3 if quick else 9),
            "speed": student_speed(fuser, sessions, restorers, 5 if quick else 30),
            "int8_vs_fp32": psnr_ssim(outputs["INT8 student"], outputs["student"]),
            "optimize": {"int8": {"metrics": report.metrics, "latency_ms": report.latency_ms,
                                  "passed": report.passed}}}


def render_int8(r: dict) -> str:
    """The ``--int8`` section: the INT8 goals of issue 21 on this machine's CPU."""
    sp128, sp256 = r["speed"][128], r["speed"][256]
    x256 = sp256["student"]["cpu"] / sp256["INT8 student"]["cpu"]
    x128 = sp128["student"]["cpu"] / sp128["INT8 student"]["cpu"]
    ssim = r["int8_vs_fp32"]["ssim"]
    best = min(sp128["student"]["cpu"], sp128["INT8 student"]["cpu"])
    cpu = "an AVX-512 VNNI CPU" if "VNNI" in cpu_name() else "a CPU without VNNI (AVX2)"
    lines = [f"## Restorer INT8 on {cpu} (issue 21, `benchmarks/restorer.py --int8`)", "",
             f"`benchmarks/restorer.py --int8` on {machine()}. The shipped student (`restorer.onnx`) and its INT8 "
             "variant as `facefuse optimize --precision int8` makes it (QDQ U8S8, calibrated on face-api-js "
             "crops); ONNX Runtime, 1 thread, medians of interleaved runs; SSIM to FP32 on "
             f"{r['faces']} hold-out faces (the training code's fixed split and degradations).", "",
             "| goal | target | measured | |", "|---|---|---|---|",
             f"| INT8 vs FP32 student speed (CPU time, 256²) | ≥ 1.5× | {x256:.2f}× (128²: {x128:.2f}×) | "
             f"{verdict(x256 >= GOALS['int8_speedup'])} |",
             f"| INT8 SSIM to FP32 (hold-out) | ≥ 0.98 | {ssim:.4f} | {verdict(ssim >= GOALS['int8_ssim'])} |",
             f"| restore per 128 px face (model, 128² input, CPU time) | ≤ 15 ms | {best:.1f} ms | "
             f"{verdict(best <= GOALS['ms_128'])} |", "",
             "| ms, wall / CPU | FP32 student | INT8 student |", "|---|---|---|"]
    for label, row in (("model, 128² input", sp128), ("model, 256² input", sp256),
                       (f"`restore_source`, {r['speed']['face_px']:.0f} px face", r["speed"]["restore_source"])):
        lines.append(f"| {label} | {row['student']['wall']:.1f} / {row['student']['cpu']:.1f} | "
                     f"{row['INT8 student']['wall']:.1f} / {row['INT8 student']['cpu']:.1f} |")
    lines += ["", "Every INT8 layout of ONNX Runtime's static quantizer (256² input, CPU ms; SSIM to FP32 on "
              f"{r['int8_layouts']['faces']} hold-out faces, 16 others calibrate):", "",
              "| layout | CPU ms | × FP32 | SSIM to FP32 |", "|---|---|---|---|"]
    lines += [f"| {name} | {x['cpu']:.1f} | {x['speedup']:.2f}× | {x['ssim']:.4f} |"
              for name, x in r["int8_layouts"]["layouts"].items()]
    m = r["optimize"]["int8"]["metrics"]
    lat = list(r["optimize"]["int8"]["latency_ms"].values())
    lines += ["", f"`facefuse optimize` INT8 report on the restore stage's own crops: min PSNR {m['min_psnr_db']:.1f} "
              f"dB, mean SSIM {m['mean_ssim']:.4f}, latency FP32 → INT8 {lat[0]:.1f} → {lat[1]:.1f} ms: "
              f"{'PASS' if r['optimize']['int8']['passed'] else 'FAIL'}."]
    return "\n".join(lines)


def fusion_sections(fusers: dict[str, Fuser], student: Restorer, quick: bool, people_limit: int | None,
                    post_sheet: list) -> dict:
    """Sections 4 and 5: poor and good sources in a fusion, post-fusion enhancement."""
    fuser = fusers["off"]
    judge = IdentityJudge(fuser.store, fuser.runtime)
    people = identity_sets(quick)["colour"][:people_limit]
    poor = poor_sources(fusers, judge, people, np.random.default_rng(21), degrade=True,
                        modes={"auto + enhance": {"restore": "auto", "enhance": "auto"}})
    # the control: the same small faces without JPEG (do the block edges count as sharpness?)
    unblocked = poor_sources({"off": fusers["off"]}, judge, people, np.random.default_rng(21), degrade=True,
                             jpeg=False)
    plain, blocked = unblocked["off"], poor["off"]
    poor["off, no JPEG"] = plain | {
        "sharp_ratio": median(list(np.divide(plain["sharp_each"], blocked["sharp_each"]))),
        "delta_cos": float(np.mean(np.subtract(plain["cos_each"], blocked["cos_each"]))),
        "worst_delta_cos": float(np.min(np.subtract(plain["cos_each"], blocked["cos_each"])))}
    good = poor_sources({m: fusers[m] for m in ("off", "auto", "auto + enhance")}, judge, people,
                        np.random.default_rng(21), degrade=False, targets=1,
                        modes={"auto + enhance": {"restore": "auto", "enhance": "auto"}})
    post = post_fusion(fuser, student, judge, people, post_sheet)
    return {"poor": poor, "good": good, "post": post}


def bucket_table(torch_rows: dict, onnx_rows: dict) -> list[str]:
    """Gain over bicubic per face-size bucket: PyTorch stages from the run's report (all hold-out faces), the
    ONNX FP32 / INT8 student here (the ``--holdout`` subset)."""
    lines = ["", "Gain over bicubic (dB) by the size the face was reduced to before JPEG and scaling back "
             "(at 128 px; per-image mean):", "",
             "| face side | faces | bicubic dB | teacher | pruned, no distillation | student | INT8 student (ONNX) |",
             "|---|---|---|---|---|---|---|"]
    for label, row in torch_rows.items():
        int8 = onnx_rows.get(label, {}).get("INT8 student", float("nan"))
        lines.append(f"| {label} | {row['count']} | {row['bicubic_db']:.2f} | {row['teacher']:+.2f} | "
                     f"{row['pruned_ft']:+.2f} | {row['student']:+.2f} | {int8:+.2f} |")
    return lines if torch_rows else []


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def poor_table(poor: dict, names, first_column: str) -> list[str]:
    """The poor-source rows of ``names`` (keys of :func:`poor_sources`' result) as a Markdown table."""
    lines = [f"| {first_column} | restored | enhanced | cos to reference | Δcos vs off (mean / worst) | "
             "fused-face sharpness | ÷ off | bare skin ÷ target's | blotch % (median / worst change) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        x = poor[name]
        lines.append(f"| {name} | {x['restored']} / {poor['pairs']} | {x['enhanced']} / {poor['pairs']} | "
                     f"{x['cos']:.3f} | {x['delta_cos']:+.3f} / {x['worst_delta_cos']:+.3f} | {x['sharp']:.0f} | "
                     f"{x['sharp_ratio']:.2f}× | {x['skin_vs_target']:.2f}× | {x['blotch']:.2f} / "
                     f"{x['worst_blotch_change']:+.2f} |")
    return lines


def enhancer_effect(auto: dict, enhanced: dict) -> list[str]:
    """The post stage's own effect on the poor-source pairs: ``auto + enhance`` against ``auto`` pair by pair (the
    same restored source, the same target; only ``enhance`` differs)."""
    d_cos = np.subtract(enhanced["cos_each"], auto["cos_each"])
    d_blotch = np.subtract(enhanced["blotch_each"], auto["blotch_each"])
    return ["", f"The enhancer's own effect on the poor sources (auto + enhance vs auto, the same pairs; it ran on "
            f"{enhanced['enhanced']} of {len(d_cos)}): cos mean {d_cos.mean():+.3f}, worst {d_cos.min():+.3f}; bare "
            f"skin ÷ target's median {auto['skin_vs_target']:.2f}× → {enhanced['skin_vs_target']:.2f}× (10th pct "
            f"{np.percentile(auto['skin_each'], 10):.2f} → {np.percentile(enhanced['skin_each'], 10):.2f}); "
            f"fused-face sharpness {auto['sharp']:.0f} → {enhanced['sharp']:.0f}; blotch share worst change "
            f"{d_blotch.max():+.2f} pt."]


def render(r: dict, quick: bool, title: str = TITLE) -> str:
    s, h, speed, poor, good, post, tiles = (r[k] for k in ("summary", "holdout", "speed", "poor", "good", "post",
                                                            "tiling"))
    costs = s["costs"]
    teacher, student = costs["teacher"], costs["student"]
    bic = h["bicubic"]
    t_db, t_ssim = h["teacher"]["psnr_db"] - bic["psnr_db"], h["teacher"]["ssim"] - bic["ssim"]
    s_db, s_ssim = h["student"]["psnr_db"] - bic["psnr_db"], h["student"]["ssim"] - bic["ssim"]
    kept_db, kept_ssim = s_db / t_db if t_db else float("nan"), s_ssim / t_ssim if t_ssim else float("nan")
    fewer = 1 - student["params"] / teacher["params"]
    macs = student["macs_256"] / teacher["macs_256"]
    sp128, sp256, src = speed[128], speed[256], speed["restore_source"]
    int8_x = sp256["student"]["cpu"] / sp256["INT8 student"]["cpu"]
    int8_x128 = sp128["student"]["cpu"] / sp128["INT8 student"]["cpu"]
    int8_ssim = h["INT8 vs FP32 student"]["ssim"]
    fastest = min(("student", "INT8 student"), key=lambda n: sp128[n]["cpu"])
    best_128, best_128_wall = sp128[fastest]["cpu"], sp128[fastest]["wall"]
    on, off, auto = poor["on"], poor["off"], poor["auto"]
    lines = [
        f"## {title}" + (" (--quick)" if quick else ""),
        "",
        f"`benchmarks/restorer.py` on {machine()}. No GPU was lent to this task: every figure is CPU (ONNX Runtime, "
        "1 thread; medians of interleaved runs, wall and CPU time).",
        "",
        f"Hold-out: {h['count']} UTKFace faces (128 px) never trained on, degraded once with the training degradation "
        "(faces 32–128 px, blur σ ≤ 3, JPEG 15–70, noise ≤ 15, grain, resize artefacts; fixed seed); PyTorch "
        "rows "
        f"from the training run's report, the ONNX rows (FP32 and INT8 as shipped) on {h['onnx_count']} of them here.",
        "",
        "| model | params | MACs (256²) | PSNR dB | SSIM | gain over bicubic dB / SSIM |",
        "|---|---|---|---|---|---|",
    ]
    cost_of = {"teacher": teacher, "pruned, no distillation": costs["pruned_ft"], "student": student,
               "student (ONNX)": student, "INT8 student": student}
    for name in ("degraded input", "bicubic", "teacher", "pruned, no distillation", "student", "student (ONNX)",
                 "INT8 student"):
        cost = cost_of.get(name)
        c = "| | |" if cost is None else (
            f"| {cost['params'] / 1e3:.0f} k ({cost['params'] / teacher['params']:.0%}) | "
            f"{cost['macs_256'] / 1e9:.2f} G ({cost['macs_256'] / teacher['macs_256']:.0%}) |")
        lines.append(f"| {name} {c} {h[name]['psnr_db']:.2f} | {h[name]['ssim']:.3f} | "
                     f"{h[name]['psnr_db'] - bic['psnr_db']:+.2f} / {h[name]['ssim'] - bic['ssim']:+.3f} |")
    lines += bucket_table(s["holdout"].get("by_face_px", {}), h["by_face_px"])
    p_before, p_after = post["ratio_before"], post["ratio_after"]
    lines += [
        "",
        "| goal | target | measured | |",
        "|---|---|---|---|",
        f"| teacher PSNR over bicubic | ≥ +2.0 dB | {t_db:+.2f} dB | {verdict(t_db >= GOALS['teacher_db'])} |",
        f"| teacher SSIM over bicubic | ≥ +0.05 | {t_ssim:+.3f} | {verdict(t_ssim >= GOALS['teacher_ssim'])} |",
        f"| poor sources: cosine to a sharp photo, restore on − off | ≥ +0.03 | {on['delta_cos']:+.3f} "
        f"({off['cos']:.3f} → {on['cos']:.3f}; auto {auto['delta_cos']:+.3f}) | "
        f"{verdict(on['delta_cos'] >= GOALS['cos'])} |",
        f"| poor sources: fused-face sharpness, on ÷ off | ≥ 1.2× | {on['sharp_ratio']:.2f}× (auto "
        f"{auto['sharp_ratio']:.2f}×, auto + enhance {poor['auto + enhance']['sharp_ratio']:.2f}×) | "
        f"{verdict(on['sharp_ratio'] >= GOALS['sharpness'])} |",
        f"| good sources: auto never lowers identity | Δcos ≥ 0 | mean {good['auto']['delta_cos']:+.3f}, worst "
        f"{good['auto']['worst_delta_cos']:+.3f} ({good['auto']['restored']} of {good['pairs']} restored) | "
        f"{verdict(good['auto']['worst_delta_cos'] >= -0.005)} |",
        f"| post-fusion: skin sharpness ÷ target's, toward 1 | raised | median {p_before:.2f} → {p_after:.2f} "
        f"(10th pct {post['ratio_p10_before']:.2f} → {post['ratio_p10_after']:.2f}) | "
        f"{verdict(abs(1 - p_after) < abs(1 - p_before))} |",
        f"| post-fusion: smear not raised | ≤ before (a rise ≤ 0.1 pt counted as none) | blotch share median {post['smear_before']:.2f} → "
        f"{post['smear_after']:.2f} %, worst change {post['smear_max_after_minus_before']:+.2f} pt | "
        f"{verdict(post['smear_max_after_minus_before'] <= 0.1)} |",
        f"| post-fusion: identity not lowered | ≥ before (a change ≥ −0.01 cosine, the judge's noise, counted as none) | cos median {post['cos_before']:.3f} → "
        f"{post['cos_after']:.3f}, "
        f"worst change {post['cos_min_delta']:+.3f} | {verdict(post['cos_min_delta'] >= -0.01)} |",
        f"| student parameters | ≥ 60 % fewer | {fewer:.0%} fewer | {verdict(fewer >= GOALS['params_fewer'])} |",
        f"| student MACs | ≤ 1/3 | {macs:.2f} | {verdict(macs <= GOALS['macs'])} |",
        f"| student keeps the teacher's gain | ≥ 90 % | {kept_db:.0%} of the dB, {kept_ssim:.0%} of the SSIM | "
        f"{verdict(min(kept_db, kept_ssim) >= GOALS['gain_kept'])} |",
        f"| INT8 vs FP32 student speed (CPU time, 256²) | ≥ 1.5× | {int8_x:.2f}× (128²: {int8_x128:.2f}×) | "
        f"{verdict(int8_x >= GOALS['int8_speedup'])} |",
        f"| INT8 SSIM to FP32 (hold-out) | ≥ 0.98 | {int8_ssim:.4f} | {verdict(int8_ssim >= GOALS['int8_ssim'])} |",
        f"| restore per 128 px face (model, 128² input, CPU time) | ≤ 15 ms | {best_128:.1f} ms "
        f"({'INT8' if fastest != 'student' else 'FP32'}; wall {best_128_wall:.1f} ms on the loaded machine; whole "
        f"`restore_source` path {min(src['student']['cpu'], src['INT8 student']['cpu']):.1f} ms CPU) | "
        f"{verdict(best_128 <= GOALS['ms_128'])} |",
        "",
        "Speed (ms, median of interleaved runs, wall / CPU):",
        "",
        "| | FP32 student | INT8 student |",
        "|---|---|---|",
    ]
    for label, row in (("model, 128² input", sp128), ("model, 256² input", sp256),
                       (f"`restore_source`, {speed['face_px']:.0f} px face (crop with margin, scale, restore)", src)):
        lines.append(f"| {label} | {row['student']['wall']:.1f} / {row['student']['cpu']:.1f} | "
                     f"{row['INT8 student']['wall']:.1f} / {row['INT8 student']['cpu']:.1f} |")
    lines += ["", "Every INT8 layout of ONNX Runtime's static quantizer on the student (256² input, 1 thread, CPU ms, "
              f"median of interleaved runs; SSIM to FP32 on {r['int8_layouts']['faces']} hold-out faces, 16 others "
              "calibrate). " + ("This CPU has VNNI (8-bit dot products in one instruction), where the U8S8 kernels "
                                "pay off:" if "VNNI" in cpu_name() else
                                "This CPU has no VNNI, so the U8S8 kernels gain little or nothing over FP32:"), "",
              "| layout | CPU ms | × FP32 | SSIM to FP32 |", "|---|---|---|---|"]
    lines += [f"| {name} | {x['cpu']:.1f} | {x['speedup']:.2f}× | {x['ssim']:.4f} |"
              for name, x in r["int8_layouts"]["layouts"].items()]
    lines += ["", "`facefuse optimize` (student variant vs FP32 student on the restore stage's own crops of "
              "`face-api-js` photos):", "",
              "| variant | min PSNR dB | mean SSIM | min SSIM | latency FP32 → variant (ms) | result |",
              "|---|---|---|---|---|---|"]
    for label, rep in r["optimize"].items():
        m, lat = rep["metrics"], list(rep["latency_ms"].values())
        lines.append(f"| {label.upper()} | {m['min_psnr_db']:.1f} | {m['mean_ssim']:.4f} | {m['min_ssim']:.4f} | "
                     f"{lat[0]:.1f} → {lat[1]:.1f} | {'PASS' if rep['passed'] else 'FAIL'} |")
    lines += [
        "",
        f"Poor sources in a fusion ({poor['pairs']} pairs: each person's photo with the face scaled to "
        f"{poor['face_px'][0]:.0f}–{poor['face_px'][1]:.0f} px + JPEG 30–40, onto two other people's photos; mesh "
        "engine; judge MobileFaceNet, reference a different sharp photo of the source person). Good sources: the "
        "same photos undegraded.",
        "",
        "| sources | restore | restored | enhanced | cos to reference | Δcos vs off (mean / worst) "
        "| fused-face sharpness | ÷ off | ÷ target photo's | bare skin ÷ target's | blotch % (median / worst change) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, res in (("poor", poor), ("good", good)):
        for mode in ("off", "off, no JPEG", "on", "auto", "auto + enhance"):
            if mode in res:
                x = res[mode]
                blotch = f"{x['blotch']:.2f} / {x['worst_blotch_change']:+.2f}" if mode != "off, no JPEG" else \
                    f"{x['blotch']:.2f} / –"
                lines.append(f"| {label} | {mode} | {x['restored']} / {res['pairs']} | "
                             f"{x.get('enhanced', 0)} / {res['pairs']} | {x['cos']:.3f} | "
                             f"{x['delta_cos']:+.3f} / {x['worst_delta_cos']:+.3f} | {x['sharp']:.0f} | "
                             f"{x['sharp_ratio']:.2f}× | {x['sharp_vs_target']:.2f}× | {x['skin_vs_target']:.2f}× | "
                             f"{blotch} |")
    lines += enhancer_effect(poor["auto"], poor["auto + enhance"])
    lines += [
        "",
        f"Post-fusion enhancement (`facefuse.fusion.enhance.enhance_fused`, {post['pairs']} pairs: source face 48 px, "
        f"target faces ≥ 120 px, median upscale {post['upscale']:.1f}×, restore off so only this step acts): skin "
        f"sharpness ÷ the target photo's {p_before:.2f} → {p_after:.2f} (median; detail gain {post['gain']:.2f}), "
        f"blotch share {post['smear_before']:.2f} → {post['smear_after']:.2f} %, identity cos "
        f"{post['cos_before']:.3f} → {post['cos_after']:.3f}.",
        "",
        f"Tiling ({tiles['shape'][1]}×{tiles['shape'][0]} face region of `obama.jpg`, 256 px tiles, 32 px overlap; "
        f"seam score = mean step across tile borders and overlap middles ÷ elsewhere; the one-pass output scores "
        f"{tiles['one pass']:.3f} on the same lines):",
        "",
        "| stitch | seam score | mean abs diff to one pass (of 255) | ms wall / CPU |",
        "|---|---|---|---|",
    ]
    for stitch in STITCHES:
        t = tiles[stitch]
        lines.append(f"| {stitch} | {t['seam']:.3f} | {t['diff']:.2f} | {t['wall']:.0f} / {t['cpu']:.0f} |")
    train = s.get("train_seconds", {})
    lines += ["", "Training time on this machine (1 PyTorch thread, shared CPU, wall clock from the log): "
              + ", ".join(f"{k} {v / 60:.1f} min" for k, v in train.items()) + "."]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
