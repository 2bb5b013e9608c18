"""Prometheus metrics of one app instance.

Each app gets its own ``CollectorRegistry`` (never the global one) so several apps can live in one process — the
tests start several servers — without their counters mixing.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from ..gpu import GpuCollector, nvml_status

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 2.0, 5.0, 10.0)
_STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)


class ServiceMetrics:
    """The service's counters, gauges and histograms, all registered in a private registry."""

    def __init__(self, max_batch: int) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter("facefuse_requests", "HTTP requests answered, by route and status code",
                                ["route", "code"], registry=reg)
        self.latency = Histogram("facefuse_request_duration_seconds", "wall-clock time to answer, by route",
                                 ["route"], buckets=_LATENCY_BUCKETS, registry=reg)
        self.stage = Histogram("facefuse_stage_duration_seconds", "time spent in each pipeline stage",
                               ["stage"], buckets=_STAGE_BUCKETS, registry=reg)
        self.queue_wait = Histogram("facefuse_queue_wait_seconds", "time between admission and start of work",
                                    buckets=_LATENCY_BUCKETS, registry=reg)
        self.queue_depth = Gauge("facefuse_queue_depth", "requests waiting for a batch", registry=reg)
        self.in_flight = Gauge("facefuse_in_flight", "requests admitted and not yet answered", registry=reg)
        self.batch_size = Histogram("facefuse_batch_size", "requests per batch handed to the workers",
                                    buckets=tuple(float(n) for n in range(1, max_batch + 1)), registry=reg)
        self.dropped = Counter("facefuse_dropped", "queued work dropped before it ran, by reason",
                               ["reason"], registry=reg)
        self.rejected = Counter("facefuse_queue_rejected", "requests refused because the queue was full",
                                registry=reg)
        self.uploads_rejected = Counter("facefuse_uploads_rejected", "requests refused because too many bodies were "
                                        "being received or buffered at once", registry=reg)
        self.model_load = Gauge("facefuse_model_load_seconds", "time to load each part of the models at start-up",
                                ["component"], registry=reg)
        self.ready = Gauge("facefuse_ready", "1 once the models are loaded", registry=reg)
        if nvml_status() == "ok":  # facefuse_gpu_* gauges, read from NVML at each scrape, where a board is readable
            reg.register(GpuCollector())

    def observe_stages(self, timings_ms: dict[str, float]) -> None:
        for stage, ms in timings_ms.items():
            self.stage.labels(stage).observe(ms / 1000.0)

    def render(self) -> bytes:
        return generate_latest(self.registry)
