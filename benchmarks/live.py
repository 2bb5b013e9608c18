"""Live camera: the web page in Debian's Chromium, whose fake camera plays 640×480 frames of the shared clip, against
`facefuse serve` on loopback.

Two phases, one server process (`--live-max-sessions 3`):
- one client for ``--seconds`` (default 60): frames/s shown, server time per frame (frame taken → fused frame sent)
  and capture-to-display latency (the page draws the camera frame → the fused frame is on its canvas), p50/p95;
- overload, three clients (three browsers) at once for ``--overload-seconds`` (default 30) on the same cores: frames/s per client,
  frames dropped by the server (a newer one arrived while it waited) and skipped by the pages (two unanswered
  already), latency p95, and the server's RSS sampled every second (start / peak / end).

CPU time is recorded beside wall time for the server process and for the browser (the browser's own decoding,
JPEG encoding and drawing run on the same two cores). Run: ``python benchmarks/live.py`` (≈ 2.5 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import FACES, SHARED, machine, median, percentile, write_section
from load import descendants, start_server

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from browser import camera_browser, chromium_browser, make_fake_camera

CLIP = SHARED / "video" / "short_hamilton_clip.mp4"
CLIP_START_S, CLIP_SECONDS = 4.3, 3.8  # the clip's longest shot where the tracker follows the singer's face
SOURCE = FACES / "face_recognition" / "obama.jpg"
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def browser_cpu_s(server_pid: int) -> float:
    return sum(cpu_s(pid) for pid in descendants(os.getpid()) - {server_pid} - descendants(server_pid))


def open_live_page(camera, url: str, in_flight: int | None = None):
    """The page with its live session started and warm; ``in_flight`` overrides the page's default."""
    context = camera.new_context(viewport={"width": 1280, "height": 900}, permissions=["camera"])
    page = context.new_page()
    page.set_default_timeout(120_000)
    page.goto(url + "/")
    if in_flight is not None:  # fixed, not the page's own choice
        page.evaluate("n => { window.facefuseLive.adaptive = false; window.facefuseLive.inFlight = n; }", in_flight)
    page.set_input_files("#source-file", str(SOURCE))
    page.locator("#live-start").click()
    page.wait_for_function("() => window.facefuseLive.shown >= 5")  # prepared, warm
    return context, page


def snapshot(page) -> dict:
    return page.evaluate("() => ({shown: window.facefuseLive.shown, fused: window.facefuseLive.fused,"
                         " skipped: window.facefuseLive.skipped, dropped: window.facefuseLive.dropped,"
                         " latency: window.facefuseLive.latencyMs.length, server: window.facefuseLive.serverMs.length})")


def window_of(page, before: dict) -> dict:
    """What the page saw since ``before``."""
    after = snapshot(page)
    samples = page.evaluate("([l, s]) => [window.facefuseLive.latencyMs.slice(l), window.facefuseLive.serverMs.slice(s)]",
                            [before["latency"], before["server"]])
    return {"shown": after["shown"] - before["shown"], "fused": after["fused"] - before["fused"],
            "skipped": after["skipped"] - before["skipped"], "dropped": after["dropped"] - before["dropped"],
            "latency": samples[0], "server": samples[1]}


def mean_ms(before: dict[str, float], after: dict[str, float], histogram: str) -> float:
    """The mean of a /metrics histogram between two scrapes, in ms."""
    count = after[histogram + "_count"] - before.get(histogram + "_count", 0.0)
    return 1000 * (after[histogram + "_sum"] - before.get(histogram + "_sum", 0.0)) / max(count, 1.0)


SPLIT = ("facefuse_live_frame_wait_seconds", "facefuse_live_fuse_seconds", "facefuse_live_frame_seconds")


def measure(pages: list, seconds: float, server) -> tuple[list[dict], float, float, float, list[float]]:
    """Run ``seconds``; per page its window, then wall s, server CPU s, browser CPU s and the RSS samples (MB).
    The server's own split of the phase's frames (means, ms: slot wait, in the session, taken → sent) goes into
    the first window as ``split``."""
    server_pid = server.process.pid
    before = [snapshot(page) for page in pages]
    scraped = server.metrics()
    cpu_server, cpu_browser = cpu_s(server_pid), browser_cpu_s(server_pid)
    started = time.perf_counter()
    rss = [rss_mb(server_pid)]
    while time.perf_counter() - started < seconds:
        pages[0].wait_for_timeout(1000)
        rss.append(rss_mb(server_pid))
    wall = time.perf_counter() - started
    windows = [window_of(page, b) for page, b in zip(pages, before)]
    now = server.metrics()
    windows[0]["split"] = [mean_ms(scraped, now, name) for name in SPLIT]
    return windows, wall, cpu_s(server_pid) - cpu_server, browser_cpu_s(server_pid) - cpu_browser, rss


