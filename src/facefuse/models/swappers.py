"""Registry entries of the public neural swappers, their embedding converters and the ArcFace recognizer.

None of these weights is redistributable by us, and most are licensed for non-commercial use only (InsightFace's
models and those trained on its embeddings or on VGGFace2/CelebA-HQ); `facefuse models list` and the README say
so beside each. SHA-256 values are given where the published file's hash is known; an entry without one is
fetched unverified, and a local file given with ``--model-path`` whose hash is not the registry's needs an
explicit opt-in (``--allow-unknown-model``).
"""

from __future__ import annotations

from .registry import InputContract, ModelEntry, Task, UrlSource

_FF = "https://github.com/facefusion/facefusion-assets/releases/download/"
_INSIGHTFACE = "InsightFace model licence"


def _entry(name: str, task: Task, release: str, shape: tuple[int, ...], norm: str, licence: str,
           description: str, sha256: str | None = None, size: int | None = None) -> ModelEntry:
    return ModelEntry(name=name, task=task, filename=f"{name}.onnx", sha256=sha256, size=size,
                      source=UrlSource(f"{_FF}{release}/{name}.onnx"), licence=licence,
                      input=InputContract(shape, "RGB", norm), commercial_use=False, description=description)


def swapper_entries() -> tuple[ModelEntry, ...]:
    """Entries to add to the default registry (``ModelRegistry(_ENTRIES + swapper_entries())``)."""
    t256 = (1, 3, 256, 256)
    return (
        _entry("arcface_w600k_r50", Task.RECOGNIZER, "models-3.0.0", (1, 3, 112, 112), "x / 127.5 - 1", _INSIGHTFACE,
               "ArcFace ResNet-50 (WebFace600K): the 512-D identity the swappers take; arcface-112 alignment"),
        _entry("inswapper_128", Task.SWAPPER, "models-3.0.0", (1, 3, 128, 128), "x / 255", _INSIGHTFACE,
               "InsightFace inswapper, 128 px, arcface-128 alignment; source = normalised ArcFace × emap",
               "e4a3f08c753cb72d04e10aa0f7dbe3deebbf39567d4ead6dce08e98aa49e16af", 554253681),
        _entry("inswapper_128_fp16", Task.SWAPPER, "models-3.0.0", (1, 3, 128, 128), "x / 255", _INSIGHTFACE,
               "inswapper_128 in half precision (GPU)",
               "6d51a9278a1f650cffefc18ba53f38bf2769bf4bbff89267822cf72945f8a38b", 277680638),
        *(_entry(f"hyperswap_{v}_256", Task.SWAPPER, "models-3.3.0", t256, "(x / 255 - 0.5) / 0.5",
                 "FaceFusion HyperSwap, trained on InsightFace embeddings",
                 f"HyperSwap {v}, 256 px, arcface-128 alignment; source = normalised ArcFace")
          for v in ("1a", "1b", "1c")),
        _entry("simswap_256", Task.SWAPPER, "models-3.0.0", t256, "ImageNet mean/std",
               "SimSwap (neuralchen)",
               "SimSwap, 256 px, arcface-112-v1 alignment; source = crossface_simswap(ArcFace), normalised"),
        _entry("simswap_unofficial_512", Task.SWAPPER, "models-3.0.0", (1, 3, 512, 512), "x / 255",
               "SimSwap, unofficial 512 training",
               "SimSwap 512 px, arcface-112-v1 alignment; source = crossface_simswap(ArcFace), normalised"),
        *(_entry(f"ghost_{v}_256", Task.SWAPPER, "models-3.0.0", t256, "(x / 255 - 0.5) / 0.5",
                 "GHOST (ai-forever/sber-swap): Apache-2.0 code; weights use an InsightFace ArcFace",
                 f"GHOST {v}, 256 px, arcface-112-v1 alignment; source = crossface_ghost(ArcFace), raw")
          for v in ("1", "2", "3")),
        _entry("blendswap_256", Task.SWAPPER, "models-3.0.0", t256, "x / 255",
               "BlendFace (Sony)",
               "BlendSwap, 256 px, ffhq-512 alignment; source = 112 px arcface-112 face crop"),
        _entry("uniface_256", Task.SWAPPER, "models-3.0.0", t256, "(x / 255 - 0.5) / 0.5",
               "UniFace (xc-csc101)",
               "UniFace, 256 px, ffhq-512 alignment; source = 256 px ffhq-512 face crop"),
        _entry("crossface_simswap", Task.RECOGNIZER, "models-3.0.0", (1, 512), "raw ArcFace embedding",
               "FaceFusion crossface, InsightFace-derived",
               "maps an ArcFace embedding into SimSwap's identity space"),
        _entry("crossface_ghost", Task.RECOGNIZER, "models-3.0.0", (1, 512), "raw ArcFace embedding",
               "FaceFusion crossface, InsightFace-derived",
               "maps an ArcFace embedding into GHOST's identity space"),
    )
