"""Service settings: one pydantic-settings object, filled from ``FACEFUSE_*`` environment variables and the CLI.

Why pydantic-settings: the same names work in a shell, a systemd unit or a container, and every value is
validated before the server binds, so a typo in ``FACEFUSE_PORT`` fails at start-up rather than at the first request.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..config import AnalysisConfig, ImageLimits, RuntimeConfig, StoreConfig
from ..fusion.engine import FusionOptions
from ..pipeline import FuserConfig


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class ServeSettings(BaseSettings):
    """Everything ``facefuse serve`` can be told; each field is also ``FACEFUSE_<NAME>`` in the environment."""

    model_config = SettingsConfigDict(env_prefix="FACEFUSE_", extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="address to bind; loopback unless you mean to expose the service")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 picks a free one)")
    max_batch: int = Field(2, ge=1, le=64, description="most requests the scheduler groups into one batch")
    max_wait_ms: float = Field(2.0, ge=0, le=1000,
                               description="longest a batch waits for more requests once its first one arrived")
    queue_size: int = Field(32, ge=1, le=10_000, description="requests waiting beyond this are refused with 429")
    workers: int = Field(default_factory=_cores, ge=1, le=256,
                         description="worker threads for CPU-heavy stages (default: the cores available)")
    deadline_ms: float = Field(10_000, gt=0, description="per-request deadline; later answers become 504")
    api_key: SecretStr | None = Field(None, description="if set, /v1/* require 'Authorization: Bearer <key>'")
    cors_origin: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated origins allowed by CORS (off when empty)")
    max_body_mb: float = Field(32.0, gt=0, description="largest request body; refused with 413 while reading")
    max_image_mb: float = Field(12.0, gt=0, description="largest single image after base64 decoding")
    max_pixels: int = Field(25_000_000, gt=0, description="largest image in pixels (checked from the header)")
    detector: str = Field(AnalysisConfig.detector, description="face detector used by the service")
    engine: str = Field(FusionOptions.engine, description="fusion engine: mesh, or a neural swapper whose model is "
                                                          "installed (see `facefuse models list`)")
    providers: str = Field("", description="comma-separated ONNX Runtime providers in order of preference")
    precision: Literal["fp32", "int8", "fp16"] = Field(
        AnalysisConfig.precision, description="use the INT8/FP16 model variants `facefuse optimize --install` made "
                                              "(FP32 where none passed)")
    batch_window_ms: float = Field(0.0, ge=0, le=100,
                                   description="merge concurrent requests' calls of models with a batch axis "
                                               "(FaceMesh) into one run, waiting up to this long; for GPUs (0: off)")
    analysis_cache_mb: int = Field(64, ge=0, description="decoded photos whose face analysis is kept, keyed by "
                                                         "content, so reused templates skip detection (0: off)")

    backend: Literal["local", "ray"] = Field(
        "local", description="local: this process; ray: Ray Serve deployments (pip install facefuse[ray]) — "
                             "analysis and fusion scale separately, FaceMesh batched across requests")
    replicas: int = Field(1, ge=1, le=1024, description="Ray: replicas of each deployment (ingress, analysis, fusion)")
    autoscale: str = Field("", pattern=r"^(\d+,\d+)?$",
                           description="Ray: 'min,max' replicas per deployment (min >= 1), scaled on load "
                                       "(overrides --replicas)")
    num_cpus_per_replica: float = Field(1.0, gt=0, le=256,
                                        description="Ray: CPUs reserved by each replica; ONNX Runtime uses as many "
                                                    "threads")

    @field_validator("cors_origin", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value

    @field_validator("autoscale")
    @classmethod
    def _ordered_range(cls, value: str) -> str:
        if value:
            low, high = (int(n) for n in value.split(","))
            if not 1 <= low <= high:  # no scale-to-zero: /readyz and the routes need a replica of each to answer
                raise ValueError(f"'{value}' is not 'min,max' with 1 <= min <= max")
        return value

    @property
    def autoscale_range(self) -> tuple[int, int] | None:
        if not self.autoscale:
            return None
        low, high = (int(n) for n in self.autoscale.split(","))
        return low, high

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def deadline_s(self) -> float:
        return self.deadline_ms / 1000.0

    def image_limits(self) -> ImageLimits:
        return ImageLimits(max_bytes=int(self.max_image_mb * 1024 * 1024), max_pixels=self.max_pixels)

    def fuser_config(self, store: StoreConfig | None = None, threads: int | None = None) -> FuserConfig:
        """The library configuration: ONNX Runtime threads are split across ``workers`` so they don't oversubscribe,
        or pinned to ``threads`` (a Ray replica's CPU share)."""
        providers = tuple(p for p in self.providers.split(",") if p.strip()) or None
        return FuserConfig(
            store=store or StoreConfig(),
            runtime=RuntimeConfig(providers=providers, concurrency=self.workers, intra_op_threads=threads or 0,
                                  batch_window_ms=self.batch_window_ms, batch_max=self.max_batch),
            analysis=AnalysisConfig(detector=self.detector, precision=self.precision, limits=self.image_limits()),
            analysis_cache_mb=self.analysis_cache_mb,
        )
