"""The public neural swappers: the one table both the registry and the swapper engines are built from.

Each row says where the file is published and under which licence (what the registry needs) and how the model
is fed (what :mod:`facefuse.fusion.swappers` needs): the alignment template and crop size, the pixel
normalisations of its target input and output, and how the source identity is given. Adding a swapper is adding
a row here; its registry entry (``facefuse models list``) and its engine (``--engine NAME``) follow.

None of these weights is redistributable by us, and most are licensed for non-commercial use only (InsightFace's
models and those trained on its embeddings or on VGGFace2/CelebA-HQ). SHA-256 values are given where the
published file's hash is known; an entry without one is fetched unverified, and a local file given with
``--model-path`` whose hash is not the registry's needs an explicit opt-in (``--allow-unknown-model``).

This module imports nothing from the rest of the package: the registry and the engines both import it.
"""

from __future__ import annotations

from dataclasses import dataclass

RELEASES = "https://github.com/facefusion/facefusion-assets/releases/download/"
INSIGHTFACE = "InsightFace model licence"
EMBEDDING = 512

# pixel normalisations by name: the formula the registry shows, and (in fusion.templates) the tensor maths
NORM_FORMULAS = {"unit": "x / 255", "symmetric": "(x / 255 - 0.5) / 0.5", "imagenet": "ImageNet mean/std"}


@dataclass(frozen=True)
class SwapperModel:
    """One swapper. ``identity``: "emap" (normalised ArcFace × the model's emap, re-normalised, as InsightFace
    does), "arcface" (normalised ArcFace), "converted" (``converter``(raw ArcFace), normalised), "converted_raw"
    (``converter``(raw ArcFace) as is), or "image" (an aligned source crop)."""

    name: str
    release: str
    template: str
    size: int
    target_norm: str
    output_norm: str
    identity: str
    licence: str
    description: str
    converter: str | None = None
    source_template: str = ""
    source_size: int = 0
    source_norm: str = "unit"
    sha256: str | None = None
    size_bytes: int | None = None

    def source_shape(self) -> tuple[int, ...]:
        return (3, self.source_size, self.source_size) if self.identity == "image" else (EMBEDDING,)


@dataclass(frozen=True)
class SupportModel:
    """A model the swappers need beside themselves: the ArcFace recognizer and the embedding converters."""

    name: str
    release: str
    shape: tuple[int, ...]
    normalisation: str
    licence: str
    description: str


def _hyperswap(version: str) -> SwapperModel:
    return SwapperModel(f"hyperswap_{version}_256", "models-3.3.0", "arcface-128", 256, "symmetric", "symmetric",
                        "arcface", "FaceFusion HyperSwap, trained on InsightFace embeddings",
                        f"HyperSwap {version}, 256 px, arcface-128 alignment; source = normalised ArcFace")


def _ghost(version: str) -> SwapperModel:
    return SwapperModel(f"ghost_{version}_256", "models-3.0.0", "arcface-112-v1", 256, "symmetric", "symmetric",
                        "converted_raw", "GHOST (ai-forever/sber-swap): Apache-2.0 code; weights use an InsightFace "
                        "ArcFace", f"GHOST {version}, 256 px, arcface-112-v1 alignment; source = "
                        "crossface_ghost(ArcFace), raw", converter="crossface_ghost")


SWAPPER_MODELS: tuple[SwapperModel, ...] = (
    SwapperModel("inswapper_128", "models-3.0.0", "arcface-128", 128, "unit", "unit", "emap", INSIGHTFACE,
                 "InsightFace inswapper, 128 px, arcface-128 alignment; source = normalised ArcFace × emap",
                 sha256="e4a3f08c753cb72d04e10aa0f7dbe3deebbf39567d4ead6dce08e98aa49e16af", size_bytes=554253681),
    SwapperModel("inswapper_128_fp16", "models-3.0.0", "arcface-128", 128, "unit", "unit", "emap", INSIGHTFACE,
                 "inswapper_128 in half precision (GPU)",
                 sha256="6d51a9278a1f650cffefc18ba53f38bf2769bf4bbff89267822cf72945f8a38b", size_bytes=277680638),
    *(_hyperswap(v) for v in ("1a", "1b", "1c")),
    SwapperModel("simswap_256", "models-3.0.0", "arcface-112-v1", 256, "imagenet", "unit", "converted",
                 "SimSwap (neuralchen)", "SimSwap, 256 px, arcface-112-v1 alignment; source = "
                 "crossface_simswap(ArcFace), normalised", converter="crossface_simswap"),
    SwapperModel("simswap_unofficial_512", "models-3.0.0", "arcface-112-v1", 512, "unit", "unit", "converted",
                 "SimSwap, unofficial 512 training", "SimSwap 512 px, arcface-112-v1 alignment; source = "
                 "crossface_simswap(ArcFace), normalised", converter="crossface_simswap"),
    *(_ghost(v) for v in ("1", "2", "3")),
    SwapperModel("blendswap_256", "models-3.0.0", "ffhq-512", 256, "unit", "unit", "image", "BlendFace (Sony)",
                 "BlendSwap, 256 px, ffhq-512 alignment; source = 112 px arcface-112 face crop",
                 source_template="arcface-112", source_size=112),
    SwapperModel("uniface_256", "models-3.0.0", "ffhq-512", 256, "symmetric", "symmetric", "image",
                 "UniFace (xc-csc101)", "UniFace, 256 px, ffhq-512 alignment; source = 256 px ffhq-512 face crop",
                 source_template="ffhq-512", source_size=256),
)

SUPPORT_MODELS: tuple[SupportModel, ...] = (
    SupportModel("arcface_w600k_r50", "models-3.0.0", (1, 3, 112, 112), "x / 127.5 - 1", INSIGHTFACE,
                 "ArcFace ResNet-50 (WebFace600K): the 512-D identity the swappers take; arcface-112 alignment"),
    SupportModel("crossface_simswap", "models-3.0.0", (1, EMBEDDING), "raw ArcFace embedding",
                 "FaceFusion crossface, InsightFace-derived", "maps an ArcFace embedding into SimSwap's identity space"),
    SupportModel("crossface_ghost", "models-3.0.0", (1, EMBEDDING), "raw ArcFace embedding",
                 "FaceFusion crossface, InsightFace-derived", "maps an ArcFace embedding into GHOST's identity space"),
)

SWAPPERS: dict[str, SwapperModel] = {model.name: model for model in SWAPPER_MODELS}
