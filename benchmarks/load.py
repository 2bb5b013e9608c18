"""Load on the HTTP service over loopback: throughput, latency percentiles, batch sizes, RSS and cold start.

The server runs as a separate process (`facefuse serve`) exactly as users start it, on a free 127.0.0.1 port; the
load generator sends pre-encoded multipart bodies from a closed loop of C concurrent clients (each sends its next
request when the previous one is answered), so the client costs little CPU next to the server on a small machine.
Every phase is bounded both in requests and in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import httpx
from common import FACES, machine, median, percentile, write_section
from prometheus_client.parser import text_string_to_metric_families

from facefuse.serve.scheduler import IDLE_RELEASE_S

TARGET_720P = FACES / "face_recognition/obama-720p.jpg"
SOURCE_FULL = FACES / "face_recognition/biden.jpg"
CONCURRENCY = (1, 4, 8, 16)
BATCHES = (1, 2, 4)


def source_720p() -> bytes:
    """A 1280×720 source: the top of biden.jpg (his face) resized, so both photos of a pair are 720p."""
    image = cv2.imread(str(SOURCE_FULL))
    width = image.shape[1]
    crop = image[: width * 9 // 16, :]
    ok, data = cv2.imencode(".jpg", cv2.resize(crop, (1280, 720), interpolation=cv2.INTER_AREA),
                            [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return data.tobytes()


def multipart_body() -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://127.0.0.1/v1/fuse",
                            files={"source": ("source.jpg", source_720p()),
                                   "target": ("target.jpg", TARGET_720P.read_bytes())})
    return request.read(), request.headers["content-type"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    cold_start_s: float

    def rss_mb(self, field_name: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def tree_memory_mb(self) -> tuple[float, float, int]:
        """RSS and PSS summed over the server and every process below it (Ray's GCS, raylet, proxy, replicas),
        and how many processes that is. PSS shares each shared page among its users, so it does not double-count."""
        pids = descendants(self.process.pid) | {self.process.pid}
        rss = pss = 0.0
        for pid in pids:
            try:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1]) / 1024
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1]) / 1024
            except OSError:  # the process ended in between
                continue
        return rss, pss, len(pids)

    def cpu_s(self) -> float:
        """User + system CPU seconds the server process has used (to tell its cost from the load generator's)."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                key = sample.name + "".join(f"|{k}={v}" for k, v in sorted(sample.labels.items()))
                values[key] = sample.value
        return values

    def stop(self) -> None:
        below = descendants(self.process.pid)
        self.process.send_signal(signal.SIGTERM)  # graceful for both backends (SIGINT may be ignored in a background job)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for pid in below:  # a Ray process that outlived its driver: end it, it is ours
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def descendants(root: int) -> set[int]:
    """Every process below ``root`` (from the parent ids in /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def start_server(max_batch: int, queue_size: int, cache_mb: int, window_ms: float, extra: tuple[str, ...] = (),
                 timeout_s: float = 60.0) -> Server:
    port = free_port()
    command = [sys.executable, "-m", "facefuse", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--max-batch", str(max_batch), "--queue-size", str(queue_size), "--log-level", "warning", *extra]
    started = time.perf_counter()
    env = {**os.environ, "FACEFUSE_ANALYSIS_CACHE_MB": str(cache_mb), "FACEFUSE_BATCH_WINDOW_MS": str(window_ms)}
    # the server's log goes to a file: a pipe nobody reads fills up and blocks a server that logs much (Ray)
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, env=env)
    url = f"http://127.0.0.1:{port}"
    while time.perf_counter() - started < timeout_s:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"server exited: {log.read().decode(errors='replace')[-4000:]}")
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return Server(process, url, time.perf_counter() - started)
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    process.kill()
    raise TimeoutError(f"server not ready within {timeout_s:.0f} s")


@dataclass
class Phase:
    latencies_s: list[float] = field(default_factory=list)
    codes: dict[int, int] = field(default_factory=dict)
    elapsed_s: float = 0.0
    stages_ms: list[dict[str, float]] = field(default_factory=list)  # each answer's Server-Timing

    @property
    def ok(self) -> int:
        return self.codes.get(200, 0)

    @property
    def server_errors(self) -> int:
        return sum(n for code, n in self.codes.items() if code >= 500)


async def closed_loop(url: str, body: bytes, content_type: str, concurrency: int, requests: int,
                      max_seconds: float) -> Phase:
    phase = Phase()
    remaining = [requests]
    stop_at = time.perf_counter() + max_seconds
    headers = {"Content-Type": content_type, "Accept": "image/jpeg"}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(http: httpx.AsyncClient) -> None:
        while remaining[0] > 0 and time.perf_counter() < stop_at:
            remaining[0] -= 1
            start = time.perf_counter()
            response = await http.post("/v1/fuse", content=body, headers=headers)
            phase.latencies_s.append(time.perf_counter() - start)
            phase.codes[response.status_code] = phase.codes.get(response.status_code, 0) + 1
            if response.status_code == 200:
                phase.stages_ms.append(server_timing(response.headers.get("server-timing", "")))

    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        phase.elapsed_s = time.perf_counter() - started
    return phase


def server_timing(header: str) -> dict[str, float]:
    """``name;dur=12.3, …`` → {name: 12.3}."""
    found = {}
    for part in header.split(","):
        name, _, duration = part.strip().partition(";dur=")
        if duration:
            found[name] = float(duration)
    return found


def stage_split(stages: list[dict[str, float]]) -> tuple[float, float, float]:
    """Median ms per request of the analysis work (decode → gate of both photos), the fusion work (prepare → encode)
    and the rest of the server time (queues, moving data between processes)."""
    analysis = [t.get("analyze_source", 0) + t.get("analyze_target", 0) for t in stages]
    fusion = [t["total"] - t.get("analyze_source", 0) - t.get("analyze_target", 0) + t.get("encode", 0)
              for t in stages if "total" in t]
    queue = [t.get("queue", 0) for t in stages]
    return median(analysis), median(fusion), median(queue)


def batch_histogram(before: dict[str, float], after: dict[str, float], max_batch: int) -> dict[int, int]:
    """Batches of each size handed to the workers between two /metrics scrapes (from cumulative buckets)."""
    def cumulative(values: dict[str, float], le: float) -> float:
        return values.get(f"facefuse_batch_size_bucket|le={le}", 0.0)

    histogram: dict[int, int] = {}
    previous = 0.0
    for size in range(1, max_batch + 1):
        count = cumulative(after, float(size)) - cumulative(before, float(size))
        histogram[size] = int(count - previous)
        previous = count
    return histogram


RAY_CONCURRENCY = (1, 8, 32)


def ray_main(args: argparse.Namespace) -> None:
    """Single process vs Ray Serve (1 and 2 replicas per deployment, ``@serve.batch`` on and off), every photo
    analysed (analysis cache off), each server a fresh `facefuse serve` process, the configurations interleaved over
    ``--rounds`` rounds and each figure the median of its rounds; writes the ``load_ray`` section."""
    per_phase = args.requests or (12 if args.quick else 48)
    max_seconds = args.max_seconds or (30.0 if args.quick else 60.0)
    rounds = args.rounds or (1 if args.quick else 2)
    body, content_type = multipart_body()
    # every server: room for the whole closed loop (uploads, deadline), so the rows measure capacity, not refusals
    common = ("--max-uploads", "64", "--deadline-ms", "60000")
    # (label, max_batch, extra flags): 2 cores → 1 replica of each deployment takes 1 CPU, 2 replicas take half
    configurations = [
        ("single process", 2, ("--max-wait-ms", "2")),
        ("Ray, 1 replica, batch off", 1, ("--backend", "ray", "--replicas", "1", "--num-cpus-per-replica", "1")),
        ("Ray, 1 replica, batch ≤ 4", 4, ("--backend", "ray", "--replicas", "1", "--num-cpus-per-replica", "1",
                                          "--max-wait-ms", "5")),
        ("Ray, 2 replicas, batch off", 1, ("--backend", "ray", "--replicas", "2", "--num-cpus-per-replica", "0.5")),
        ("Ray, 2 replicas, batch ≤ 4", 4, ("--backend", "ray", "--replicas", "2", "--num-cpus-per-replica", "0.5",
                                           "--max-wait-ms", "5")),
    ]
    phases: dict[tuple[str, int], list[Phase]] = {}
    starts: dict[str, list[tuple[float, float, float, int]]] = {}  # start s, RSS, PSS, processes
    for round_no in range(rounds):
        for label, max_batch, extra in configurations:
            server = start_server(max_batch, queue_size=128, cache_mb=0, window_ms=0.0, extra=common + extra,
                                  timeout_s=180.0)
            try:
                asyncio.run(closed_loop(server.url, body, content_type, 2, 6, max_seconds))  # warm-up
                for concurrency in RAY_CONCURRENCY:
                    count = max(per_phase, 2 * concurrency)
                    phase = asyncio.run(closed_loop(server.url, body, content_type, concurrency, count, max_seconds))
                    phases.setdefault((label, concurrency), []).append(phase)
                    print(f"round {round_no + 1}: {label}, C={concurrency}: {phase.ok / phase.elapsed_s:.1f}/s "
                          f"{phase.codes}", flush=True)
                rss, pss, processes = server.tree_memory_mb()
                starts.setdefault(label, []).append((server.cold_start_s, rss, pss, processes))
            finally:
                server.stop()
    rows = ["| server | C | requests | fusions/s | p50 ms | p95 ms | non-200 | analysis / fusion / queue ms |",
            "|---|---|---|---|---|---|---|---|"]
    for (label, concurrency), runs in phases.items():
        ms = [[v * 1000 for v in run.latencies_s] for run in runs]
        codes: dict[int, int] = {}
        for run in runs:
            for code, n in run.codes.items():
                codes[code] = codes.get(code, 0) + n
        refused = ", ".join(f"{n}× {code}" for code, n in sorted(codes.items()) if code != 200)
        split = [stage_split(run.stages_ms) for run in runs]
        rows.append(f"| {label} | {concurrency} | {sum(len(m) for m in ms)} | "
                    f"{median([run.ok / run.elapsed_s for run in runs]):.1f} | "
                    f"{median([percentile(m, 50) for m in ms]):.0f} | {median([percentile(m, 95) for m in ms]):.0f} | "
                    f"{refused or 0} | " + " / ".join(f"{median([s[i] for s in split]):.0f}" for i in range(3)) + " |")
    memory = ["| server | start → /readyz 200 | processes | RSS, all together | PSS, all together |",
              "|---|---|---|---|---|"]
    for label, values in starts.items():
        memory.append(f"| {label} | {', '.join(f'{v[0]:.1f} s' for v in values)} | {values[-1][3]} | "
                      f"{median([v[1] for v in values]):.0f} MB | {median([v[2] for v in values]):.0f} MB |")
    lines = [
        "## Ray Serve vs the single process (`benchmarks/load.py --backend ray`)",
        "",
        (f"Machine: {machine()}, **shared with other engineers' jobs while this ran** (load average far above the "
         f"2 cores): treat differences under ~30 % as noise. Each server is a fresh `facefuse serve` process "
         f"(`--backend ray` starts a one-machine Ray with 2 CPUs), queue 128, `--max-uploads 64 --deadline-ms 60000` "
         f"so the rows measure capacity rather than refusals; analysis cache off, so both photos of every request "
         f"are decoded and analysed. Client: {'`--quick`, ' if args.quick else ''}closed loop of C connections "
         f"posting the 720p pair of the section above, `Accept: image/jpeg`; max({per_phase}, 2·C) requests per row "
         f"(or {max_seconds:.0f} s) after 6 warm-up requests; the configurations were run one after the other, "
         f"{rounds} round(s), and each figure is the median over the rounds. On 2 cores, \"1 replica\" gives the "
         "analysis and the fusion deployment one CPU each; \"2 replicas\" gives each of the four replicas half a "
         "CPU (one ONNX Runtime and OpenCV thread). `batch ≤ 4`: `@serve.batch(max_batch_size=4, "
         "batch_wait_timeout_s=0.005)` merges the photos of concurrent requests into one FaceMesh run; `batch off`: "
         "one photo per run."),
        "",
        *rows,
        "",
        ("`analysis / fusion / queue ms`: medians per answered request, from its `Server-Timing` header — the "
         "analysis work of both photos (decode → detect → landmarks → gate), the fusion work (align → engine → "
         "blend → label → encode), and the server time outside both (waiting in queues, and with Ray moving the "
         "request and both decoded photos between processes)."),
        "",
        ("Start-up (each round) and memory (median, after the load, summed over the server process and every process "
        "below it):"),
        "",
        *memory,
    ]
    print(write_section("load_ray", "\n".join(lines)).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backend", choices=["local", "ray"], default="local",
                        help="ray: compare the single process with Ray Serve deployments (section load_ray)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="--backend ray: interleaved rounds (median); --goal: rounds, each on a fresh server "
                             "(default 3)")
    parser.add_argument("--quick", action="store_true", help="few requests per phase (for development)")
    parser.add_argument("--requests", type=int, default=None, help="requests per phase")
    parser.add_argument("--soak", type=int, default=None, help="requests of the RSS soak run")
    parser.add_argument("--max-seconds", type=float, default=None, help="time limit per phase")
    parser.add_argument("--goal", action="store_true", help="only issue 19's row (every photo new, concurrency 8), "
                        "written to its own section (load_goal)")
    args = parser.parse_args()
    if args.backend == "ray":
        ray_main(args)
        return
    per_phase = args.requests or (16 if args.quick else 200)
    soak = args.soak or (100 if args.quick else 2000)
    max_seconds = args.max_seconds or (30.0 if args.quick else 120.0)
    body, content_type = multipart_body()

    header = ("| analysis cache | FaceMesh batching window | max_batch | concurrency | requests | fusions/s | p50 ms | "
              "p95 ms | p99 ms | non-200 | server CPU ms/fusion")
    rows = [header + " | batch sizes |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cold_starts: list[float] = []
    total_5xx = 0
    soak_line = ""
    # The same pair is sent again and again, so with the analysis cache on (the default) both photos are analysed
    # once: the template-reuse case. The last configuration turns the cache off: every photo analysed every time.
    # Last, the cross-request batching of FaceMesh (off by default): with the cache off so FaceMesh runs at all.
    configurations = ([(max_batch, 64, CONCURRENCY, 0.0) for max_batch in BATCHES]
                      + [(2, 0, (1, 8), 0.0), (2, 0, (8,), 5.0)]) if not args.goal \
        else [(2, 0, (8,), 0.0)] * (args.rounds or 3)  # the goal's row sits near its line: one run is not enough
    goal_rounds: list[tuple[float, float]] = []  # (fusions/s, p95 ms) of each --goal round
    for max_batch, cache_mb, concurrencies, window_ms in configurations:
        server = start_server(max_batch, queue_size=64, cache_mb=cache_mb, window_ms=window_ms)
        cold_starts.append(server.cold_start_s)
        try:
            asyncio.run(closed_loop(server.url, body, content_type, 2, 6, max_seconds))  # warm-up
            for concurrency in concurrencies:
                before, cpu_before = server.metrics(), server.cpu_s()
                phase = asyncio.run(closed_loop(server.url, body, content_type, concurrency, per_phase, max_seconds))
                cpu_ms = (server.cpu_s() - cpu_before) * 1000 / max(1, phase.ok)
                histogram = batch_histogram(before, server.metrics(), max_batch)
                total_5xx += phase.server_errors
                ms = [v * 1000 for v in phase.latencies_s]
                others = sum(phase.codes.values()) - phase.ok
                refused = ", ".join(f"{n}× {code}" for code, n in sorted(phase.codes.items()) if code != 200)
                sizes = ", ".join(f"{size}: {n}" for size, n in histogram.items())
                rows.append(f"| {'on' if cache_mb else 'off'} | {f'{window_ms:.0f} ms' if window_ms else 'off'} | "
                            f"{max_batch} | {concurrency} | {len(ms)} | "
                            f"{phase.ok / phase.elapsed_s:.1f} | "
                            f"{percentile(ms, 50):.0f} | {percentile(ms, 95):.0f} | {percentile(ms, 99):.0f} | "
                            f"{others}{f' ({refused})' if refused else ''} | {cpu_ms:.0f} | {sizes} |")
                print(rows[-1], flush=True)
                goal_rounds.append((phase.ok / phase.elapsed_s, percentile(ms, 95)))
            if max_batch == 2 and cache_mb and not window_ms and not args.goal:
                rss_before = server.rss_mb()
                phase = asyncio.run(closed_loop(server.url, body, content_type, 8, soak, max_seconds * 5))
                total_5xx += phase.server_errors
                rss_after, peak = server.rss_mb(), server.rss_mb("VmHWM")
                time.sleep(IDLE_RELEASE_S + 1.5)  # quiet: the scheduler hands the workers' free pages back
                rss_idle = server.rss_mb()
                soak_line = (f"RSS of the server (max_batch 2) before / after {len(phase.latencies_s)} more requests "
                             f"at concurrency 8: {rss_before:.0f} MB / {rss_after:.0f} MB; "
                             f"{IDLE_RELEASE_S + 1.5:.1f} s later, idle: {rss_idle:.0f} MB; peak RSS (VmHWM) over "
                             f"the whole run: {peak:.0f} MB.")
                print(soak_line, flush=True)
        finally:
            server.stop()

    if args.goal:
        lines = ["## Service, every photo new, concurrency 8 (`benchmarks/load.py --goal`)", "",
                 (f"Machine: {machine()}. As in the load section below: `facefuse serve` on 127.0.0.1, analysis "
                  f"cache off (every photo analysed on every request), max_batch 2, {per_phase} requests (or "
                  f"{max_seconds:.0f} s) at concurrency 8; {len(goal_rounds)} rounds, one row each, each on a "
                  "fresh server."), "", *rows, "",
                 (f"Median of the rounds: {median([r[0] for r in goal_rounds]):.1f} fusions/s, p95 "
                  f"{median([r[1] for r in goal_rounds]):.0f} ms (rounds {min(r[0] for r in goal_rounds):.1f}–"
                  f"{max(r[0] for r in goal_rounds):.1f} fusions/s, p95 {min(r[1] for r in goal_rounds):.0f}–"
                  f"{max(r[1] for r in goal_rounds):.0f} ms)."), "",
                 "Goal (issue 19): ≥ 20 fusions/s, p95 ≤ 400 ms."]
        print(write_section("load_goal", "\n".join(lines)).read_text())
        return
    lines = [
        "## HTTP service under load (`benchmarks/load.py`)",
        "",
        (f"Machine: {machine()}. Server: `facefuse serve` in its own process on 127.0.0.1, default workers "
         f"({os.cpu_count()}), queue 64; client: {'`--quick`, ' if args.quick else ''}closed loop of C concurrent "
         f"connections posting pre-encoded multipart 720p pairs (source: top of `biden.jpg` resized to 1280×720, "
         f"target: `obama-720p.jpg`), `Accept: image/jpeg`. {per_phase} requests per row (or {max_seconds:.0f} s), "
         "after 6 warm-up requests. Latency is the client's (upload + queue + fusion + JPEG encode + download)."),
        "",
        *rows,
        "",
        ("Analysis cache `on` is the default (`FACEFUSE_ANALYSIS_CACHE_MB=64`): this load repeats one pair, so both "
         "photos are decoded and analysed once and later requests pay only render + blend + encode — the case of a "
         "template reused across users. `off` analyses both photos on every request (distinct uploads)."),
        "",
        soak_line,
        "",
        (f"Cold start (process start → `/readyz` 200): {', '.join(f'{s:.2f} s' for s in cold_starts)} "
         f"(one per server started). 5xx answers in the whole run: {total_5xx}."),
        "",
        "Goals: ≥ 15 fusions/s at 720p, p95 ≤ 400 ms at concurrency 8, peak RSS ≤ 400 MB, zero 5xx, cold start ≤ 2 s.",
    ]
    print(write_section("load", "\n".join(lines)).read_text())


if __name__ == "__main__":
    main()
