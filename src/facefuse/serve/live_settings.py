"""The live-camera settings of the service (``/v1/live``), kept apart like the job settings: :class:`ServeSettings`
inherits them, so each is a ``facefuse serve`` flag and a ``FACEFUSE_<NAME>`` variable like every other setting."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..config import ImageLimits
from ..live import LIVE_CROP_SIZE, LIVE_DETECT_EVERY


class LiveSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FACEFUSE_", extra="ignore", frozen=True)

    live_max_sessions: int = Field(2, ge=0, le=1000, description="live camera sessions at once (0: live off); one "
                                   "more is refused with 429 and Retry-After at the WebSocket handshake")
    live_max_frame_kb: float = Field(512.0, gt=0, description="largest camera frame a live client may send (KiB, "
                                     "encoded); a larger one ends the session (close code 4413)")
    live_max_frame_pixels: int = Field(1280 * 720, gt=0, description="largest camera frame in pixels, checked from "
                                       "its header; a larger one ends the session (close code 4413)")
    live_idle_s: float = Field(20.0, gt=0, le=3600, description="a live session that sends nothing for this long is "
                               "closed (close code 4408), freeing its slot")
    live_crop_size: int = Field(LIVE_CROP_SIZE, ge=128, le=1024, description="render crop of live frames (px); "
                                "smaller is faster, a webcam face rarely needs more")
    live_detect_every: int = Field(LIVE_DETECT_EVERY, ge=1, le=1000, description="live: run the face detector on "
                                   "every n-th frame (and at scene cuts); the tracker follows the face in between")

    def live_frame_limits(self) -> ImageLimits:
        return ImageLimits(max_bytes=int(self.live_max_frame_kb * 1024), max_pixels=self.live_max_frame_pixels)
