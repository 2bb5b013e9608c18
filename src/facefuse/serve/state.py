"""What one running service holds: settings, metrics, the request gates and the :class:`FusionBackend` that runs
the models (this process, or Ray Serve deployments)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from ..config import StoreConfig
from ..fusion.engine import FusionOptions
from .backend import FusionBackend
from .budget import PixelBudget
from .metrics import ServiceMetrics
from .settings import ServeSettings
from .uploads import UploadGate, fuse_request_models


@dataclass
class ServiceState:
    settings: ServeSettings
    store: StoreConfig
    metrics: ServiceMetrics
    backend: FusionBackend
    defaults: FusionOptions = field(init=False)  # what a request's options start from
    fuse_models: tuple[type[BaseModel], type[BaseModel]] = field(init=False)  # (form, JSON) of POST /v1/fuse
    uploads: UploadGate = field(init=False)
    pixels: PixelBudget = field(init=False)

    def __post_init__(self) -> None:
        self.defaults = self.settings.fusion_defaults()
        self.fuse_models = fuse_request_models(self.defaults, self.settings.engines)
        self.uploads = UploadGate(self.settings.max_uploads, self.settings.max_uploads_per_client,
                                  int(self.settings.max_buffered_mb * 2**20), self.settings.upload_limits(),
                                  self.metrics.uploads_rejected)
        self.pixels = PixelBudget(int(self.settings.max_decoded_mpx * 1e6))

    def require_ready(self) -> FusionBackend:
        """The backend, once every part of it is ready (NOT_READY, saying why, before)."""
        self.backend.readiness()
        return self.backend
