"""What one running service holds: settings, metrics, the request scheduler and the one shared :class:`Fuser`.

Models load in a worker thread started by the lifespan, so ``/healthz`` answers at once while ``/readyz`` and the
``/v1`` routes say 503 NOT_READY until loading finishes — or keep saying why it failed (for example a model that
is not cached and cannot be fetched offline), instead of the process dying with a traceback.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from ..config import StoreConfig
from ..errors import ErrorCode, FacefuseError
from ..fusion.engine import FusionOptions
from ..pipeline import Fuser
from .scheduler import RequestScheduler
from .metrics import ServiceMetrics
from .settings import ServeSettings
from .budget import PixelBudget
from .http_errors import public
from .uploads import UploadGate, fuse_request_models

log = logging.getLogger("facefuse.serve")


@dataclass
class ServiceState:
    settings: ServeSettings
    store: StoreConfig
    metrics: ServiceMetrics
    defaults: FusionOptions = field(init=False)  # what a request's options start from
    fuse_models: tuple[type[BaseModel], type[BaseModel]] = field(init=False)  # (form, JSON) of POST /v1/fuse
    uploads: UploadGate = field(init=False)
    pixels: PixelBudget = field(init=False)
    scheduler: RequestScheduler | None = None
    fuser: Fuser | None = None
    load_error: FacefuseError | None = None
    created: float = field(default_factory=time.monotonic)
    ready_after_s: float | None = None

    def __post_init__(self) -> None:
        self.defaults = self.settings.fusion_defaults()
        self.fuse_models = fuse_request_models(self.defaults, self.settings.engines)
        self.uploads = UploadGate(self.settings.max_uploads, int(self.settings.max_buffered_mb * 2**20),
                                  self.metrics.uploads_rejected)
        self.pixels = PixelBudget(int(self.settings.max_decoded_mpx * 1e6))

    def load_models(self) -> None:
        """Build the Fuser and its engine, and run the detector once so the first request does not pay for it."""
        try:
            start = time.perf_counter()
            fuser = Fuser(self.settings.fuser_config(self.store))
            self._timed("analyzer", start)
            for engine in self.settings.engines:  # only these: a request can never make the server load a model
                start = time.perf_counter()
                fuser.engine(engine)
                self._timed(f"engine_{engine}", start)
            start = time.perf_counter()
            fuser.segmenter()  # shipped in the package; None where the licence setting forbids it
            self._timed("segmenter", start)
            start = time.perf_counter()
            fuser.analyzer.analyze(np.full((192, 192, 3), 128, np.uint8))
            self._timed("warmup", start)
        except FacefuseError as exc:
            log.error("models could not be loaded: %s", exc)
            self.load_error = exc
            return
        except Exception as exc:
            log.exception("models could not be loaded")
            self.load_error = FacefuseError(ErrorCode.INTERNAL, f"loading the models failed ({exc})",
                                            "see the server log for the cause")
            return
        self.fuser = fuser
        self.ready_after_s = time.monotonic() - self.created
        self.metrics.ready.set(1)
        log.info("models ready in %.2f s", self.ready_after_s)

    def _timed(self, component: str, start: float) -> None:
        self.metrics.model_load.labels(component).set(time.perf_counter() - start)

    def require_ready(self) -> tuple[Fuser, RequestScheduler]:
        if self.fuser is None or self.scheduler is None:
            raise self.not_ready()
        return self.fuser, self.scheduler

    def not_ready(self) -> FacefuseError:
        if self.load_error is not None:  # the full error (paths, pip output) is in the log, not in answers
            cause = public(self.load_error)
            return FacefuseError(ErrorCode.NOT_READY, f"the models failed to load ({cause.code.value})",
                                 cause.hint, {"cause": {"code": cause.code.value, "message": cause.message}})
        return FacefuseError(ErrorCode.NOT_READY, "the models are still loading", "retry in a second",
                             {"loading_for_s": round(time.monotonic() - self.created, 2)})
