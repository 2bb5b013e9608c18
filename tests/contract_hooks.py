"""Schemathesis hooks for tests/test_contract.py (loaded by the ``schemathesis`` process via SCHEMATHESIS_HOOKS).

Real photos from ../shared stand in for generated image bytes: schema-valid requests then carry photos a person
would send, so "valid data must be accepted" is tested with fusions that can succeed, not only with the 1-pixel
files Schemathesis ships. The base64 photo fields also get a real-photo example for the examples phase.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import strategies as st

PHOTOS = [Path(p).read_bytes() for p in os.environ["FACEFUSE_CONTRACT_PHOTOS"].split(os.pathsep)]
BASE64 = [base64.b64encode(photo).decode() for photo in PHOTOS]

schemathesis.openapi.format("binary", st.sampled_from(PHOTOS))
schemathesis.openapi.format("byte", st.sampled_from(BASE64))


@schemathesis.hook
def before_load_schema(context: Any, raw_schema: dict[str, Any]) -> None:
    """A real-photo example for each base64 photo field (the JSON request bodies' photos)."""
    for schema in raw_schema["components"]["schemas"].values():
        photos = [field for field in schema.get("properties", {}).values() if field.get("format") == "byte"]
        for i, field in enumerate(photos):
            field["example"] = BASE64[i % len(BASE64)]


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    """Leaves out video jobs whose ``end`` is not after their ``start``: the one rule of the jobs' body a JSON
    Schema cannot state (it compares two fields); the server answers it with 400 INVALID_OPTION, which
    tests/test_jobs_video.py checks."""
    body = case.body if isinstance(case.body, dict) else {}
    start, end = body.get("start", 0), body.get("end")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end))
    return not (numbers and 0 < end <= start)
