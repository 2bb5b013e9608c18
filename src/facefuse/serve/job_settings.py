"""The batch-job settings of the service, kept apart from the request settings; :class:`ServeSettings` inherits
them, so each is a ``facefuse serve`` flag and a ``FACEFUSE_<NAME>`` variable like every other setting."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from ..jobs.intake import IntakeLimits

_MB = 1024 * 1024


class JobSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FACEFUSE_", extra="ignore", frozen=True)

    jobs_dir: Path | None = Field(None, description="folder for batch jobs: their database, inputs and results "
                                                    "(default: jobs/ in the facefuse home, FACEFUSE_HOME)")
    job_workers: int = Field(1, ge=1, le=64, description="photo batch jobs run at the same time (each on one "
                                                         "thread)")
    job_max_disk_mb: float = Field(4096, gt=0, description="most disk all jobs' data may use; new jobs beyond it "
                                                           "are refused with 507 STORAGE_FULL")
    job_retention_hours: float = Field(24, gt=0, description="finished jobs expire this long after they end; "
                                                             "their files are then deleted")
    job_max_items: int = Field(100, ge=1, le=10_000, description="most photos in one batch job (uploads and zip "
                                                                 "members together)")
    job_max_unzipped_mb: float = Field(1024, gt=0, description="largest total a zip of photos may inflate to")
    job_video_workers: int = Field(1, ge=1, le=64, description="video jobs run at the same time, on threads of "
                                                                 "their own: a long video never holds up photo jobs")
    job_max_video_s: float = Field(600, gt=0, description="longest video a job takes (seconds, from its header); "
                                                          "a clip of unknown length is stopped there")
    job_max_video_frames: int = Field(18_000, ge=1, description="most frames in a video job (from its header)")
    job_max_video_mpx: float = Field(8.3, gt=0, description="largest video frame in megapixels (3840×2160 is 8.3)")

    def jobs_root(self, home: Path) -> Path:
        return self.jobs_dir or home / "jobs"

    def intake_limits(self) -> IntakeLimits:
        return IntakeLimits(max_items=self.job_max_items, max_unzipped_bytes=int(self.job_max_unzipped_mb * _MB),
                            max_video_s=self.job_max_video_s, max_video_frames=self.job_max_video_frames,
                            max_video_pixels=int(self.job_max_video_mpx * 1e6))

    @property
    def job_max_disk_bytes(self) -> int:
        return int(self.job_max_disk_mb * _MB)
