"""Live services for the tests: ``create_app`` in a real uvicorn server on a free loopback port (background
thread), or ``ray_app`` deployed on a real local Ray Serve instance.

The service is exercised exactly as deployed (real sockets, real HTTP parsing, real lifespan and model loading);
for the single process only the process boundary is skipped, so each test module can afford its own differently
configured server. Both kinds have the same interface (``url``, ``metric``, a context manager), so the same
requests and assertions run against either.
"""

from __future__ import annotations

import asyncio
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from typing_extensions import Self

from facefuse.config import StoreConfig
from facefuse.errors import ERROR_TABLE, ErrorCode
from facefuse.serve import ServeSettings, create_app
from facefuse.serve.server import server_config


@contextmanager
def serve_process(store_config: StoreConfig, jobs_dir: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A real ``facefuse serve`` process (the CLI's, with its allocator tuning) on a free port, its jobs in
    ``jobs_dir``; yields the process and its URL once /readyz answers, and stops it after."""
    port = free_port()
    env = {**os.environ, "FACEFUSE_PORT": str(port), "FACEFUSE_JOBS_DIR": str(jobs_dir),
           "FACEFUSE_HOME": str(store_config.home), "FACEFUSE_MODEL_MIRROR": str(store_config.mirror),
           "FACEFUSE_ANALYSIS_CACHE_MB": "0", "FACEFUSE_WORKERS": "1"}
    process = subprocess.Popen([sys.executable, "-m", "facefuse", "serve"], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            assert process.poll() is None, "facefuse serve exited during start-up"
            try:
                if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield process, url
    finally:
        if process.poll() is None:
            process.terminate()
        process.wait(timeout=60)


def rss_mb(pid: int) -> float:
    """A process's resident memory (MB), from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")


# ports below the kernel's ephemeral range (32768 up on Linux) and above Ray's worker ports (10002–19999 by default)
QUIET_PORTS = range(20000, 32768)


def free_port() -> int:
    """A port free now, from :data:`QUIET_PORTS`: between this check and the server's bind, nothing else may take it.
    A port the kernel handed out (bind to port 0) could be handed to the next program that asks too: while
    `facefuse serve --backend ray` started, one of Ray's own agents got such a port, and /readyz answered with
    Ray's metrics page."""
    for candidate in random.sample(QUIET_PORTS, 64):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return candidate
    raise RuntimeError(f"no free port in {QUIET_PORTS}")


def assert_error(response: httpx.Response, code: ErrorCode) -> dict[str, Any]:
    """The one error shape, with the status the table gives the code."""
    assert response.headers["content-type"].startswith("application/json"), response.text[:200]
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code.value, error
    assert response.status_code == ERROR_TABLE[code].http_status
    assert set(error) == {"code", "message", "hint", "details"}
    assert error["message"] and error["hint"]
    assert "Traceback" not in response.text
    return error


class _Live:
    url: str

    def _alive(self) -> bool:
        return True

    def _wait(self, path: str, timeout_s: float = 60.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if not self._alive():
                raise RuntimeError("the server died during start-up")
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.url}{path} did not answer 200 within {timeout_s} s")

    def metric(self, name: str, headers: dict[str, str] | None = None, **labels: str) -> float:
        """One sample from /metrics (0 when the series does not exist yet)."""
        from prometheus_client.parser import text_string_to_metric_families

        text = httpx.get(self.url + "/metrics", timeout=10, headers=headers).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0


class LiveServer(_Live):
    """``with LiveServer(store, queue_size=8) as server: httpx.get(server.url + "/healthz")``."""

    def __init__(self, store: StoreConfig, *, wait_ready: bool = True, **settings: Any) -> None:
        self.settings = ServeSettings(host="127.0.0.1", port=free_port(), **settings)
        self.app = create_app(self.settings, store=store)
        self.url = f"http://127.0.0.1:{self.settings.port}"
        self.wait_ready = wait_ready
        self._server = uvicorn.Server(server_config(self.app, self.settings, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(target=self._server.run, name="live-server", daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        self._wait("/readyz" if self.wait_ready else "/healthz")
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)

    def _alive(self) -> bool:
        return self._thread.is_alive()


class LiveRayServer(_Live):
    """``ray_app`` on the Ray Serve instance the caller started (``ray.init`` + ``serve.start`` on ``http_port``),
    under its own route prefix, so differently configured applications share one Ray (which takes ~10 s to start)."""

    def __init__(self, store: StoreConfig, *, http_port: int, name: str, **settings: Any) -> None:
        self.settings = ServeSettings(backend="ray", **settings)
        self.store = store
        self.name = name
        self.url = f"http://127.0.0.1:{http_port}/{name}"

    def __enter__(self) -> Self:
        from ray import serve

        from facefuse.serve import ray_app

        serve.run(ray_app(self.settings, self.store), name=self.name, route_prefix=f"/{self.name}")
        self._wait("/readyz", timeout_s=120)
        return self

    def __exit__(self, *exc: object) -> None:
        from ray import serve

        serve.delete(self.name)


def run_async(coroutine: Any) -> Any:
    """``asyncio.run`` on a thread of its own: the session's Playwright browser keeps an event loop running on
    the main thread once a web test has started it."""
    return in_own_thread(asyncio.run, coroutine)


def in_own_thread(call: Any, *args: Any) -> Any:
    """``call(*args)`` on a thread of its own, for calls that refuse to run where an event loop is running (the
    session's Playwright browser keeps one on the main thread once a web test has started it)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call, *args).result()