# 320 sessions: the server's RSS had not settled after the 6 rounds measured before; a one-off run of 600 sessions
# settled after ~240 (docs/live.md)
CHURN_ROUNDS = 160


def session_churn(url: str, pid: int, rounds: int = CHURN_ROUNDS, frames: int = 30) -> list[tuple[int, float]]:
    """Sessions opened and closed again and again (1, 3, 1, 3… at once, ``frames`` frames each, Python clients):
    the server's RSS after each round, to tell a leak per session from memory that settles."""
    import json
    import threading

    import av
    import cv2
    from websockets.sync.client import connect

    from facefuse.serve.live_routes import FRAME_HEADER

    with av.open(str(CLIP)) as container:
        start = round(CLIP_START_S * float(container.streams.video[0].average_rate))
        encoded = [cv2.imencode(".jpg", cv2.resize(f.to_ndarray(format="bgr24"), (640, 480)))[1].tobytes()
                   for i, f in zip(range(start + frames), container.decode(video=0)) if i >= start]
    source = SOURCE.read_bytes()

    def one() -> None:
        with connect(url.replace("http://", "ws://") + "/v1/live", open_timeout=60, max_size=2**24) as ws:
            ws.send(json.dumps({"type": "start", "options": {}}))
            ws.send(source)
            ws.recv(timeout=120)
            for seq, frame in enumerate(encoded):
                ws.send(FRAME_HEADER.pack(seq) + frame)
                ws.recv(timeout=120)

    after = []
    for index in range(rounds):
        clients = [threading.Thread(target=one) for _ in range(3 if index % 2 else 1)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        after.append((len(clients), rss_mb(pid)))
    return after


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--overload-seconds", type=float, default=30.0)
    parser.add_argument("--compare-seconds", type=float, default=15.0,
                        help="each of the interleaved runs comparing 1 and 2 frames in flight per page")
    parser.add_argument("--churn-only", type=int, default=0, metavar="ROUNDS",
                        help="only the session churn, this many rounds, on a fresh server (section live_churn)")
    args = parser.parse_args()
    load_before, host = os.getloadavg(), machine()
    if args.churn_only:
        churn_alone(args.churn_only, host)
        return
    with tempfile.TemporaryDirectory(prefix="facefuse-live-bench-") as folder:
        y4m = make_fake_camera(CLIP, Path(folder) / "camera.y4m", CLIP_SECONDS, (640, 480), CLIP_START_S)
        server = start_server(2, 32, 64, 0.0, extra=("--live-max-sessions", "3"))
        try:
            with chromium_browser() as browser, camera_browser(browser, y4m) as camera:
                memory = {"ready": rss_mb(server.process.pid)}  # the server's RSS (MB) between the phases
                context, page = open_live_page(camera, server.url)
                single, wall, cpu_server, cpu_browser, _ = measure([page], args.seconds, server)
                memory["after 1 client"] = rss_mb(server.process.pid)
                context.close()
                compare: dict[int, list[dict]] = {1: [], 2: []}
                for in_flight in (1, 2, 1, 2):  # interleaved, so a change of the machine's load hits both
                    context, page = open_live_page(camera, server.url, in_flight)
                    windows, compare_wall, *_ = measure([page], args.compare_seconds, server)
                    compare[in_flight].append({**windows[0], "wall": compare_wall})
                    context.close()
                memory["after 4 more sessions"] = rss_mb(server.process.pid)
                # three users, three browsers: pages of one browser are not all rendered at the camera's rate
                # (requestVideoFrameCallback follows the compositor), and three pages of one Chromium showed
                # 0.9-1.4 frames/s each while the server's CPU sat mostly idle
                with contextlib.ExitStack() as others:
                    cameras = [camera] + [others.enter_context(camera_browser(browser, y4m)) for _ in range(2)]
                    clients = [open_live_page(c, server.url) for c in cameras]
                    time.sleep(2)
                    crowd, crowd_wall, crowd_cpu_server, crowd_cpu_browser, rss = measure(
                        [p for _, p in clients], args.overload_seconds, server)
                    for context, _ in clients:
                        context.close()
                time.sleep(1)
                memory["after 3 clients"] = rss_mb(server.process.pid)
            churn = session_churn(server.url, server.process.pid)
        finally:
            server.stop()
    load_after = os.getloadavg()
    write_section("live", report(host, single[0], wall, cpu_server, cpu_browser, crowd, crowd_wall, crowd_cpu_server,
                                 crowd_cpu_browser, rss, memory, load_before, load_after) + comparison(compare)
                  + f"""
{churn_text(churn)}
""")
    print((Path(__file__).parent / "results" / "live.md").read_text())


def churn_alone(rounds: int, host: str) -> None:
    """The session churn alone on a server that served nothing before: whether its memory settles, over more
    sessions than the full run's 320 (which follow the browser phases on the same server)."""
    server = start_server(2, 32, 64, 0.0, extra=("--live-max-sessions", "3"))
    try:
        ready = rss_mb(server.process.pid)
        churn = session_churn(server.url, server.process.pid, rounds)
    finally:
        server.stop()
    write_section("live_churn", f"""## Live sessions opened and closed on a fresh server (`benchmarks/live.py --churn-only {rounds}`)

{host}. The same server options as the full run
(`--live-max-sessions 3`), source `obama.jpg`, 640×480 JPEG frames of the clip; the server's RSS when ready:
{ready:.0f} MB.

{churn_text(churn)}
""")
    print((Path(__file__).parent / "results" / "live_churn.md").read_text())


def churn_text(churn: list[tuple[int, float]]) -> str:
    """The churn's RSS every 10 rounds, and its growth over each third of the rounds (a leak grows alike in every
    third; memory that settles grows less and less)."""
    sessions = sum(n for n, _ in churn)
    third = len(churn) // 3
    marks = [churn[0][1]] + [churn[min(len(churn), k * third) - 1][1] for k in (1, 2, 3)]
    growth = ", ".join(f"{b - a:+.0f}" for a, b in zip(marks, marks[1:]))
    every = ", ".join(f"{mb:.0f}" for _, mb in churn[::10])
    return (f"Sessions opened and closed one after another ({len(churn)} rounds of 1, 3, 1, 3… sessions at once, "
            f"{sessions} sessions, 30 frames each, Python clients), server RSS every 10 rounds (MB): {every}; "
            f"at the end {churn[-1][1]:.0f}. Growth over each third of the rounds (MB): {growth}.")


def met(value: float, goal: float, higher: bool = False) -> str:
    ok = value >= goal if higher else value <= goal
    return "met" if ok else "**missed**"


def comparison(runs: dict[int, list[dict]]) -> str:
    rows = []
    for in_flight, windows in runs.items():
        fps = median([w["shown"] / w["wall"] for w in windows])
        server = median([percentile(w["server"], 95) for w in windows])
        latency = median([percentile(w["latency"], 95) for w in windows])
        latency_50 = median([median(w["latency"]) for w in windows])
        rows.append(f"| {in_flight} | {len(windows)} | {fps:.1f} | {server:.0f} | {latency_50:.0f} / {latency:.0f} |")
    return """
Frames in flight per page held fixed (the page sends a camera frame only while fewer are unanswered), one client, interleaved runs, medians:

| in flight | runs | frames/s shown | server ms p95 | capture-to-display ms p50 / p95 |
|---|---|---|---|---|
""" + "\n".join(rows) + "\n"


def report(host: str, one: dict, wall: float, cpu_server: float, cpu_browser: float, crowd: list[dict], crowd_wall: float,
           crowd_cpu_server: float, crowd_cpu_browser: float, rss: list[float], memory: dict[str, float], load_before,
           load_after) -> str:
    fps = one["shown"] / wall
    server_p95, latency_p95 = percentile(one["server"], 95), percentile(one["latency"], 95)
    crowd_latency = [ms for w in crowd for ms in w["latency"]]
    crowd_p95 = percentile(crowd_latency, 95)
    per_client = [w["shown"] / crowd_wall for w in crowd]
    dropped = sum(w["dropped"] for w in crowd)
    skipped = sum(w["skipped"] for w in crowd)
    shown = sum(w["shown"] for w in crowd)
    outside = [total - server for total, server in zip(one["latency"], one["server"])]

    def split(windows: list[dict]) -> str:
        wait, in_session, server = windows[0]["split"]
        latency = statistics.fmean([ms for w in windows for ms in w["latency"]])
        return (f"{wait:.0f} | {in_session:.0f} | {server - in_session:.0f} | {latency - server - wait:.0f} | "
                f"{latency:.0f}")
    growth = rss[-1] - rss[0]
    return f"""## Live camera

`benchmarks/live.py` on {host}; load average {load_before[0]:.1f} before and {load_after[0]:.1f} after the run
(the machine was shared with other jobs: figures are noisy and low). The web page in Debian's Chromium (headless,
Playwright) with a fake camera playing {CLIP_SECONDS:g} s of `short_hamilton_clip.mp4` from {CLIP_START_S:g} s (one
singer, stage light) stretched to 640×480, in a loop; source `obama.jpg`, mesh engine, the live defaults (render crop
256 px, detection every 15 frames, tracking between, no occlusion masks, visible mark on every frame); WebSocket
`/v1/live` on loopback, JPEG both ways, frames in flight per page as the page chooses them (its default: one, two while the median capture-to-display latency of the last 10 frames stays under 100 ms, one again above 150 ms; fixed 1 and 2 compared below). Server time: frame taken from the
newest-frame slot → fused JPEG sent; capture-to-display: the page draws the camera frame → the fused frame is drawn.

| phase | wall s | frames shown (fused) | frames/s shown | server ms p50 / p95 | capture-to-display ms p50 / p95 | dropped by server / skipped by page | CPU s: server / browser | server CPU ms per frame |
|---|---|---|---|---|---|---|---|---|
| 1 client | {wall:.0f} | {one['shown']} ({one['fused']}) | {fps:.1f} | {median(one['server']):.0f} / {server_p95:.0f} | {median(one['latency']):.0f} / {latency_p95:.0f} | {one['dropped']} / {one['skipped']} | {cpu_server:.1f} / {cpu_browser:.1f} | {1000 * cpu_server / max(one['shown'], 1):.0f} |
| 3 clients | {crowd_wall:.0f} | {shown} ({sum(w['fused'] for w in crowd)}) | {' + '.join(f'{f:.1f}' for f in per_client)} | {median([m for w in crowd for m in w['server']]):.0f} / {percentile([m for w in crowd for m in w['server']], 95):.0f} | {median(crowd_latency):.0f} / {crowd_p95:.0f} | {dropped} / {skipped} | {crowd_cpu_server:.1f} / {crowd_cpu_browser:.1f} | {1000 * crowd_cpu_server / max(shown, 1):.0f} |

Outside the server (the page's JPEG encoding, two WebSocket hops on loopback, decoding and drawing; capture-to-display
minus server time of each frame, 1 client): p50 {median(outside):.0f} ms, p95 {percentile(outside, 95):.0f} ms —
the transport and the codecs are a small share of a frame, which is why a WebSocket of JPEG frames was kept.

Where a frame's time goes (means over each phase, ms): waiting in its session's newest-frame slot for the frame
before it, in the session (decode → track → fuse → encode, on a worker thread), the hop to that thread and the send
(server time − in the session), and outside the server (capture-to-display − server time − slot wait: the page's
encoding, loopback, decoding, drawing, and the browser's wait for a core):

| phase | slot wait | in the session | thread hop and send | outside the server | capture-to-display |
|---|---|---|---|---|---|
| 1 client | {split([one])} |
| 3 clients | {split(crowd)} |

Server RSS during the 3-client phase (sampled every second): {rss[0]:.0f} MB at its start, {max(rss):.0f} MB peak,
{rss[-1]:.0f} MB at its end ({growth:+.0f} MB). Between the phases: {' → '.join(f'{k} {v:.0f} MB' for k, v in memory.items())}.

| goal | measured | |
|---|---|---|
| ≥ 20 frames/s shown (1 client) | {fps:.1f} | {met(fps, 20, higher=True)} |
| server time p95 ≤ 50 ms | {server_p95:.0f} ms | {met(server_p95, 50)} |
| capture-to-display p95 ≤ 150 ms | {latency_p95:.0f} ms | {met(latency_p95, 150)} |
| overload (3 clients): frames dropped, latency p95 ≤ 300 ms | {dropped + skipped} dropped or skipped, p95 {crowd_p95:.0f} ms | {met(crowd_p95, 300) if dropped + skipped else '**missed** (nothing dropped)'} |
| overload: no memory growth | {growth:+.0f} MB | {met(growth, 20)} (≤ 20 MB counts as flat) |
"""


if __name__ == "__main__":
    main()
