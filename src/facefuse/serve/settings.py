"""Service settings: one pydantic-settings object, filled from ``FACEFUSE_*`` environment variables and the CLI.

Why pydantic-settings: the same names work in a shell, a systemd unit or a container, and every value is
validated before the server binds, so a typo in ``FACEFUSE_PORT`` fails at start-up rather than at the first request.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, create_model, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..config import AnalysisConfig, GpuOptions, ImageLimits, QualityConfig, RuntimeConfig, StoreConfig
from ..fusion.engine import FusionOptions
from ..fusion.restorer import RestoreConfig
from ..pipeline import FuserConfig
from ..schema import Options, Scope, fields_of, nested_of, shell_name
from .job_settings import JobSettings
from .live_settings import LiveSettings  # live camera limits (/v1/live)
from .uploads import UploadLimits


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


def _cores() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class _Settings(JobSettings, LiveSettings, BaseSettings):
    """Everything ``facefuse serve`` can be told; each field is also ``FACEFUSE_<NAME>`` in the environment.

    The operator-scope options (:class:`~facefuse.fusion.engine.FusionOptions` fields declared with
    ``scope=Scope.OPERATOR``, such as ``crop_size``, :class:`~facefuse.config.GpuOptions`,
    :class:`~facefuse.config.AnalysisConfig` (``detector``, ``precision``…), the quality gate's
    :class:`~facefuse.config.QualityConfig`, the decode stage's :class:`~facefuse.config.ImageLimits` beyond the
    upload limits below, and :class:`~facefuse.fusion.restorer.RestoreConfig` as ``restore_*``) are added to this
    class as settings of their own below (:data:`OPERATOR_MODELS`).
    """

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
    max_body_mb: float = Field(32.0, gt=0, description="largest request body (MiB); refused with 413 while reading")
    header_timeout_s: float = Field(10.0, gt=0, le=300, description="a connection whose request line and headers "
                                    "have not all arrived this long after it opened (or after its last answer) is "
                                    "closed (idle and slow-header clients)")
    upload_timeout_s: float = Field(30.0, gt=0, le=3600, description="longest a request body may take to arrive; "
                                    "slower uploads get 408 (the deadline only starts once the body is in)")
    upload_idle_s: float = Field(5.0, gt=0, le=300, description="longest pause between two pieces of a request "
                                 "body; a longer one gets 408 (a client cannot hold an upload slot for free)")
    upload_min_kbps: float = Field(8.0, ge=0, description="KiB/s a request body must average once upload_idle_s "
                                   "has passed; slower ones get 408 (0: no minimum)")
    max_uploads: int = Field(16, ge=1, le=10_000, description="request bodies being received at once; beyond it: 429")
    max_uploads_per_client: int = Field(8, ge=1, le=10_000, description="request bodies one client address may be "
                                        "sending at once; beyond it: 429")
    max_buffered_mb: float = Field(256.0, gt=0, description="request bytes held in memory by all requests together "
                                   "(MiB); a body that would pass it gets 429")
    max_decoded_mpx: float = Field(120.0, gt=0, description="decoded megapixels all requests in progress may hold "
                                   "together (a 73 KB PNG can decode to 25 MP); work waits for room, within its "
                                   "deadline")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="comma-separated Host header values accepted (DNS-rebinding protection); "
                                          "empty: loopback names only when bound to loopback without an API key, "
                                          "else any")
    max_image_mb: float = Field(12.0, gt=0, description="largest single image after base64 decoding")
    max_pixels: int = Field(25_000_000, gt=0, description="largest image in pixels (checked from the header)")
    engines: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [FusionOptions().engine],
        description="comma-separated fusion engines loaded at start (mesh, or swappers whose models are installed, "
                    "see `facefuse models list`); requests may name only these, the first is the default")
    allow_noncommercial_models: bool = Field(
        True, description="allow models licensed for non-commercial use only (false: such stages use their classic method "
                    "or are refused)")
    providers: str = Field("", description="comma-separated ONNX Runtime providers in order of preference")
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

    @field_validator("cors_origin", "engines", "allowed_hosts", mode="before")
    @classmethod
    def _split_list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("engines")
    @classmethod
    def _some_engine(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one engine")
        return list(dict.fromkeys(value))

    def fusion_defaults(self) -> FusionOptions:
        """The options a request starts from: the library's, the first loaded engine, and the operator-scope options
        (e.g. ``crop_size``) this server was started with."""
        return FusionOptions(engine=self.engines[0],
                             **{name: getattr(self, name) for name in fields_of(FusionOptions, Scope.OPERATOR)})

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

    def upload_limits(self) -> UploadLimits:
        return UploadLimits(timeout_s=self.upload_timeout_s, idle_s=self.upload_idle_s,
                            min_rate=self.upload_min_kbps * 1024)

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def hosts_accepted(self) -> frozenset[str] | None:
        """Host header names (without port) this service answers; ``None`` = any."""
        if self.allowed_hosts:
            return frozenset(h.lower() for h in self.allowed_hosts)
        if self.api_key is None and self.host in LOOPBACK_HOSTS:
            return LOOPBACK_HOSTS
        return None

    @property
    def deadline_s(self) -> float:
        return self.deadline_ms / 1000.0

    def options(self, model: type[Options]) -> Any:
        """``model`` (one of :data:`OPERATOR_MODELS`) from this server's settings; nested models from theirs."""
        values = {name: getattr(self, shell_name(model, name)) for name in fields_of(model)
                  if shell_name(model, name) not in SERVICE_OWN}
        return model(**values, **{name: self.options(sub) for name, sub in nested_of(model).items()})

    def image_limits(self) -> ImageLimits:
        """The decode stage's limits: the largest image from ``max_image_mb``, the rest from their settings."""
        return self.options(ImageLimits).replaced(max_bytes=int(self.max_image_mb * 1024 * 1024))

    def fuser_config(self, store: StoreConfig | None = None, threads: int | None = None) -> FuserConfig:
        """The library configuration: ONNX Runtime threads are split across ``workers`` so they don't oversubscribe,
        or pinned to ``threads`` (a Ray replica's CPU share)."""
        providers = tuple(p for p in self.providers.split(",") if p.strip()) or None
        return FuserConfig(
            store=replace(store or StoreConfig.from_env(), allow_noncommercial_models=self.allow_noncommercial_models),
            runtime=RuntimeConfig(providers=providers, concurrency=self.workers, intra_op_threads=threads or 0,
                                  batch_window_ms=self.batch_window_ms, batch_max=self.max_batch,
                                  gpu=self.options(GpuOptions)),
            analysis=self.options(AnalysisConfig).replaced(limits=self.image_limits()),
            analysis_cache_mb=self.analysis_cache_mb,
            restore=self.options(RestoreConfig),
        )


# options the service sets from settings of its own: ImageLimits.max_bytes is max_image_mb (MiB, like max_body_mb)
SERVICE_OWN = frozenset({"max_bytes"})
# the options models whose operator-scope fields are settings of the service
OPERATOR_MODELS: tuple[type[Options], ...] = (FusionOptions, GpuOptions, AnalysisConfig, QualityConfig, ImageLimits,
                                              RestoreConfig)


def _with_operator_options(base: type[_Settings]) -> Any:
    """``base`` plus one setting per operator-scope option of :data:`OPERATOR_MODELS`, with that option's type,
    range and help, named as in the CLI (:func:`~facefuse.schema.shell_name`). A name the service already has
    (``max_pixels``: its upload limit) keeps the service's own setting."""
    extra: dict[str, Any] = {shell_name(model, name): (info.annotation, info) for model in OPERATOR_MODELS
                             for name, info in fields_of(model, Scope.OPERATOR).items()
                             if shell_name(model, name) not in {*base.model_fields, *SERVICE_OWN}}
    return create_model("ServeSettings", __base__=base, __module__=__name__, __doc__=base.__doc__, **extra)


ServeSettings = _with_operator_options(_Settings)
