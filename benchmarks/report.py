"""Assemble BENCHMARKS.md from the section files the benchmark scripts wrote under benchmarks/results/."""

from __future__ import annotations

from common import REPO, RESULTS

ORDER = ["analysis", "quality", "naturalness", "identity_ablation", "speed_ab", "outputs_ab", "fusion_speed",
         "load_goal", "load", "load_ray", "optimize", "engines_cost", "segmenter", "restorer", "video", "reid", "jobs",
         "stages", "soak"]

HEADER = """# Benchmarks

Every figure below is written by a script under `benchmarks/` from this very code (`make bench` runs them all and
rebuilds this file). Timings are medians of several runs on the machine named in each section; the machine is
shared and noisy, so small differences are not significant.
"""


def main() -> None:
    sections = {p.stem: p.read_text() for p in RESULTS.glob("*.md")}
    names = [n for n in ORDER if n in sections] + sorted(n for n in sections if n not in ORDER)
    body = "\n".join(sections[n].rstrip() + "\n" for n in names)
    (REPO / "BENCHMARKS.md").write_text(HEADER + "\n" + body)
    print(f"BENCHMARKS.md: {', '.join(names)}")


if __name__ == "__main__":
    main()
