"""What one running service holds: settings, metrics and the :class:`FusionBackend` that runs the models."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import StoreConfig
from .backend import FusionBackend
from .metrics import ServiceMetrics
from .settings import ServeSettings


@dataclass
class ServiceState:
    settings: ServeSettings
    store: StoreConfig
    metrics: ServiceMetrics
    backend: FusionBackend

    def require_ready(self) -> FusionBackend:
        """The backend, once every part of it is ready (NOT_READY, saying why, before)."""
        self.backend.readiness()
        return self.backend
