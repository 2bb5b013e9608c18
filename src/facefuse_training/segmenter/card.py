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


def write_card(path: Path, config: TrainConfig, summary: dict) -> Path:
    held = summary.get("held_out", {})
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
| training | {config.steps} steps × batch {config.batch} (random {config.crop} px windows for the first {config.crop_share:.0%} of the schedule, then whole crops; in the shipped recipe steps 0–1259 and 1800–1818 used windows), AdamW lr {config.lr} with warm-up + cosine, cross-entropy + 0.5 soft Dice, seed {config.seed}; the shipped run is `make train-segmenter`'s recipe: 1800 steps, then continued to {config.steps} |
| training time | {minutes:.0f} min of training steps on this project's shared 2-core CPU VM (1 PyTorch thread, `nice`, other trainings running at the same time) |
| ONNX parity | max \\|PyTorch − ONNX Runtime\\| = {summary.get("parity_max_abs_diff", float("nan")):.1e} |
| reproduce | `make train-segmenter` (`facefuse train segmenter --steps 1800 --until train`, then `--steps 2600`; resumable) |

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
  small affine transforms.

## Measured (held-out synthetic set: {held.get("samples", "?")} composed samples of UTKFace photos never seen in training)

| class | IoU | project goal |
|---|---|---|
{rows}

"face" merges skin, brows, eyes, nose and lips. The hair IoU partly measures agreement with the colour heuristic on
real hair; speed and the contact sheet on real photos are in `BENCHMARKS.md` (`benchmarks/segmenter.py`).

## Limits

Trained on synthetic occluders: real occluders unlike any of them (e.g. scarves, hats, tattoos) may be missed;
ears and neck count as background; the forehead above FaceMesh's oval is not labelled in training. Outside the
face (backgrounds, and the mirrored borders the aligned crop gets from tight photos) hair and occluder are
over-predicted: use hair/occluder masks only within and around the face oval. Real textured backgrounds such as
curtains can be taken for hair. Brows and eyes are the weakest classes (thin regions at 128 px).
"""
    path.write_text(text)
    return path
