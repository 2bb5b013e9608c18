"""Batch jobs: a photo job against the same photos sent one by one to /v1/fuse, the cost of polling a running job,
and how fast hostile zips are refused. Writes benchmarks/results/jobs.md.

The server is a real ``facefuse serve`` process (default settings, one job worker); rounds interleave the job and
the one-by-one requests so drift of this shared VM affects both alike.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import zipfile

import httpx
from common import FACES, machine, percentile, write_section
from load import start_server

HTTP = httpx.Client(timeout=60)  # one keep-alive client, as a polling app would hold (a new client costs ~50 ms)
TARGETS = ["biden.jpg", "obama2.jpg", "two_people.jpg", "obama-480p.jpg", "obama-720p.jpg", "obama_small.jpg"]


def photos(count: int) -> list[tuple[str, bytes]]:
    folder = FACES / "face_recognition"
    return [(TARGETS[i % len(TARGETS)], (folder / TARGETS[i % len(TARGETS)]).read_bytes()) for i in range(count)]


def run_job(url: str, source: bytes, targets: list[tuple[str, bytes]], polls: list[float], *,
            keep: bool = False) -> tuple[float, str]:
    """Seconds from the POST to the job's done state, and its id; each status poll's latency goes to ``polls``."""
    files = [("source", ("source.jpg", source))] + [("targets", target) for target in targets]
    start = time.perf_counter()
    answer = HTTP.post(url + "/v1/jobs", files=files, timeout=300)
    answer.raise_for_status()
    job_id = answer.json()["id"]
    while True:
        asked = time.perf_counter()
        job = HTTP.get(f"{url}/v1/jobs/{job_id}", timeout=30).json()
        polls.append((time.perf_counter() - asked) * 1000)
        if job["state"] not in ("queued", "running"):
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    if job["state"] != "done" or job["errors"]:
        raise RuntimeError(f"the job did not succeed: {job['state']} {job['errors'] or job['error']}")
    HTTP.get(f"{url}/v1/jobs/{job_id}/result", timeout=60).raise_for_status()
    if not keep:
        HTTP.delete(f"{url}/v1/jobs/{job_id}", timeout=30)
    return elapsed, job_id


def idle_polls(url: str, job_id: str) -> list[float]:
    """Latency of the same status request with no job running (the reference for the polls above)."""
    times = []
    for _ in range(10):
        start = time.perf_counter()
        HTTP.get(f"{url}/v1/jobs/{job_id}", timeout=30).raise_for_status()
        times.append((time.perf_counter() - start) * 1000)
    return times


def run_one_by_one(url: str, source: bytes, targets: list[tuple[str, bytes]]) -> float:
    start = time.perf_counter()
    for name, data in targets:
        answer = HTTP.post(url + "/v1/fuse", files={"source": ("source.jpg", source), "target": (name, data)},
                            headers={"Accept": "image/jpeg"}, timeout=60)
        answer.raise_for_status()
    return time.perf_counter() - start


def refusal_ms(url: str, source: bytes, archive: bytes, status: int) -> float:
    start = time.perf_counter()
    answer = HTTP.post(url + "/v1/jobs", files=[("source", ("s.jpg", source)), ("targets", ("a.zip", archive))],
                        timeout=60)
    elapsed = (time.perf_counter() - start) * 1000
    if answer.status_code != status:
        raise RuntimeError(f"expected {status}, got {answer.status_code}: {answer.text[:200]}")
    return elapsed


def zip_of(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="6 photos, one round (for development)")
    args = parser.parse_args()
    count, rounds = (6, 1) if args.quick else (24, 3)
    source = (FACES / "face_recognition" / "obama.jpg").read_bytes()
    targets = photos(count)
    with tempfile.TemporaryDirectory(prefix="facefuse-jobs-bench-") as folder:
        os.environ["FACEFUSE_JOBS_DIR"] = folder  # start_server passes the environment on
        server = start_server(max_batch=2, queue_size=32, cache_mb=64, window_ms=0)
        try:
            job_s, single_s, polls = [], [], []
            # warm: every photo's analysis is cached (content-keyed) before either path is timed
            run_one_by_one(server.url, source, targets)
            _, finished = run_job(server.url, source, targets[:1], [], keep=True)
            for _ in range(rounds):
                job_s.append(run_job(server.url, source, targets, polls)[0])
                single_s.append(run_one_by_one(server.url, source, targets))
            photo = targets[-1][1]
            bomb = zip_of({"a.jpg": photo, "b.jpg": bytes(60 * 2**20)})
            evil = zip_of({"a.jpg": photo, "../../escaped.jpg": photo})
            idle = idle_polls(server.url, finished)
            bomb_ms = [refusal_ms(server.url, source, bomb, 413) for _ in range(5)]
            evil_ms = [refusal_ms(server.url, source, evil, 400) for _ in range(5)]
        finally:
            server.stop()
    job_med, single_med = statistics.median(job_s), statistics.median(single_s)
    setup = (f"Machine: {machine()} (shared with other work while measured: figures drift, compare within the "
             f"table). `facefuse serve` with its defaults (one job worker); {count} photos (720p and smaller, one "
             f"source), {rounds} interleaved round(s){' (`--quick`)' if args.quick else ''}.")
    one_by_one = (f"| the same {count} photos as {count} sequential `POST /v1/fuse` | {single_med:.2f} s | "
                  f"{count / single_med:.2f} |")
    polling = (f"Status polls while jobs ran (`GET /v1/jobs/{{id}}`, one keep-alive connection, {len(polls)} polls): "
               f"median {statistics.median(polls):.1f} ms, p95 {percentile(polls, 95):.1f} ms (the job's threads "
               f"and the poll share the 2 cores); with no job running: median {statistics.median(idle):.1f} ms.")
    refusals = (f"Hostile zips refused (round trip, median of 5): a 60 MB zip bomb ({len(bomb) / 1e3:.0f} kB "
                f"compressed) → 413 `JOB_TOO_LARGE` in {statistics.median(bomb_ms):.1f} ms; a `../` member → 400 "
                f"`BAD_ARCHIVE` in {statistics.median(evil_ms):.1f} ms (nothing inflated, nothing written).")
    lines = ["## Batch jobs (`benchmarks/jobs.py`)", "", setup, "",
             "| | median wall time | photos/s |", "|---|---|---|",
             f"| one job of {count} photos (POST → done, polled every 50 ms) | {job_med:.2f} s | {count / job_med:.2f} |",
             one_by_one, "", polling, "", refusals]
    print(write_section("jobs", "\n".join(lines)).read_text())


if __name__ == "__main__":
    sys.exit(main())
