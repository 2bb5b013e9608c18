"""One definition of the fusion options: every field of FusionOptions reaches the CLI, the HTTP API, the OpenAPI
document, the web page's schema and the service settings, each according to its scope — checked field by field,
so a field added later is covered without touching this file."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from serve_helpers import LiveServer

from facefuse.cli import build_parser
from facefuse.cli.options import flag_name, model_from_args
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.fusion.engine import FusionOptions
from facefuse.imageio import decode_image
from facefuse.schema import Scope, fields_of
from facefuse.serve import ServeSettings

SCHEMA = FusionOptions.model_json_schema()["properties"]
REQUEST = list(fields_of(FusionOptions, Scope.REQUEST))
OPERATOR = list(fields_of(FusionOptions, Scope.OPERATOR))


def other_value(name: str) -> Any:
    """A valid value different from the default, read from the field's own JSON schema."""
    field, default = SCHEMA[name], SCHEMA[name].get("default")
    if field.get("type") == "boolean":
        return not default
    choices = [v for part in [field, *field.get("anyOf", [])] for v in part.get("enum", [part.get("const")])
               if v is not None and v != default]
    if choices:
        return choices[0]
    if "minimum" in field and "maximum" in field:
        middle = (field["minimum"] + field["maximum"]) / 2
        return int(middle) if field.get("type") == "integer" else middle
    numbers = [part for part in field.get("anyOf", []) if part.get("type") == "integer"]
    if numbers:
        return numbers[0].get("minimum", 0) + 1
    return "other_engine" if name == "engine" else f"{default}-other"


def test_every_field_is_a_cli_flag_whose_value_reaches_the_options():
    argv = ["fuse", "--source", "s.jpg", "--target", "t.jpg", "--output", "o.png"]
    expected = {}
    for name in FusionOptions.model_fields:
        value = other_value(name)
        expected[name] = value
        if isinstance(value, bool):
            argv.append(flag_name(name) if value else "--no-" + name.replace("_", "-"))
        else:
            argv += [flag_name(name), str(value)]
    args = build_parser().parse_args(argv)
    assert model_from_args(FusionOptions, args) == FusionOptions(**expected)
    assert model_from_args(FusionOptions, build_parser().parse_args(argv[:7])) == FusionOptions()


