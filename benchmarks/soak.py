"""Soak: a real ``facefuse serve`` process under mixed traffic and a hostile probe for a bounded time (10 minutes by
default), killed with ``kill -9`` half-way and restarted on the same jobs folder. Writes
benchmarks/results/soak.md.

What runs at once, all over loopback:

- normal traffic: fusions of photos no request has sent before (cropped and re-encoded, so no cache helps),
  detects, photo jobs and video jobs created, polled, downloaded, some deleted while they run, some after;
- the probe: 16 uploads that send one byte every 4 s and idle connections that send nothing (from 127.0.0.2, as
  another client would), and bad inputs of every kind the probe found (damaged TIFF, 300-character boundary,
  ``Host: localhost:80@evil.example``, two Host headers, a zip of dot-files, lax booleans, oversized bodies…).

What it checks and reports: no answer is a 5xx; the server's RSS at start, peak and end; every accepted job ends
done with a correct result (a zip with one labelled photo per target, a labelled video with every frame) or was
deleted (then 404, and nothing of it on disk); p95 of the normal fusions during the attack beside their p95 before
it starts; the server's CPU time beside the wall time. The exit status is 1 when a check fails.

    python benchmarks/soak.py                  # 600 s
    python benchmarks/soak.py --duration-s 240 # what a busy shared machine can afford
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import zipfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import av
import httpx
from common import FACES, machine, percentile, write_section
from job_helpers import make_clip, zip_of
from load import Server, start_server
from PIL import Image

from facefuse.imageio import read_label

PHOTOS = ["biden.jpg", "obama.jpg", "obama2.jpg", "obama-480p.jpg", "obama-720p.jpg", "obama_small.jpg",
          "alex-lacamoire.png", "lin-manuel-miranda.png"]
ATTACKER = "127.0.0.2"  # loopback too: the probe's connections come from another address than the users'
SETTINGS = ("--job-max-disk-mb", "400", "--job-retention-hours", "1", "--max-uploads", "16",
            "--max-uploads-per-client", "8", "--queue-size", "8", "--deadline-ms", "30000")


@dataclass
class Tally:
    """Everything the traffic threads observed; one lock guards it all."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    fusions_before: list[float] = field(default_factory=list)  # seconds, 200s of the normal fusions
    fusions_during: list[float] = field(default_factory=list)
    unreachable: Counter[str] = field(default_factory=Counter)  # transport errors (the kill and restart)
    idle_closed_s: Counter[int] = field(default_factory=Counter)  # how long the server let idle connections be
    problems: list[str] = field(default_factory=list)
    jobs: dict[str, str] = field(default_factory=dict)  # id → "keep", "deleted"
    results_checked: Counter[str] = field(default_factory=Counter)
    checked: set[str] = field(default_factory=set)  # jobs whose result was downloaded and checked

    def status(self, kind: str, code: int) -> None:
        with self.lock:
            self.statuses.setdefault(kind, Counter())[code] += 1
            if code >= 500:
                self.problems.append(f"{kind}: {code}")

    def problem(self, text: str) -> None:
        with self.lock:
            self.problems.append(text)


