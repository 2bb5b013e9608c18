"""Batch jobs: one source fused into many photos or a whole video, persisted so they survive a restart.

``JobStore`` keeps state in SQLite (WAL) and files in one folder per job; ``JobRunner`` runs them on worker
threads and resumes what a killed process left; ``fuse_photos`` is the photo batch shared with ``facefuse batch``.
"""

from __future__ import annotations

from .intake import IntakeLimits, classify_targets
from .photos import PhotoTask, fuse_photos, output_name, write_zip
from .runner import JobOptions, JobRunner
from .store import JobKind, JobRecord, JobState, JobStore

__all__ = ["IntakeLimits", "JobKind", "JobOptions", "JobRecord", "JobRunner", "JobState", "JobStore", "PhotoTask",
           "classify_targets", "fuse_photos", "output_name", "write_zip"]
