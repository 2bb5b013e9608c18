"""Which engine should a CPU user pick: compute per face of every supported swapper against the mesh engine.

GFLOPs are counted from each ONNX graph (facefuse_eval.flops) when the file is on this machine; the swapper
weights are not downloadable here, so for those the table says so instead of guessing. The CPU's sustained
throughput is measured on the pipeline's own convnets (GFLOPs counted the same way ÷ measured latency), and a
swapper's CPU time per face is estimated as its GFLOPs ÷ the best throughput seen — a lower bound.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import FACES, machine, median, write_section

from facefuse.fusion.engine import FusionOptions
from facefuse.fusion.swappers import SWAPPERS
from facefuse.models import ModelStore
from facefuse_eval.flops import count_macs
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.runtime import Runtime

PIPELINE_MODELS = ["blazeface_short", "blazeface_full", "facemesh", "yunet", "mobilefacenet"]
# Not measured here: the figure the project's brief states for inswapper_128, shown only with that label.
STATED_GFLOPS = {"inswapper_128": 175.0}
SOURCE = FACES / "face_recognition/biden.jpg"
TARGET = FACES / "face_recognition/obama-720p.jpg"


def model_latency_ms(session, runs: int) -> float:
    feeds = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.float32)
             for i in session.get_inputs()}
    for _ in range(3):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1000)
    return median(times)


def mesh_engine_ms(runs: int) -> tuple[float, float]:
    """(engine work per face: prepare_source + render + blend, whole fusion) medians on a 720p target."""
    fuser = Fuser(FuserConfig(analysis_cache_mb=0))  # whole fusion = both photos analysed, as for new uploads
    source, target = SOURCE.read_bytes(), TARGET.read_bytes()
    fuser.fuse(source, target, FusionOptions())
    engine, total = [], []
    for _ in range(runs):
        t = fuser.fuse(source, target, FusionOptions()).timings_ms
        engine.append(t["prepare_source"] + t["render"] + t["blend"])
        total.append(t["total"])
    return median(engine), median(total)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 5 if args.quick else 30
    store, runtime = ModelStore(), Runtime()
    throughput = {}
    lines = ["## Compute cost per face: swappers vs the mesh engine (`benchmarks/engines_cost.py`)", "",
             f"Machine: {machine()}. Medians of {runs} runs.", "",
             "CPU throughput measured on the pipeline's own models (GFLOPs = 2 × MACs of Conv/Gemm/MatMul):", "",
             "| model | GFLOPs (counted) | median ms | GFLOP/s |", "|---|---|---|---|"]
    for name in PIPELINE_MODELS:
        path = store.ensure(name)
        gflops = count_macs(path).gflops
        ms = model_latency_ms(runtime.session(path), runs)
        throughput[name] = gflops / (ms / 1000)
        lines.append(f"| {name} | {gflops:.3f} | {ms:.2f} | {throughput[name]:.1f} |")
    best = max(throughput.values())
    engine_ms, total_ms = mesh_engine_ms(runs)
    lines += ["", f"Best sustained throughput: **{best:.1f} GFLOP/s**; estimates below divide by it (a lower bound "
              "on time: big generator graphs rarely run faster per FLOP than these).", "",
              "| engine | GFLOPs per face | source of the figure | CPU time per face |", "|---|---|---|---|",
              f"| mesh (built in) | — (no neural network) | — | **{engine_ms:.0f} ms measured** "
              f"(whole 720p fusion incl. analysis: {total_ms:.0f} ms) |"]
    for name, spec in SWAPPERS.items():
        if store.is_cached(name):
            path = store.ensure(name)
            gflops = count_macs(path).gflops
            ms = model_latency_ms(runtime.session(path), max(3, runs // 5))
            lines.append(f"| {name} ({spec.size} px) | {gflops:.1f} | counted from the graph | {ms:.0f} ms measured |")
        elif name in STATED_GFLOPS:
            gflops = STATED_GFLOPS[name]
            lines.append(f"| {name} ({spec.size} px) | ≈{gflops:.0f} | stated in the project brief, not verified "
                         f"here | ≥ {gflops / best * 1000:.0f} ms estimated |")
        else:
            lines.append(f"| {name} ({spec.size} px) | not measured | weights not available on this machine | — |")
    lines += ["", "Only rows marked *measured* or *counted* were run here; swapper weights cannot be downloaded on "
              "this machine, so their cost is unmeasured unless a figure is labelled otherwise."]
    path = write_section("engines_cost", "\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
