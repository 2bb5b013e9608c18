"""End-to-end fusion speed in a warm process (720p and 4K targets, one face), per stage, with the process's CPU time
beside the wall time (the machine is shared: CPU time inflates less with the neighbours' load), and the CLI's peak
RSS. ``--profile`` adds cProfile's top functions of the 720p case (where the stage times come from)."""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time

import cv2
from common import FACES, child_run, machine, median, write_section
from phone_photos import phone_jpeg

from facefuse.allocator import keep_freed_memory
from facefuse.fusion.engine import FusionOptions
from facefuse.pipeline import Fuser, FuserConfig

SOURCE = FACES / "face_recognition/biden.jpg"
SECOND_SOURCE = FACES / "face_recognition/knn_examples/train/biden/biden2.jpg"  # the same person, another photo
TARGET_720P = FACES / "face_recognition/obama-720p.jpg"
TARGET_1080P = FACES / "face_recognition/obama-1080p.jpg"
PHONE_SOURCE = FACES / "hard/same-person/elon_musk/01_event_smiling_blue_backdrop.jpg"  # scaled to a phone photo's size
SMALL_FACE_PX = 48  # the poor source's face width (issue 21: faces ~40–64 px, JPEG 30–40)
STAGES = ["source_decode", "source_detect", "source_landmarks", "source_gate", "source_restore", "source_render",
          "source_segment",
          "decode", "detect", "landmarks", "gate", "restore", "align", "render", "segment", "relight", "blend", "post",
          "label", "total"]  # the keys of FusionResult.timings_ms: the source's slice prefixed, the target's stages by name


def four_k_jpeg() -> bytes:
    """A 3840×2160 JPEG made from the 1080p photo, so the 4K run decodes a real 4K file."""
    image = cv2.imread(str(TARGET_1080P))
    ok, data = cv2.imencode(".jpg", cv2.resize(image, (3840, 2160), interpolation=cv2.INTER_CUBIC),
                            [cv2.IMWRITE_JPEG_QUALITY, 92])
    assert ok
    return data.tobytes()


