"""The output formats are one list (facefuse.imageio.OUTPUTS): each row is checked against Pillow's own idea of
the format, and every shell's list of output formats is compared with it — a format added to one place only, or
a row whose suffix or media type is wrong, fails here."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from facefuse.cli import build_parser
from facefuse.cli.options import model_from_args
from facefuse.errors import FacefuseError
from facefuse.imageio import (_XMP_LABEL, AI_LABEL_DESCRIPTION, OUTPUTS, decode_image, encode_image, output_format,
                             read_label)
from facefuse.serve.negotiation import image_format_wanted
from facefuse.serve.openapi import FuseAnswer
from facefuse.stages.encode import EncodeOptions


@pytest.mark.parametrize("row", OUTPUTS, ids=lambda r: r.name)
def test_each_format_is_written_as_what_its_row_says(row):
    pixels = np.random.default_rng(3).integers(0, 255, (48, 64, 3), np.uint8)
    data = encode_image(pixels, row.name, 90)
    with Image.open(io.BytesIO(data)) as opened:
        assert opened.format == row.pil and Image.MIME[opened.format] == row.media_type
    assert Image.registered_extensions()["." + row.extension] == row.pil
    assert decode_image(data).format == row.pil
    for spelling in (row.name, *row.aliases, row.name.upper(), "." + row.extension):
        assert output_format(spelling) == row.pil
        assert image_format_wanted(f"image/{spelling.lstrip('.').lower()}") == (True, row.name)


def test_every_shell_offers_exactly_the_formats_of_the_list():
    spellings = {s for row in OUTPUTS for s in (row.name, *row.aliases)}
    field = EncodeOptions.model_json_schema()["properties"]["output_format"]
    assert {v for part in field["anyOf"] for v in part.get("enum", [])} == spellings
    assert field["x-aliases"] == {a: row.name for row in OUTPUTS for a in row.aliases}
    argv = ["fuse", "--source", "s.jpg", "--target", "t.jpg", "--output", "o.png", "--output-format"]
    for spelling in spellings:
        assert model_from_args(EncodeOptions, build_parser().parse_args([*argv, spelling])).output_format == spelling
    with pytest.raises(FacefuseError):
        model_from_args(EncodeOptions, build_parser().parse_args([*argv, "gif"]))
    answer = FuseAnswer.model_json_schema()["properties"]
    assert set(answer["format"]["enum"]) == {row.name for row in OUTPUTS}
    assert set(answer["media_type"]["enum"]) == {row.media_type for row in OUTPUTS}
    with pytest.raises(FacefuseError) as caught:
        output_format("gif")
    assert all(row.name in caught.value.hint for row in OUTPUTS)


@pytest.mark.parametrize("quality", [75, 92])
def test_jpeg_is_byte_for_byte_what_pillow_writes_with_the_label(faces_dir, quality: int) -> None:
    """The JPEG path encodes with OpenCV and puts the label's EXIF and XMP segments in itself (faster): its bytes
    are exactly Pillow's ``save(..., exif=, xmp=)``, so every reader sees the same file and label as before."""
    photo = np.asarray(Image.open(faces_dir / "face_recognition" / "obama-720p.jpg").convert("RGB"))
    exif = Image.Exif()
    exif[0x010E] = AI_LABEL_DESCRIPTION
    exif[0x0131] = "facefuse"
    for pixels in (photo, photo[1::3, ::2]):  # a view with odd sides and strides too
        expected = io.BytesIO()
        Image.fromarray(np.ascontiguousarray(pixels)).save(expected, "JPEG", quality=quality, exif=exif,
                                                           xmp=_XMP_LABEL.encode(),
                                                           subsampling=0 if quality >= 90 else 2)
        data = encode_image(pixels, "JPEG", quality)
        assert data == expected.getvalue()
        assert read_label(data)["exif_description"] == AI_LABEL_DESCRIPTION
