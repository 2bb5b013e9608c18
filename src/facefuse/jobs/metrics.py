"""Prometheus view of the jobs: how many are in each state (read from the database at each scrape), frames and
photos processed, and how long jobs take from their first start to their end."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .store import JobStore

_DURATION_BUCKETS = (1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0)


class _JobStates(Collector):
    """``facefuse_jobs{state}``: always the database's truth, including jobs a previous process left behind."""

    def __init__(self, store: JobStore) -> None:
        self.store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily("facefuse_jobs", "batch jobs by state", labels=["state"])
        for state, count in self.store.counts().items():
            family.add_metric([state], count)
        yield family


class JobMetrics:
    def __init__(self, registry: CollectorRegistry, store: JobStore) -> None:
        self.frames = Counter("facefuse_job_frames_processed", "video frames and photos processed by jobs",
                              ["kind"], registry=registry)
        self.items = Counter("facefuse_job_items", "photos of batch jobs finished, by outcome", ["outcome"],
                             registry=registry)
        self.duration = Histogram("facefuse_job_duration_seconds", "time from a job's first start to its end",
                                  ["kind", "state"], buckets=_DURATION_BUCKETS, registry=registry)
        registry.register(_JobStates(store))