def test_bad_values_are_one_error_everywhere(tmp_path):
    with pytest.raises(FacefuseError) as info:
        FusionOptions(sharpen=1.5)
    assert info.value.code is ErrorCode.INVALID_OPTION and info.value.details["option"] == "sharpen"
    assert "sharpen" in info.value.message and "1.5" in info.value.message
    with pytest.raises(FacefuseError) as info:
        FusionOptions(extra={"x": 1})  # the old catch-all field is gone: unknown names are refused
    assert info.value.code is ErrorCode.INVALID_OPTION
    run = subprocess.run([sys.executable, "-m", "facefuse", "fuse", "--source", "s.jpg", "--target", "t.jpg",
                          "--output", str(tmp_path / "o.png"), "--blend", "smudge"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "INVALID_OPTION: invalid blend (got 'smudge')" in run.stderr
    assert "Traceback" not in run.stderr


def test_operator_options_are_serve_settings_not_request_fields(monkeypatch):
    assert OPERATOR, "crop_size is an operator option"
    for name in OPERATOR:
        value = other_value(name)
        monkeypatch.setenv(f"FACEFUSE_{name.upper()}", str(value))
        settings = ServeSettings()
        assert getattr(settings, name) == value
        assert getattr(settings.fusion_defaults(), name) == value
    help_text = subprocess.run([sys.executable, "-m", "facefuse", "serve", "--help"], capture_output=True,
                               text=True, timeout=120).stdout
    for name in OPERATOR:
        assert flag_name(name) in help_text and f"FACEFUSE_{name.upper()}" in help_text


@pytest.fixture(scope="module")
def server(store_config) -> Iterator[LiveServer]:
    with LiveServer(store_config, crop_size=256) as live:
        yield live


@pytest.fixture(scope="module")
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def test_request_fields_are_in_openapi_and_the_options_endpoint(http):
    described = http.get("/v1/options").json()
    assert described["engines"] == ["mesh"]
    properties = described["schema"]["properties"]
    document = http.get("/openapi.json").json()
    ref = document["paths"]["/v1/fuse"]["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["$ref"]
    multipart = document["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]
    for name in REQUEST:
        for schema in (properties[name], multipart[name]):
            assert schema["description"] == SCHEMA[name]["description"] and schema["x-scope"] == "request"
    for name in OPERATOR:
        assert name not in properties and name not in multipart
    engine = properties["engine"]
    assert engine.get("enum", [engine.get("const")]) == ["mesh"]  # only what this server loaded


@pytest.fixture(scope="module")
def photos(faces_dir: Path) -> dict[str, bytes]:
    rec = faces_dir / "face_recognition"
    return {"obama": (rec / "obama.jpg").read_bytes(), "biden": (rec / "biden.jpg").read_bytes(),
            "two": (rec / "two_people.jpg").read_bytes()}


def _fused(http: httpx.Client, source: bytes, target: bytes, **fields: Any) -> np.ndarray:
    data = {"visible_label": "false", "output_format": "png", **{k: str(v) for k, v in fields.items()}}
    response = http.post("/v1/fuse", files={"source": ("s.jpg", source), "target": ("t.jpg", target)}, data=data,
                         headers={"Accept": "image/png"})
    assert response.status_code == 200, response.text
    return decode_image(response.content).pixels


def test_new_request_fields_change_the_result(http, photos):
    """source_face, blend and sharpen were missing from the API; each must reach the pipeline."""
    base = _fused(http, photos["obama"], photos["biden"])
    for field, value in (("blend", "poisson"), ("sharpen", 1.0), ("source_face", 1)):
        source = photos["two"] if field == "source_face" else photos["obama"]
        changed = _fused(http, source, photos["biden"], **{field: value})
        assert changed.shape == base.shape and not np.array_equal(changed, base), field
    for field, value in (("sharpen", 2), ("source_face", "all"), ("crop_size", 1024)):
        response = http.post("/v1/fuse", files={"source": ("s.jpg", photos["obama"]),
                                                "target": ("t.jpg", photos["biden"])}, data={field: str(value)})
        assert response.status_code == 400 and response.json()["error"]["details"]["option"] == field


def test_segmentation_offers_whole_occluders_in_every_shell(http, photos):
    """segmentation="whole" (issue 17: the target's occluders the segmenter is sure of kept whole) is a choice of
    the one schema: the library, the CLI and the service take it, list it, and refuse a name that is not one."""
    assert FusionOptions(segmentation="whole").segmentation == "whole"
    argv = ["fuse", "--source", "s.jpg", "--target", "t.jpg", "--output", "o.png", "--segmentation", "whole"]
    assert model_from_args(FusionOptions, build_parser().parse_args(argv)) == FusionOptions(segmentation="whole")
    schema = http.get("/v1/options").json()["schema"]["properties"]["segmentation"]
    assert schema["enum"] == ["auto", "whole", "off"] and "whole:" in schema["description"]
    with pytest.raises(FacefuseError) as info:
        FusionOptions(segmentation="entire")
    assert info.value.code is ErrorCode.INVALID_OPTION and info.value.details["option"] == "segmentation"
    response = http.post("/v1/fuse", files={"source": ("s.jpg", photos["obama"]), "target": ("t.jpg", photos["biden"])},
                         data={"segmentation": "entire"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_OPTION"
    assert response.json()["error"]["details"]["option"] == "segmentation"


def test_a_request_cannot_name_an_engine_the_operator_did_not_load(http, photos):
    """inswapper_128 is a real registry engine (a 554 MB download): naming it must not load anything."""
    response = http.post("/v1/fuse", files={"source": ("s.jpg", photos["obama"]), "target": ("t.jpg", photos["biden"])},
                         data={"engine": "inswapper_128"})
    error = response.json()["error"]
    assert response.status_code == 400 and error["code"] == "INVALID_OPTION" and "'mesh'" in error["message"]
