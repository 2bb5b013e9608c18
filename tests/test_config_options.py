"""The analysis, quality-gate, image-limit and restorer options are schema options like FusionOptions: every field of
AnalysisConfig, QualityConfig, ImageLimits and RestoreConfig is a CLI flag and a service setting that reaches the
library's configuration, field by field (a field added later is covered without touching this file), a bad value
is the same INVALID_OPTION in each shell, and a restorer threshold set from the library or the CLI changes what a
fusion does."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from facefuse.cli import build_parser, main
from facefuse.cli.options import fuser_config
from facefuse.config import AnalysisConfig, ImageLimits, QualityConfig
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.fusion.restorer import RestoreConfig
from facefuse.pipeline import Fuser, FuserConfig
from facefuse.schema import fields_of, flag_of, shell_name
from facefuse.serve import ServeSettings
from facefuse.serve.settings import SERVICE_OWN

# each model and where the library's FuserConfig holds it
WHERE = {AnalysisConfig: lambda c: c.analysis, QualityConfig: lambda c: c.analysis.quality,
         ImageLimits: lambda c: c.analysis.limits, RestoreConfig: lambda c: c.restore}
FIELDS = [(model, name) for model in WHERE for name in fields_of(model)]
ARGV = ["fuse", "--source", "s.jpg", "--target", "t.jpg", "--output", "o.png"]
TINY_SOURCE = "hard/poor/03_tiny_jpeg_portrait.jpg"  # a 50 px face: restore=auto restores it by default


def other_value(model: type, name: str) -> Any:
    """A valid value different from the default, from the field's type and its JSON schema's range."""
    info = model.model_fields[name]
    default = info.default
    if info.annotation is bool:
        return not default
    if isinstance(default, Enum):
        return next(m for m in type(default) if m != default)
    field = model.model_json_schema()["properties"][name]
    choices = [v for part in [field, *field.get("anyOf", [])] for v in part.get("enum", []) if v != default]
    if choices:
        return choices[0]
    if name == "detector":
        return "yunet"
    if default is None:  # a path
        return Path("/nowhere/restorer.onnx")
    if isinstance(default, int):
        return default + 1
    return default / 2


def as_text(value: Any) -> str:
    return value.value if isinstance(value, Enum) else str(value).lower() if isinstance(value, bool) else str(value)


@pytest.mark.parametrize("model,name", FIELDS, ids=[f"{m.__name__}.{n}" for m, n in FIELDS])
def test_each_field_is_set_alike_from_the_cli_the_service_and_the_library(model, name, monkeypatch):
    value = other_value(model, name)
    info = model.model_fields[name]
    shell = shell_name(model, name)
    flag = flag_of(shell, info)
    args = [flag if value else "--no-" + flag[2:]] if isinstance(value, bool) else [flag, as_text(value)]
    from_cli = WHERE[model](fuser_config(build_parser().parse_args([*ARGV, *args])))
    assert getattr(from_cli, name) == value
    assert from_cli == model().replaced(**{name: value})  # nothing else moved
    if shell in SERVICE_OWN:  # the service sets it from a setting of its own
        monkeypatch.setenv("FACEFUSE_MAX_IMAGE_MB", "1")
        assert WHERE[model](ServeSettings().fuser_config()).max_bytes == 1024 * 1024
    else:
        monkeypatch.setenv(f"FACEFUSE_{shell.upper()}", as_text(value))
        assert getattr(WHERE[model](ServeSettings().fuser_config()), name) == value
    library = FuserConfig(**{"restore": RestoreConfig(**{name: value})} if model is RestoreConfig else
                          {"analysis": AnalysisConfig(**{name: value}) if model is AnalysisConfig else
                           AnalysisConfig(**{"quality" if model is QualityConfig else "limits": model(**{name: value})})})
    assert getattr(WHERE[model](library), name) == value


def test_a_bad_value_is_one_error_in_every_shell(monkeypatch, capsys):
    with pytest.raises(FacefuseError) as caught:
        RestoreConfig(tile=3)
    assert caught.value.code is ErrorCode.INVALID_OPTION and caught.value.details["option"] == "tile"
    with pytest.raises(FacefuseError) as caught:
        fuser_config(build_parser().parse_args([*ARGV, "--detect-threshold", "2"]))
    assert caught.value.code is ErrorCode.INVALID_OPTION and caught.value.details["option"] == "detect_threshold"
    monkeypatch.setenv("FACEFUSE_RESTORE_STITCH", "glue")
    with pytest.raises(Exception, match="restore_stitch"):
        ServeSettings()


def _restored_source(warnings: list[str]) -> bool:
    return any(w.startswith("restored the source face") for w in warnings)


def test_restorer_thresholds_set_in_the_library_and_the_cli_change_the_fusion(fuser, store_config, faces_dir,
                                                                              tmp_path, capsys):
    source, target = faces_dir / TINY_SOURCE, faces_dir / "face_recognition/obama-480p.jpg"
    assert _restored_source(fuser.fuse(source, target).warnings)
    never = RestoreConfig(blurry_below=0, small_below_px=0, blocky_above=100)
    quiet = Fuser(FuserConfig(store=store_config, restore=never))
    assert not _restored_source(quiet.fuse(source, target).warnings)
    argv = ["fuse", "--source", str(source), "--target", str(target), "--output", str(tmp_path / "o.jpg"), "--json",
            "--restore-blurry-below", "0", "--restore-small-below-px", "0", "--restore-blocky-above", "100"]
    assert main(argv) == 0
    assert not _restored_source(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["warnings"])
