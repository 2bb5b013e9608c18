"""The model card shipped beside the ONNX file: data, classes, training time, measured IoUs, licence."""

from __future__ import annotations

from pathlib import Path

from .labels import CLASSES
from .train import TrainConfig

LICENCE = ("Non-commercial research use only: trained on UTKFace (Zhang, Song & Qi, CVPR 2017), whose licence allows "
           "non-commercial research use only. `facefuse models list` marks it NON-COMMERCIAL; with "
           "`allow_noncommercial_models` false the pipeline does not use it.")


def _goal(value: float, goal: float | None) -> str:
    return "" if goal is None else f"≥ {goal:.2f}: {'met' if value >= goal else 'missed'}"


BASE_RUN_MINUTES = 53  # the 2600-step base run's training time, as its own card recorded it (round 2)


def _fine_tune_row(config: TrainConfig) -> str:
    """The card's row for a fine-tune (``--init``): what it started from and what its samples added."""
    if config.init is None:
        return ""
    edges = (f"; {config.photo_edges:.0%} of its samples cut as a tight photo, the photo reflected past its edges as "
             "the aligned crop reflects it at inference (labels unknown there)" if config.photo_edges else "")
    return (f"| fine-tune | from the exported 2600-step model ({config.init.name}): {config.steps} more steps, lr "
            f"{config.lr} with warm-up + cosine, seed {config.seed}{edges} |\n")


def _fine_tune_step(config: TrainConfig) -> str:
    """The Makefile's fine-tune step as the card's reproduce line names it."""
    if config.init is None:
        return ""
    return (f", then a fine-tune of that export: `--init artifacts/segmenter/face_segmenter.onnx --photo-edges "
            f"{config.photo_edges} --lr {config.lr} --steps {config.steps} --seed {config.seed}` into "
            "`artifacts/segmenter-edges`")


def _edges_bullet(config: TrainConfig) -> str:
    if not config.photo_edges:
        return ""
    return ("\n- **Tight photos** (the fine-tune): a share of the samples cut by one to four edges between the crop's "
            "border and a little inside the face, the sample reflected past them as the aligned crop reflects a photo "
            "at inference; the loss ignores the pixels past the edges.")


def _edges_limit(config: TrainConfig) -> str:
    if not config.photo_edges:
        return ", and on the mirrored borders the aligned crop gets from tight photos"
    return ("; past a photo's edge (the mirrored border of a tight photo's crop) it was taught nothing and often "
            "parses the mirrored faces as faces")


def write_card(path: Path, config: TrainConfig, summary: dict) -> Path:
    held = summary.get("held_out", {})
    base = TrainConfig(out=config.out) if config.init else config  # a fine-tune's card names its base recipe too
    minutes = summary.get("train_seconds", 0) / 60
    goals = {"face": 0.90, "skin": 0.90, "hair": 0.80, "occluder": 0.80}
    rows = "\n".join(f"| {name} | {held[name]:.3f} | {_goal(held[name], goals.get(name))} |"
                     for name in ("face", *CLASSES) if name in held)
    text = f"""# face_segmenter — face parsing for occlusion-aware fusion

**Licence: {LICENCE}**

| | |
|---|---|
| input | `[N,3,128,128]` float32 RGB in 0..1 (pixels / 255), dynamic batch: the mesh engine's aligned crop at 128 px (`similarity(face.keypoints, crop_template(128))`, the face in the middle ~55 %) |
| output | `[N,8,128,128]` float32 logits: {", ".join(f"{i} {name}" for i, name in enumerate(CLASSES))} |
| network | U-Net of plain 3×3 convolutions + batch norm (folded) + ReLU, widths {config.widths}, half-resolution encoder, full-resolution branch of {config.full} channels; {summary.get("parameters", "?")} parameters, {summary.get("onnx_bytes", 0) / 1e6:.2f} MB |
| training | {base.steps} steps × batch {base.batch} (random {base.crop} px windows for the first {base.crop_share:.0%} of the schedule, then whole crops; in the shipped recipe steps 0–1259 and 1800–1818 used windows), AdamW lr {base.lr} with warm-up + cosine, cross-entropy + 0.5 soft Dice, seed {base.seed}; `make train-segmenter`'s recipe: 1800 steps, then continued to {base.steps} |
| training time | {minutes:.0f} min of training steps{f" for the fine-tune (the base run: {BASE_RUN_MINUTES} min)" if config.init else ""} on this project's shared 2-core CPU VM (1 PyTorch thread, `nice`, other work running at the same time) |
{_fine_tune_row(config)}| ONNX parity | max \\|PyTorch − ONNX Runtime\\| = {summary.get("parity_max_abs_diff", float("nan")):.1e} |
| reproduce | `make train-segmenter` (`facefuse train segmenter --steps 1800 --until train`, then `--steps 2600`{_fine_tune_step(config)}; resumable) |

## Data

- **Faces**: {summary.get("train_photos", "?")} photos — UTKFace "Aligned&Cropped" (minus the fixed 5 % hold-out split) and a
  few dozen shared photos with real scenes (face_recognition knn_examples/train, dlib-faces, insightface bulk).
  Each is analysed once by facefuse's own FaceAnalyzer (BlazeFace + FaceMesh 468 points) and cut to the contract's
  crop. Face skin = FaceMesh face oval minus the features; brows, eyes, lips from MediaPipe's contour groups; nose
  = convex hull of bridge, wings and tip points. Hair on real photos: nearest of three colour models (skin, the strip
  above the forehead, the photo border) inside a head-shaped prior; undecided pixels are ignored by the loss.
- **Synthetic scenes and occluders with exact masks** (Nirkin et al., FG 2018): random backgrounds behind the head
  (UTKFace crops have almost no scene), hairstyles behind the face, fringes and strands over it, glasses (frames of
  random shape/colour/thickness from the eye landmarks, clear or tinted lenses, sunglasses), hand-like skin shapes,
  random objects and textures, surgical masks over the lower face, microphones; then colour, blur, noise, flips and
  small affine transforms.{_edges_bullet(config)}

## Measured (held-out synthetic set: {held.get("samples", "?")} composed samples of UTKFace photos never seen in training)

| class | IoU | project goal |
|---|---|---|
{rows}

"face" merges skin, brows, eyes, nose and lips. The hair IoU partly measures agreement with the colour heuristic on
real hair; speed and the contact sheet on real photos are in `BENCHMARKS.md` (`benchmarks/segmenter.py`).

## Limits

Trained on synthetic occluders: real occluders unlike any of them (e.g. scarves, hats, tattoos) may be missed;
ears and neck count as background; the forehead above FaceMesh's oval is not labelled in training. Outside the
face hair and occluder are over-predicted on backgrounds{_edges_limit(config)}: use hair/occluder masks only within
and around the face oval. Real textured backgrounds such as
curtains can be taken for hair. Brows and eyes are the weakest classes (thin regions at 128 px).
"""
    path.write_text(text)
    return path