class Service:
    """The server process, its URL (which changes when it is restarted) and samples of its RSS and CPU time."""

    def __init__(self, jobs_dir: Path) -> None:
        self.jobs_dir = jobs_dir
        self.lock = threading.Lock()
        self.rss_mb: list[tuple[float, float]] = []  # (seconds since the start, MB)
        self.cpu_s = 0.0  # of the processes before the current one
        self.started = time.monotonic()
        self.server = self._start()

    def _start(self) -> Server:
        return start_server(2, 8, 64, 0.0, ("--jobs-dir", str(self.jobs_dir), *SETTINGS), timeout_s=180)

    @property
    def url(self) -> str:
        with self.lock:
            return self.server.url

    def sample(self) -> None:
        try:
            status = Path(f"/proc/{self.server.process.pid}/status").read_text()
        except OSError:
            return
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                self.rss_mb.append((time.monotonic() - self.started, int(line.split()[1]) / 1024))

    def process_cpu_s(self) -> float:
        try:
            fields = Path(f"/proc/{self.server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s

    def kill_and_restart(self) -> float:
        """``kill -9``, then a new process on the same jobs folder; seconds until it is ready again."""
        self.cpu_s += self.process_cpu_s()
        start = time.monotonic()
        self.server.process.send_signal(signal.SIGKILL)
        self.server.process.wait()
        server = self._start()
        with self.lock:
            self.server = server
        return time.monotonic() - start

    def stop(self) -> None:
        self.cpu_s += self.process_cpu_s()
        self.server.stop()


def variants(count: int, seed: int) -> list[bytes]:
    """Photos no request has sent before: the test photos cropped at random (90–100 %) and re-encoded."""
    rng = random.Random(seed)
    bases = [Image.open(FACES / "face_recognition" / name).convert("RGB") for name in PHOTOS]
    out = []
    for i in range(count):
        image = bases[i % len(bases)]
        w, h = image.size
        cw, ch = int(w * rng.uniform(0.9, 1.0)), int(h * rng.uniform(0.9, 1.0))
        x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
        buffer = io.BytesIO()
        image.crop((x, y, x + cw, y + ch)).save(buffer, "JPEG", quality=rng.randint(85, 95))
        out.append(buffer.getvalue())
    return out


def _call(tally: Tally, kind: str, send: Callable[[], httpx.Response]) -> httpx.Response | None:
    try:
        answer = send()
    except httpx.TransportError as exc:
        with tally.lock:
            tally.unreachable[f"{kind} ({type(exc).__name__})"] += 1
        time.sleep(0.5)
        return None
    tally.status(kind, answer.status_code)
    return answer


def fusions(service: Service, tally: Tally, photos: list[bytes], attack_at: float, stop_at: float) -> None:
    http, rng = httpx.Client(timeout=60), random.Random(1)
    while time.monotonic() < stop_at:
        source, target = rng.sample(photos, 2)
        start = time.monotonic()
        pair = {"source": ("s.jpg", source), "target": ("t.jpg", target)}
        answer = _call(tally, "fuse", partial(http.post, service.url + "/v1/fuse", files=pair))
        if answer is not None and answer.status_code == 200:
            (tally.fusions_before if start < attack_at else tally.fusions_during).append(time.monotonic() - start)


def detects(service: Service, tally: Tally, photos: list[bytes], stop_at: float) -> None:
    http, rng = httpx.Client(timeout=60), random.Random(2)
    while time.monotonic() < stop_at:
        _call(tally, "detect", lambda: http.post(service.url + "/v1/detect",
                                                 files={"image": ("p.jpg", rng.choice(photos))}))
        time.sleep(1.0)


def _poll(service: Service, tally: Tally, http: httpx.Client, job_id: str, until: Callable[[dict], bool],
          timeout_s: float = 600) -> dict | None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        answer = _call(tally, "job poll", lambda: http.get(f"{service.url}/v1/jobs/{job_id}"))
        if answer is not None and answer.status_code == 200 and until(answer.json()):
            return answer.json()
        if answer is not None and answer.status_code == 404:
            return None
        time.sleep(0.5)
    tally.problem(f"job {job_id} never reached the awaited state")
    return None


def _delete(service: Service, tally: Tally, http: httpx.Client, job_id: str) -> None:
    for _ in range(60):  # retried across the restart
        answer = _call(tally, "job delete", lambda: http.delete(f"{service.url}/v1/jobs/{job_id}"))
        if answer is not None:
            break
    with tally.lock:
        tally.jobs[job_id] = "deleted"


def _check_result(service: Service, tally: Tally, http: httpx.Client, job: dict, frames: int) -> None:
    """A photo job's zip holds one labelled photo per item done (and at least one was); a video job's result is
    labelled and has every frame."""
    for _ in range(60):  # retried across the restart
        answer = _call(tally, "job result", lambda: http.get(service.url + job["result_url"]))
        if answer is not None:
            break
    if answer is None or answer.status_code != 200:
        tally.problem(f"job {job['id']}: no result ({answer.status_code if answer else 'unreachable'})")
        return
    if job["kind"] == "photos":
        archive = zipfile.ZipFile(io.BytesIO(answer.content))
        photos = [name for name in archive.namelist() if name != "errors.json"]
        done = job["summary"]["done"]
        good = (0 < done == len(photos) and job["summary"]["failed"] + done == job["items_page"]["total"]
                and all(read_label(archive.read(name)) for name in photos))
    else:
        with av.open(io.BytesIO(answer.content)) as video:
            good = video.metadata.get("ai_generated") == "true" and sum(1 for _ in video.decode(video=0)) == frames
    with tally.lock:
        tally.results_checked["correct" if good else "wrong"] += 1
        tally.checked.add(job["id"])
    if not good:
        tally.problem(f"job {job['id']}: wrong result")


def jobs(service: Service, tally: Tally, kind: str, source: bytes, targets: Callable[[], list[tuple[str, bytes]]],
         frames: int, stop_at: float) -> None:
    """Creates jobs one after another: two in three are kept and checked, the third deleted while it runs (every
    fifth after it finished)."""
    http = httpx.Client(timeout=120)
    n = 0
    while time.monotonic() < stop_at:
        n += 1
        files = [("source", ("s.jpg", source))] + [("targets", t) for t in targets()]
        answer = _call(tally, f"{kind} job", partial(http.post, service.url + "/v1/jobs", files=files))
        if answer is None or answer.status_code != 202:
            time.sleep(2)
            continue
        job_id = answer.json()["id"]
        with tally.lock:
            tally.jobs[job_id] = "keep"
        if n % 3 == 0:
            _poll(service, tally, http, job_id, lambda j: j["progress"]["frames_done"] >= 1 or j["state"] != "queued")
            _delete(service, tally, http, job_id)
            continue
        job = _poll(service, tally, http, job_id, lambda j: j["state"] not in ("queued", "running"))
        if job is None:
            continue
        if job["state"] != "done":
            tally.problem(f"{kind} job {job_id} ended {job['state']}: {job['error']}")
            continue
        _check_result(service, tally, http, job, frames)
        if n % 5 == 0:
            _delete(service, tally, http, job_id)


def _port(service: Service) -> int:
    return int(service.url.rsplit(":", 1)[1])


def trickler(service: Service, tally: Tally, stop_at: float) -> None:
    """One of the probe's uploads: a byte every 4 s, re-opened a second after the server drops it."""
    while time.monotonic() < stop_at:
        try:
            with socket.create_connection(("127.0.0.1", _port(service)), timeout=10,
                                          source_address=(ATTACKER, 0)) as sock:
                sock.sendall(b"POST /v1/fuse HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
                             b"boundary=b\r\nContent-Length: 1000000\r\n\r\n")
                sock.settimeout(4)
                while time.monotonic() < stop_at:
                    try:
                        answer = sock.recv(65536)
                    except TimeoutError:
                        sock.sendall(b"-")
                        continue
                    if answer:
                        tally.status("slow upload", int(answer.split()[1]))
                    break
        except OSError:
            pass
        time.sleep(1)


def idler(service: Service, tally: Tally, stop_at: float) -> None:
    """A connection that never sends a byte, re-opened when the server closes it."""
    while time.monotonic() < stop_at:
        try:
            with socket.create_connection(("127.0.0.1", _port(service)), timeout=30,
                                          source_address=(ATTACKER, 0)) as sock:
                started = time.monotonic()
                sock.recv(1)
                with tally.lock:
                    tally.idle_closed_s[round(time.monotonic() - started)] += 1
        except OSError:
            time.sleep(0.5)


def _raw(service: Service, request: bytes) -> int | None:
    try:
        with socket.create_connection(("127.0.0.1", _port(service)), timeout=30) as sock:
            sock.sendall(request)
            head = sock.recv(65536)
        return int(head.split()[1])
    except (OSError, IndexError, ValueError):
        return None


def bad_inputs(service: Service, tally: Tally, photo: bytes, stop_at: float) -> None:
    """The probe's bad requests, in turn; each must be a 4xx."""
    tiff = io.BytesIO()
    Image.open(io.BytesIO(photo)).save(tiff, "TIFF")
    broken_tiff = bytearray(tiff.getvalue())
    ifd = int.from_bytes(broken_tiff[4:8], "little")
    for i in range(int.from_bytes(broken_tiff[ifd:ifd + 2], "little")):
        entry = ifd + 2 + 12 * i
        if broken_tiff[entry:entry + 2] == (273).to_bytes(2, "little"):
            broken_tiff[entry + 2:entry + 4] = (5).to_bytes(2, "little")  # StripOffsets typed RATIONAL
    long = "b" * 300
    cases: list[tuple[str, Callable[[httpx.Client], httpx.Response | int | None]]] = [
        ("garbage", lambda h: h.post(service.url + "/v1/fuse", files={"source": ("s", b"\0" * 999),
                                                                     "target": ("t", photo)})),
        ("truncated", lambda h: h.post(service.url + "/v1/detect", files={"image": ("p.jpg", photo[:5000])})),
        ("tiff", lambda h: h.post(service.url + "/v1/detect", files={"image": ("p.tif", bytes(broken_tiff))})),
        ("boundary", lambda h: h.post(service.url + "/v1/jobs", content=f"--{long}\r\n\r\n--{long}--".encode(),
                                      headers={"Content-Type": f"multipart/form-data; boundary={long}"})),
        ("lax boolean", lambda h: h.post(service.url + "/v1/jobs", files=[("source", ("s.jpg", photo)),
                                         ("targets", ("t.jpg", photo))], data={"smoothing": "yes"})),
        ("dot-files zip", lambda h: h.post(service.url + "/v1/jobs", files=[("source", ("s.jpg", photo)), (
            "targets", ("z.zip", zip_of({"__MACOSX/._a.jpg": b"x", ".DS_Store": b"x"})))])),
        ("oversized", lambda h: _raw(service, b"POST /v1/detect HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                                           b"application/json\r\nContent-Length: 41943040\r\n\r\n{")),
        ("unknown field", lambda h: h.post(service.url + "/v1/fuse", files={"source": ("s.jpg", photo),
                                           "target": ("t.jpg", photo)}, data={"colour": "blue"})),
        ("host @", lambda h: _raw(service, b"GET /healthz HTTP/1.1\r\nHost: localhost:80@evil.example\r\n\r\n")),
        ("two hosts", lambda h: _raw(service, b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")),
        ("no such job", lambda h: h.get(service.url + "/v1/jobs/" + "0" * 32)),
    ]
    http = httpx.Client(timeout=60)
    while time.monotonic() < stop_at:
        for name, send in cases:
            try:
                answer = send(http)
            except httpx.TransportError:
                answer = None
            code = answer.status_code if isinstance(answer, httpx.Response) else answer
            if code is None:
                continue
            tally.status(f"bad input: {name}", code)
            if not 400 <= code < 500:
                tally.problem(f"bad input {name}: {code}")
            time.sleep(0.5)


def leftovers(jobs_dir: Path, deleted: list[str]) -> list[str]:
    return [job_id for job_id in deleted if any(job_id in p.name for p in jobs_dir.iterdir())]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration-s", type=float, default=600.0, help="how long the traffic runs")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="facefuse-soak-"))
    photos = variants(400, seed=7)
    clip = make_clip(work / "clip.mp4", FACES, frames=16, blank_frames=2, fps=8).read_bytes()
    tally = Tally()
    service = Service(work / "jobs")
    begin = time.monotonic()
    attack_at, stop_at = begin + 0.1 * args.duration_s, begin + args.duration_s
    rng = random.Random(3)
    normal = [threading.Thread(target=fusions, args=(service, tally, photos, attack_at, stop_at)),
              threading.Thread(target=detects, args=(service, tally, photos, stop_at)),
              threading.Thread(target=jobs, args=(service, tally, "photos", photos[0],
                                                  lambda: [(f"p{i}.jpg", rng.choice(photos)) for i in range(4)],
                                                  0, stop_at)),
              threading.Thread(target=jobs, args=(service, tally, "video", photos[1],
                                                  lambda: [("clip.mp4", clip)], 16, stop_at))]
    for thread in normal:
        thread.start()
    while time.monotonic() < attack_at:
        service.sample()
        time.sleep(1)
    attack = ([threading.Thread(target=trickler, args=(service, tally, stop_at), daemon=True) for _ in range(16)]
              + [threading.Thread(target=idler, args=(service, tally, stop_at), daemon=True) for _ in range(8)]
              + [threading.Thread(target=bad_inputs, args=(service, tally, photos[2], stop_at))])
    for thread in attack:
        thread.start()
    restart_s = None
    while time.monotonic() < stop_at:
        service.sample()
        if restart_s is None and time.monotonic() >= begin + 0.5 * args.duration_s:
            restart_s = service.kill_and_restart()
        time.sleep(1)
    for thread in normal + attack[-1:]:
        thread.join(timeout=900)
    wall_s = time.monotonic() - begin
    deleted = [job_id for job_id, fate in tally.jobs.items() if fate == "deleted"]
    http = httpx.Client(timeout=30)
    for job_id in deleted:  # deleted means gone: 404, and nothing of it on disk
        if http.get(f"{service.url}/v1/jobs/{job_id}").status_code != 404:
            tally.problem(f"deleted job {job_id} still answers")
    time.sleep(2)  # a worker interrupted by a delete lets go of the files at its next frame
    left = leftovers(work / "jobs", deleted)
    service.sample()
    service.stop()
    rss = [mb for _, mb in service.rss_mb]
    server_errors = sum(n for counts in tally.statuses.values() for code, n in counts.items() if code >= 500)
    kept = [job_id for job_id, fate in tally.jobs.items() if fate == "keep"]
    checks = {"no 5xx": server_errors == 0, "nothing left of deleted jobs": not left,
              "every kept job done with a correct result": tally.results_checked["wrong"] == 0
              and set(kept) <= tally.checked and not [p for p in tally.problems if "job" in p]}
    shutil.rmtree(work, ignore_errors=True)

    lines = ["## Soak (`benchmarks/soak.py`)", "",
             f"Machine: {machine()}. One `facefuse serve` process (2 workers, `{' '.join(SETTINGS)}`), "
             f"{wall_s:.0f} s of traffic (script default: 600 s; this run used `--duration-s {args.duration_s:g}`); "
             f"the probe starts after {0.1 * args.duration_s:.0f} s; `kill -9` at {0.5 * args.duration_s:.0f} s, "
             f"ready again {restart_s:.1f} s later. Server CPU time {service.cpu_s:.0f} s in {wall_s:.0f} s of wall "
             f"time.", "",
             "| check | result |", "|---|---|"]
    lines += [f"| {name} | {'yes' if ok else '**no**'} |" for name, ok in checks.items()]
    lines += ["", f"RSS of the server: {rss[0]:.0f} MB at the start, peak {max(rss):.0f} MB, {rss[-1]:.0f} MB at the "
              f"end (sampled every second; the restarted process included).", "",
              f"Normal fusions (new photos each time, one client in sequence): before the probe "
              f"{len(tally.fusions_before)} answered, median {percentile(tally.fusions_before, 50):.2f} s, p95 "
              f"{percentile(tally.fusions_before, 95):.2f} s; during the probe {len(tally.fusions_during)} answered, "
              f"median {percentile(tally.fusions_during, 50):.2f} s, p95 {percentile(tally.fusions_during, 95):.2f} s.",
              "", f"Jobs: {len(tally.jobs)} accepted; {tally.results_checked['correct']} results downloaded and "
              f"correct, {tally.results_checked['wrong']} wrong; {len(deleted)} deleted (one in three while running, "
              f"some after their result was checked), nothing of them left on disk: "
              f"{'yes' if not left else left}.", "",
              "| requests | answers |", "|---|---|"]
    for kind, counts in sorted(tally.statuses.items()):
        lines.append(f"| {kind} | {', '.join(f'{code}: {n}' for code, n in sorted(counts.items()))} |")
    lines += ["", "Idle connections (sending nothing) were closed by the server after: "
              + ", ".join(f"{s} s ×{n}" for s, n in sorted(tally.idle_closed_s.items())) + "."]
    if tally.unreachable:
        lines += ["", "Refused connections while the server was down (the `kill -9`): "
                  + ", ".join(f"{kind} {n}" for kind, n in sorted(tally.unreachable.items())) + "."]
    if tally.problems:
        lines += ["", "Problems: " + "; ".join(tally.problems[:20])]
    print(write_section("soak", "\n".join(lines)).read_text())
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
