"""Run inside a fresh network namespace (``unshare -n``): does anything try to reach the network?

A blackhole proxy listens on 127.0.0.1 and every HTTP(S) proxy variable points at it, so any library that wants
to go out (ONNX Runtime's telemetry client honours these variables) connects to it and is recorded. First a bare
client that honours the proxy variables (the control: proves the trap catches such a client — a bare
``onnxruntime.InferenceSession`` with telemetry left on was one here, but whether it phones home depends on the
machine, so it cannot be the control), then ``facefuse serve`` with one real request and an idle period. Prints
what the proxy saw, as JSON.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

PROXY_PORT = 3128
SERVE_PORT = 8765


def blackhole(seen: list[dict]) -> None:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", PROXY_PORT))
    server.listen(16)
    phase = seen  # the list itself; entries name the phase they happened in

    def handle(conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            first = conn.recv(4096)
        except OSError:
            first = b""
        phase.append({"phase": os.environ.get("PROBE_PHASE", ""), "request": first.split(b"\r\n", 1)[0].decode()})

    while True:
        conn, _ = server.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def wait_for(predicate, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def main() -> None:
    model, photo, control_s, idle_s = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    seen: list[dict] = []
    threading.Thread(target=blackhole, args=(seen,), daemon=True).start()
    proxy = f"http://127.0.0.1:{PROXY_PORT}"
    env = {**os.environ, "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "http_proxy": proxy,
           "ALL_PROXY": proxy, "NO_PROXY": "", "no_proxy": ""}
    env.pop("ORT_DISABLE_TELEMETRY", None)

    os.environ["PROBE_PHASE"] = "control"
    control = subprocess.Popen([sys.executable, "-c", "import sys, urllib.request\n"
                                "try: urllib.request.urlopen('https://mobile.events.data.microsoft.com/', "
                                "timeout=float(sys.argv[2]))\nexcept Exception: pass", str(model), str(control_s)],
                               env=env)
    wait_for(lambda: any(s["phase"] == "control" for s in seen), control_s)
    control.kill()
    control.wait()
    time.sleep(0.5)

    os.environ["PROBE_PHASE"] = "facefuse"
    server = subprocess.Popen([sys.executable, "-m", "facefuse", "serve", "--port", str(SERVE_PORT),
                               "--log-level", "warning"], env=env)
    base = f"http://127.0.0.1:{SERVE_PORT}"
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # our own client must not use the trap
    ready = wait_for(lambda: _ok(direct, base + "/readyz"), 120)
    detected = None
    if ready:
        boundary = "probeboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"image\"; filename=\"p.jpg\"\r\n"
                f"Content-Type: image/jpeg\r\n\r\n").encode() + photo.read_bytes() + f"\r\n--{boundary}--\r\n".encode()
        request = urllib.request.Request(base + "/v1/detect", data=body, method="POST",
                                         headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        with direct.open(request, timeout=60) as answer:
            detected = len(json.loads(answer.read())["faces"])
        time.sleep(idle_s)
    server.terminate()
    server.wait(timeout=30)
    print(json.dumps({"ready": ready, "faces": detected, "seen": seen}))


def _ok(opener, url: str) -> bool:
    try:
        with opener.open(url, timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


if __name__ == "__main__":
    main()