def small_source(fuser: Fuser, face_px: float = SMALL_FACE_PX, quality: int = 35) -> bytes:
    """The source photo as a poor one (issue 21's "poor sources"): scaled so its face is ``face_px`` wide, then
    JPEG ``quality``; ``restore=auto`` restores it, ``enhance=auto`` then sharpens the fused face."""
    analysis = fuser.analyze(SOURCE)
    scale = face_px / float(max(analysis.faces, key=lambda f: f.area).box[2])
    small = cv2.resize(cv2.imread(str(SOURCE)), None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    ok, data = cv2.imencode(".jpg", small, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return data.tobytes()


Case = tuple[Fuser, bytes | list[bytes], bytes, FusionOptions]  # a source: one photo or several


def timed_runs(cases: dict[str, Case], runs: int) -> dict[str, dict[str, float]]:
    """Median stage times per case; the cases take turns run by run, so a noisy neighbour slows all of them alike.
    ``CPU`` is the process's CPU time (every thread) over the same call as ``total incl. JPEG encode``."""
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in cases}
    for round_ in range(runs + 3):
        for name, (fuser, source, target, options) in cases.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            result = fuser.fuse(source, target, options)
            result.encode("jpeg")
            wall, cpu = (time.perf_counter() - start) * 1000, (time.process_time() - start_cpu) * 1000
            if round_ < 3:
                continue  # warm-up
            for stage, value in result.timings_ms.items():
                samples[name].setdefault(stage, []).append(value)
            samples[name].setdefault("total incl. JPEG encode", []).append(wall)
            samples[name].setdefault("CPU ms (process, all threads)", []).append(cpu)
    return {name: {stage: median(values) for stage, values in stages.items()} for name, stages in samples.items()}


def profile(case: Case, runs: int) -> str:
    """cProfile's top functions (own time) over ``runs`` fusions of one case."""
    fuser, source, target, options = case
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        fuser.fuse(source, target, options).encode("jpeg")
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def cli_peak_rss_mb(target: str) -> tuple[float, float]:
    """Peak RSS (MB) and wall time (s) of one `facefuse fuse` process, started through the clean launcher."""
    with tempfile.TemporaryDirectory() as tmp:
        wall, rss = child_run([sys.executable, "-m", "facefuse", "fuse", "--source", str(SOURCE), "--target", target,
                               "--output", os.path.join(tmp, "out.jpg")])
    return rss, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of the 720p case")
    parser.add_argument("--section", default="fusion_speed", help="results section to write (one per run kept)")
    parser.add_argument("--title", default="Fusion speed", help="the section's heading")
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = 5 if args.quick else 40
    keep_freed_memory()  # as the CLI does for its process (facefuse.allocator)
    fresh = Fuser(FuserConfig(analysis_cache_mb=0))  # every photo decoded and analysed on every call
    reusing = Fuser()  # default analysis cache: both photos were seen before (a template reused across users)
    source, target_720p, target_4k = SOURCE.read_bytes(), TARGET_720P.read_bytes(), four_k_jpeg()
    options = FusionOptions()
    poor = small_source(fresh)
    cases = {"720p (1280×720)": (fresh, source, target_720p, options),
             "4K (3840×2160)": (fresh, source, target_4k, options),
             "720p, photos seen before": (reusing, source, target_720p, options),
             "4K, photos seen before": (reusing, source, target_4k, options),
             # the lead for small faces (the engine's crop sized to the face): the same 720p pair at a 256 px crop
             "720p, 256 px crop": (fresh, source, target_720p, options.model_copy(update={"crop_size": 256})),
             # several photos of the source person (Fuser.prepare): each is prepared; here two, both new
             "720p, two source photos": (fresh, [source, SECOND_SOURCE.read_bytes()], target_720p, options),
             # a poor source (issue 21): restore=auto restores it; enhance=auto also sharpens the fused face
             "720p, small source": (fresh, poor, target_720p, options),
             "720p, small source, enhance=auto": (fresh, poor, target_720p,
                                                  options.model_copy(update={"enhance": "auto"})),
             # a phone-sized photo as the source (4000 px a side): decoded at ½ scale (facefuse.stages.decode)
             "720p, 4000 px source": (fresh, phone_jpeg(PHONE_SOURCE), target_720p, options)}
    results = timed_runs(cases, runs)
    load_after = os.getloadavg()
    if args.profile:
        print(profile(cases["720p (1280×720)"], 5 if args.quick else 20))
    rss = [cli_peak_rss_mb(str(TARGET_720P)) for _ in range(1 if args.quick else 3)]
    header = "| stage (ms, median) | " + " | ".join(results) + " |"
    rows = [header, "|---|" + "---|" * len(results)]
    for stage in [*STAGES, "total incl. JPEG encode", "CPU ms (process, all threads)"]:
        rows.append(f"| {stage} | " + " | ".join(f"{r[stage]:.1f}" if stage in r else "–" for r in results.values())
                    + " |")
    lines = [
        f"## {args.title} (`benchmarks/fusion_speed.py`)",
        "",
        f"Machine: {machine()}. Mesh engine, default degrees, warm `Fuser`, {runs} runs after 3 warm-ups, the",
        f"{len(cases)} cases taking turns run by run; inputs",
        f"are JPEG bytes (decode included). Source: `{SOURCE.name}` (970×2204). `total` is the pipeline's own sum",
        "(the target's analysis runs on a second thread beside the source's, so the sum can exceed the wall time);",
        "the last row adds encoding the output as JPEG. The first two columns analyse both photos on every call",
        "(analysis cache off); the last two show the default cache when both photos were seen before (a template",
        "reused across users): a content hash in the decode stage replaces decode, detection and landmarks. The",
        "render crop is sized to the face (at most `crop_size`, 512 by default); the 256 px column caps it. The",
        "next column gives two photos of the source person (`biden.jpg` and knn_examples' `biden2.jpg`, both new):",
        "the source's rows are the two photos' times summed. The next two give a poor source: `biden.jpg` scaled",
        f"so its face is {SMALL_FACE_PX} px wide, JPEG 35 (new on every call): `restore=auto` restores it (the",
        "`source_restore` row), and with `enhance=auto` the `post` row sharpens the fused face. The last: a phone",
        f"photo's size as the source: `{PHONE_SOURCE.name}` (1460×1460) scaled up to 4000×4000 (tests/phone_photos.py,",
        "JPEG 92, new on every call), which the decode stage decodes at ½ scale.",
        f"Load average (1 min) at the start / end of the timed runs: {load_before[0]:.1f} / {load_after[0]:.1f} on",
        f"{os.cpu_count()} cores; the CPU row is the steadier figure when that is above the core count.",
        "",
        *rows,
        "",
        (f"Peak RSS of one `facefuse fuse` CLI process (720p target, process start to exit): "
        f"{median([r[0] for r in rss]):.0f} MB (median of {len(rss)}); wall time {median([r[1] for r in rss]):.2f} s."),
        "",
        ("Goals (issue 19): 720p both photos new ≤ 60 ms wall and ≤ 90 ms CPU; both photos seen before ≤ 30 ms; "
        "4K ≤ 200 ms; CLI peak RSS ≤ 300 MB."),
    ]
    print(write_section(args.section, "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
