"""INT8 and FP16 variants of the pipeline's own models on this CPU: latency, size and the quality report against
FP32, then end-to-end fusion with `--precision int8` against FP32 (speed and identity retrieval)."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from common import FACES, SHARED, machine, median, write_section

from facefuse.config import AnalysisConfig, RuntimeConfig, StoreConfig
from facefuse.fusion.engine import FusionOptions
from facefuse_eval.fusion import IdentityJudge
from facefuse.models import ModelStore
from facefuse.optimize import Int8Options, OptimizeRequest, QualityReport, optimize_model
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.runtime import Runtime

MODELS = ["blazeface_short", "blazeface_full", "facemesh", "yunet", "retinaface_mbnet025", "mobilefacenet", "face_segmenter"]
QUICK_MODELS = ["blazeface_full", "mobilefacenet"]
CALIBRATION = SHARED / "train" / "utkface" / "images"  # tight crops: a different distribution from the held-out set
HOLDOUT = FACES / "face_recognition"
PAIRS = [("biden.jpg", "obama-720p.jpg"), ("obama.jpg", "biden.jpg"), ("knn_examples/train/rose_leslie/img1.jpg",
                                                                       "knn_examples/train/kit_harington/john1.jpeg")]


def quality_text(report: QualityReport) -> str:
    return ", ".join(f"{c.metric} {c.value:.4g}" for c in report.checks)


# Tried in order until one passes the report: the cheapest, most common settings first.
LADDER = [Int8Options("minmax"), Int8Options("minmax", per_channel=True), Int8Options("percentile", per_channel=True),
          Int8Options("entropy", per_channel=True)]


# One intra-op thread per session, as each of the service's workers runs: on these 0.06–0.7 GFLOP models two
# threads mostly add synchronisation, and on a shared 2-core VM they made medians swing by 2–3× between runs.
ONE_THREAD = RuntimeConfig(intra_op_threads=1)


def optimise_all(models: list[str], store: ModelStore, work: Path, images: int,
                 runs: int) -> dict[str, dict[str, QualityReport]]:
    """Per model: the first INT8 setting of the ladder that passes (installed), or the last tried; and FP16."""
    reports: dict[str, dict[str, QualityReport]] = {}
    for name in models:
        for options in LADDER:
            request = OptimizeRequest(name, "int8", output=work / f"{name}.int8.onnx", calibration=CALIBRATION,
                                      holdout=HOLDOUT, int8=options, max_images=images, latency_runs=runs,
                                      install=True)
            int8 = optimize_model(request, store, ONE_THREAD)
            if int8.passed:
                break
        fp16 = optimize_model(OptimizeRequest(name, "fp16", output=work / f"{name}.fp16.onnx", holdout=HOLDOUT,
                                              max_images=images, latency_runs=runs), store, ONE_THREAD)
        reports[name] = {"int8": int8, "fp16": fp16}
    return reports


def setting(report: QualityReport) -> str:
    return f"{report.settings['method']}{', per-channel' if report.settings['per_channel'] else ''}"


def fusion_runs(fusers: dict[str, Fuser], judge: IdentityJudge, runs: int) -> dict[str, tuple[float, list[float]]]:
    """Per precision: (median ms of a whole fusion, similarity of each result to its source by the independent
    judge). The precisions take turns run by run so machine load affects them alike."""
    times: dict[str, list[float]] = {name: [] for name in fusers}
    similarity: dict[str, list[float]] = {name: [] for name in fusers}
    for source_name, target_name in PAIRS:
        source = (FACES / "face_recognition" / source_name).read_bytes()
        target = (FACES / "face_recognition" / target_name).read_bytes()
        results = {}
        for name, fuser in fusers.items():
            fuser.fuse(source, target, FusionOptions())
        for _ in range(runs):
            for name, fuser in fusers.items():
                start = time.perf_counter()
                results[name] = fuser.fuse(source, target, FusionOptions(visible_label=False))
                times[name].append((time.perf_counter() - start) * 1000)
        reference = next(iter(fusers.values()))
        source_analysis = reference.analyze(source)
        source_vector = judge.embed(source_analysis.image, max(source_analysis.faces, key=lambda f: f.area))
        for name, result in results.items():
            face = max(reference.analyzer.analyze(result.image).faces, key=lambda f: f.area)
            similarity[name].append(float(judge.embed(result.image, face) @ source_vector))
    return {name: (median(times[name]), similarity[name]) for name in fusers}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    models = QUICK_MODELS if args.quick else MODELS
    images, runs = (16, 5) if args.quick else (64, 100)
    with tempfile.TemporaryDirectory(prefix="facefuse-bench-") as tmp:
        home = Path(tmp) / "home"
        shutil.copytree(StoreConfig.from_env().home / "models", home / "models")
        for stale in (home / "models").glob("*.int8.onnx*"):
            stale.unlink()
        store_config = StoreConfig(home=home)
        store = ModelStore(store_config)
        reports = optimise_all(models, store, Path(tmp), images, runs)
        # analysis cache off: the same pairs are fused again and again, and precision only matters when analysing
        fusers = {"fp32": Fuser(FuserConfig(store=store_config, analysis_cache_mb=0)),
                  "int8": Fuser(FuserConfig(store=store_config, analysis=AnalysisConfig(precision="int8"),
                                            analysis_cache_mb=0))}
        e2e = fusion_runs(fusers, IdentityJudge(store, Runtime()), runs // 3 or 1)
    lines = ["## Model optimisation (`benchmarks/optimize.py`)", "",
             f"Machine: {machine()}. Calibration: {images} photos of UTKFace (aligned crops); held-out report: "
             f"the face_recognition photos. INT8 = static QDQ, output layers kept in float; the first setting "
             f"that passes of: minmax per-tensor, then minmax / percentile / entropy per-channel. Latency = median of "
             f"{runs} runs of one model call on one thread, warm, FP32 and the variant taking turns run by run.", "",
             "| model | FP32 ms | INT8 ms | speed-up | FP32 MB | INT8 MB | INT8 setting | INT8 quality (held-out) "
             "| report |", "|---|---|---|---|---|---|---|---|---|"]
    for name, by in reports.items():
        r = by["int8"]
        lines.append(f"| {name} | {r.latency_ms['fp32']:.2f} | {r.latency_ms['int8']:.2f} | {r.speedup:.2f}× | "
                     f"{r.size_bytes['fp32'] / 1e6:.2f} | {r.size_bytes['int8'] / 1e6:.2f} | {setting(r)} | {quality_text(r)} | "
                     f"{'PASS' if r.passed else 'FAIL'} |")
    lines += ["", "FP16 (`--precision fp16`) on the same CPU — meant for GPU providers:", "",
              "| model | FP32 ms | FP16 ms | FP16/FP32 time | FP16 MB | quality | report |", "|---|---|---|---|---|---|---|"]
    for name, by in reports.items():
        r = by["fp16"]
        lines.append(f"| {name} | {r.latency_ms['fp32']:.2f} | {r.latency_ms['fp16']:.2f} | "
                     f"{r.latency_ms['fp16'] / r.latency_ms['fp32']:.2f}× | {r.size_bytes['fp16'] / 1e6:.2f} | "
                     f"{quality_text(r)} | {'PASS' if r.passed else 'FAIL'} |")
    installed = [n for n, by in reports.items() if by["int8"].passed]
    lines += ["", f"End-to-end fusion ({len(PAIRS)} source/target pairs, mesh engine), INT8 variants installed for: "
              f"{', '.join(installed) or 'none'} (the others run FP32):", "",
              "| precision | median ms per fusion | identity similarity to source (MobileFaceNet judge, per pair) |",
              "|---|---|---|"]
    for precision, (ms, sims) in e2e.items():
        lines.append(f"| {precision} | {ms:.1f} | {', '.join(f'{s:.3f}' for s in sims)} |")
    path = write_section("optimize", "\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
