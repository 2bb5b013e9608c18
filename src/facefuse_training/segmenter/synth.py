"""Training samples: a labelled face, synthetic surroundings, and synthetic occluders composited with known masks.

The approach of Nirkin et al., "On Face Segmentation, Face Swapping, and Face Perception" (FG 2018): occluders drawn
or cut at random and pasted over real faces give exact per-pixel labels that no annotator had to draw. Here:

- surroundings: the face photo's own pixels are kept only around the face (a ragged soft edge), the rest of the
  pipeline's 128 px window gets a random background and, behind the head, a random hairstyle (``HAIR``);
- hair in front of the face: fringes and strands drawn as curves with hair colours, or cut from another photo's
  hair (``HAIR``);
- glasses: frames of random shape/colour/thickness placed from the eye landmarks, clear or tinted lenses; sunglasses
  and frames are ``OCCLUDER``, the eye seen through a clear lens keeps its own label;
- hands (skin-coloured palm and fingers), random objects and textures, surgical masks over the lower face,
  microphones (dark rod and ball, silver heads, headset booms), thin bars across the face (half of them
  skin-coloured, shaded like a cylinder, with a cast shadow beside them), fingers, and short stubs that start and
  end on the face (fingertips, pens, short microphones, skin-coloured or dark): ``OCCLUDER``;
- hard negatives that keep their face labels (:func:`add_hard_negatives`): side shadows (a soft half-plane or a
  ramp darkening to 0.15–0.6, sometimes tinted), darkened brows and eye sockets, beards and stubble on the lower
  face, lipstick, eye shadow, eyeliner and blush — real photos have all of them and none is a thing in front of
  the face, so none may be called an occluder;
- then the usual photometric and geometric augmentation (colour, blur, noise, small affine), labels warped with
  nearest-neighbour sampling.

Every random choice comes from the ``numpy.random.Generator`` passed in, so a sample is a function of its seed.
"""

from __future__ import annotations

import cv2
import numpy as np

from facefuse.geometry.regions import FACE_OVAL, LEFT_EYE, LIPS_OUTER, RIGHT_EYE

from .labels import BACKGROUND, BROWS, EYES, HAIR, IGNORE, LIPS, NOSE, OCCLUDER, SIZE, SKIN, LabelSet

Rng = np.random.Generator

HAIR_COLOURS = np.array([[20, 15, 12], [45, 30, 20], [70, 45, 25], [110, 75, 40], [160, 120, 70], [210, 180, 120],
                         [140, 60, 30], [150, 150, 150], [220, 220, 215], [35, 35, 40]], np.float32)


# -- drawing helpers ---------------------------------------------------------------------------------------------


def _paste(image: np.ndarray, labels: np.ndarray, layer: np.ndarray, alpha: np.ndarray, cls: int,
           threshold: float = 0.5) -> None:
    """Alpha-composite ``layer`` over ``image`` in place; pixels where ``alpha`` ≥ threshold take ``cls``."""
    a = alpha[..., None]
    image[:] = np.clip(image * (1 - a) + layer * a, 0, 255)
    labels[alpha >= threshold] = cls


def _noise_field(rng: Rng, scale: int, channels: int = 1) -> np.ndarray:
    """Smooth random field in [-1, 1] (upsampled coarse noise)."""
    coarse = rng.uniform(-1, 1, (max(2, SIZE // scale), max(2, SIZE // scale), channels)).astype(np.float32)
    field = cv2.resize(coarse, (SIZE, SIZE), interpolation=cv2.INTER_CUBIC)
    return field.reshape(SIZE, SIZE, channels)


def _texture(rng: Rng, base: np.ndarray, kind: int | None = None) -> np.ndarray:
    """A random texture around colour ``base``: flat+shading, noise, stripes or checks."""
    kind = int(rng.integers(0, 4)) if kind is None else kind
    shade = 1 + 0.25 * _noise_field(rng, int(rng.integers(16, 64)))
    out = np.broadcast_to(base, (SIZE, SIZE, 3)) * shade
    if kind == 1:
        out = out + 25 * _noise_field(rng, int(rng.integers(2, 8)), 3)
    elif kind == 2:
        angle = rng.uniform(0, np.pi)
        ys, xs = np.mgrid[0:SIZE, 0:SIZE]
        period = rng.uniform(3, 14)
        stripes = np.sin((xs * np.cos(angle) + ys * np.sin(angle)) * 2 * np.pi / period)[..., None]
        out = out + stripes * rng.uniform(10, 60) * rng.uniform(-1, 1, 3)
    elif kind == 3:
        cell = int(rng.integers(4, 16))
        ys, xs = np.mgrid[0:SIZE, 0:SIZE]
        checks = (((xs // cell) + (ys // cell)) % 2)[..., None]
        out = out + (checks - 0.5) * rng.uniform(20, 80) * rng.uniform(-1, 1, 3)
    return np.clip(out, 0, 255).astype(np.float32)


def _random_colour(rng: Rng) -> np.ndarray:
    """Any colour, usually muted (most real scenes and objects are far from saturated)."""
    colour = rng.uniform(0, 255, 3)
    grey = colour.mean()
    return (grey + (colour - grey) * rng.uniform(0.15, 1.0) ** 2).astype(np.float32)


def hair_texture(rng: Rng, colour: np.ndarray, angle: float) -> np.ndarray:
    """Hair-like texture: streaks along ``angle`` (motion-blurred noise) over a base colour."""
    noise = rng.normal(0, 1, (SIZE, SIZE)).astype(np.float32)
    length = int(rng.integers(9, 25))
    kernel = np.zeros((length, length), np.float32)
    c = length // 2
    dx, dy = np.cos(angle), np.sin(angle)
    cv2.line(kernel, (int(c - dx * c), int(c - dy * c)), (int(c + dx * c), int(c + dy * c)), 1.0, 1)
    streaks = cv2.filter2D(noise, -1, kernel / max(kernel.sum(), 1))
    streaks = streaks / (streaks.std() + 1e-6)
    shade = 1 + 0.2 * _noise_field(rng, 32)[..., 0]
    out = colour[None, None] * (shade[..., None] + 0.12 * streaks[..., None]) + 4 * streaks[..., None]
    return np.clip(out, 0, 255).astype(np.float32)


def _hair_colour(rng: Rng) -> np.ndarray:
    return np.clip(HAIR_COLOURS[rng.integers(len(HAIR_COLOURS))] * rng.uniform(0.8, 1.2, 3), 0, 255)


def _soft(mask: np.ndarray, blur: float) -> np.ndarray:
    k = max(1, int(blur * 2)) | 1
    return cv2.GaussianBlur(mask.astype(np.float32), (k, k), 0) if blur > 0 else mask.astype(np.float32)


def _face_frame(mesh: np.ndarray) -> tuple[np.ndarray, float, float, float, float]:
    oval = mesh[FACE_OVAL]
    return oval, oval[:, 0].min(), oval[:, 0].max(), oval[:, 1].min(), oval[:, 1].max()


# -- surroundings ------------------------------------------------------------------------------------------------


def background(rng: Rng, donors: LabelSet | None = None) -> np.ndarray:
    """A random scene behind the head: textures, shapes and blurred pieces of other photos."""
    out = _texture(rng, _random_colour(rng))
    for _ in range(int(rng.integers(0, 5))):
        layer = _texture(rng, _random_colour(rng))
        shape = np.zeros((SIZE, SIZE), np.float32)
        pts = rng.uniform(-20, SIZE + 20, (int(rng.integers(3, 7)), 2)).astype(np.int32)
        cv2.fillPoly(shape, [cv2.convexHull(pts)], 1.0)
        a = _soft(shape, rng.uniform(0, 2))[..., None]
        out = out * (1 - a) + layer * a
    if donors is not None and rng.random() < 0.3:
        donor = donors.images[rng.integers(len(donors))].astype(np.float32)
        donor = cv2.GaussianBlur(cv2.resize(donor, (SIZE, SIZE)), (0, 0), rng.uniform(3, 8))
        out = 0.5 * out + 0.5 * np.flip(donor, int(rng.integers(0, 2)))
    return out


def hairstyle_mask(rng: Rng, mesh: np.ndarray) -> np.ndarray:
    """A head of hair behind the face: skull cap over the oval, optional long sides; ragged lower edge."""
    _, left, right, top, bottom = _face_frame(mesh)
    width, height = right - left, bottom - top
    cx = (left + right) / 2
    mask = np.zeros((SIZE, SIZE), np.float32)
    axes = (int(width * rng.uniform(0.55, 0.75)), int(height * rng.uniform(0.55, 0.8)))
    centre = (int(cx + rng.uniform(-0.05, 0.05) * width), int(top + height * rng.uniform(0.3, 0.45)))
    cv2.ellipse(mask, centre, axes, 0, 180, 360, 1.0, -1)
    cv2.ellipse(mask, centre, (axes[0], int(axes[1] * rng.uniform(0.2, 0.6))), 0, 0, 180, 1.0, -1)
    if rng.random() < 0.45:  # long hair down both sides
        length = bottom + height * rng.uniform(0.1, 1.0)
        for side in (-1, 1):
            x0 = cx + side * width * rng.uniform(0.35, 0.5)
            x1 = cx + side * width * rng.uniform(0.55, 0.85)
            poly = np.array([[x0, top + 0.3 * height], [x1, top + 0.2 * height], [x1 + side * width * 0.1, length],
                             [x0 + side * width * 0.05, length]], np.int32)
            cv2.fillPoly(mask, [poly], 1.0)
    ragged = _noise_field(rng, 8)[..., 0] * 0.5
    return (_soft(mask, 3) + ragged * (_soft(mask, 3) > 0.05) > 0.5).astype(np.float32)


def strands_mask(rng: Rng, mesh: np.ndarray, fringe: bool) -> tuple[np.ndarray, float]:
    """Curved strands over the forehead and temples (a dense fringe or a few loose strands) and their angle."""
    _, left, right, top, bottom = _face_frame(mesh)
    width, height = right - left, bottom - top
    mask = np.zeros((SIZE, SIZE), np.float32)
    count = int(rng.integers(25, 60)) if fringe else int(rng.integers(2, 10))
    sweep = rng.uniform(-0.6, 0.6)
    if fringe:
        span = (left - 0.1 * width, right + 0.1 * width)
        reach = top + height * rng.uniform(0.12, 0.42)
    else:
        side = rng.choice([-1, 1])
        start = left if side < 0 else right
        span = (start - 0.25 * width, start + 0.25 * width) if rng.random() < 0.6 else (left, right)
        reach = top + height * rng.uniform(0.3, 0.9)
    for _ in range(count):
        x = rng.uniform(*span)
        y = top - height * rng.uniform(0.05, 0.3)
        end_y = reach + rng.normal(0, 0.05 * height)
        steps = 12
        ts = np.linspace(0, 1, steps)
        bend = rng.normal(sweep, 0.25) * width * 0.4
        xs = x + bend * ts**1.5 + rng.normal(0, 0.6, steps).cumsum() * 0.3
        ys = y + (end_y - y) * ts
        cv2.polylines(mask, [np.column_stack([xs, ys]).astype(np.int32)], False, 1.0,
                      int(rng.integers(1, 4 if fringe else 3)), cv2.LINE_AA)
    if fringe:
        mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
    return mask, float(np.pi / 2 + np.arctan(sweep))


# -- occluders ---------------------------------------------------------------------------------------------------


def add_glasses(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray) -> None:
    eyes = [mesh[RIGHT_EYE], mesh[LEFT_EYE]]
    centres = [e.mean(0) for e in eyes]
    span = np.linalg.norm(centres[1] - centres[0])
    angle = np.degrees(np.arctan2(*(centres[1] - centres[0])[::-1]))
    half_w = span * rng.uniform(0.38, 0.52)
    half_h = half_w * rng.uniform(0.55, 0.95)
    thick = int(rng.integers(1, 5))
    frame_colour = rng.choice([np.array([15, 15, 15]), np.array([90, 60, 30]), np.array([190, 170, 120]),
                               _random_colour(rng)]).astype(np.float32)
    sunglasses = rng.random() < 0.3
    tint_alpha = rng.uniform(0.75, 0.95) if sunglasses else rng.uniform(0.0, 0.35)
    tint = (_random_colour(rng) * 0.3 if sunglasses else _random_colour(rng)).astype(np.float32)
    rounded = rng.random() < 0.5
    lens = np.zeros((SIZE, SIZE), np.float32)
    frame = np.zeros((SIZE, SIZE), np.float32)
    shift = rng.normal(0, 0.05, 2) * span + np.array([0, span * rng.uniform(-0.05, 0.15)])
    for centre in centres:
        c = centre + shift
        if rounded:
            box = ((float(c[0]), float(c[1])), (float(2 * half_w), float(2 * half_h)), float(angle))
            cv2.ellipse(lens, box, 1.0, -1)
            cv2.ellipse(frame, box, 1.0, thick)
        else:
            rect = cv2.boxPoints(((float(c[0]), float(c[1])), (float(2 * half_w), float(2 * half_h)), float(angle)))
            cv2.fillPoly(lens, [rect.astype(np.int32)], 1.0)
            cv2.polylines(frame, [rect.astype(np.int32)], True, 1.0, thick)
    inner = [centres[0] + shift + (centres[1] - centres[0]) / span * half_w,
             centres[1] + shift - (centres[1] - centres[0]) / span * half_w]
    cv2.line(frame, tuple(np.int32(inner[0])), tuple(np.int32(inner[1])), 1.0, max(1, thick))
    _, left, right, _, _ = _face_frame(mesh)
    for centre, edge in zip(centres, (left - 3, right + 3)):
        outer = centre + shift + (centre - (centres[0] + centres[1]) / 2) / (span / 2) * half_w
        cv2.line(frame, tuple(np.int32(outer)), (int(edge), int(outer[1] - rng.uniform(0, 3))), 1.0, max(1, thick - 1))
    lens_only = lens * (1 - frame)
    a = lens_only[..., None] * tint_alpha
    image[:] = image * (1 - a) + tint * a
    if sunglasses:
        labels[lens_only >= 0.5] = OCCLUDER
    if rng.random() < 0.5:  # a highlight on the lens
        glint = np.zeros((SIZE, SIZE), np.float32)
        cv2.line(glint, tuple(np.int32(centres[0] + shift - half_w / 2)), tuple(np.int32(centres[0] + shift)), 1.0, 2)
        image[:] = np.clip(image + (glint * lens_only)[..., None] * rng.uniform(40, 120), 0, 255)
    _paste(image, labels, frame_colour * (1 + 0.2 * _noise_field(rng, 16)), _soft(frame, 0.5), OCCLUDER)


def add_hand(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray, skin: np.ndarray) -> None:
    _, left, right, top, bottom = _face_frame(mesh)
    width = right - left
    mask = np.zeros((SIZE, SIZE), np.float32)
    centre = np.array([rng.uniform(left - 0.3 * width, right + 0.3 * width), rng.uniform(top + 0.3 * width, bottom + 0.4 * width)])
    palm = width * rng.uniform(0.25, 0.4)
    angle = rng.uniform(0, 2 * np.pi)
    direction = np.array([np.cos(angle), np.sin(angle)])
    normal = np.array([-direction[1], direction[0]])
    cv2.ellipse(mask, (tuple(np.float32(centre)), (float(2 * palm), float(2.4 * palm)), float(np.degrees(angle))), 1.0, -1)
    for i in range(int(rng.integers(2, 5))):
        base = centre + direction * palm * 0.9 + normal * palm * (i - 1.5) * 0.5
        tip = base + (direction + rng.normal(0, 0.15, 2)) * palm * rng.uniform(1.0, 1.6)
        cv2.line(mask, tuple(np.int32(base)), tuple(np.int32(tip)), 1.0, max(2, int(palm * 0.4)), cv2.LINE_AA)
    # arm leaving the crop from the palm, opposite the fingers
    cv2.line(mask, tuple(np.int32(centre)), tuple(np.int32(centre - direction * SIZE)), 1.0, int(palm * 1.3))
    colour = np.clip(skin * rng.uniform(0.8, 1.2, 3), 0, 255)
    layer = colour * (1 + 0.18 * _noise_field(rng, 24)) + 6 * _noise_field(rng, 2, 3)
    _paste(image, labels, layer, _soft(mask, rng.uniform(0.3, 1.2)), OCCLUDER)


def add_object(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray,
               donors: LabelSet | None) -> None:
    _, left, right, top, bottom = _face_frame(mesh)
    mask = np.zeros((SIZE, SIZE), np.float32)
    centre = rng.uniform([left, top], [right, bottom])
    if rng.random() < 0.5:
        pts = centre + rng.normal(0, (right - left) * rng.uniform(0.15, 0.4), (int(rng.integers(3, 8)), 2))
        cv2.fillPoly(mask, [cv2.convexHull(pts.astype(np.int32))], 1.0)
    else:
        axes = (int(rng.uniform(5, 30)), int(rng.uniform(5, 30)))
        cv2.ellipse(mask, tuple(np.int32(centre)), axes, rng.uniform(0, 180), 0, 360, 1.0, -1)
    if donors is not None and rng.random() < 0.3:
        layer = np.roll(donors.images[rng.integers(len(donors))].astype(np.float32), int(rng.integers(SIZE)), 1)
    else:
        layer = _texture(rng, _random_colour(rng))
    _paste(image, labels, layer, _soft(mask, rng.uniform(0.3, 1.5)), OCCLUDER)


def add_mask(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray,
             texture: np.ndarray | None = None) -> None:
    """A surgical mask from the nose down over the face oval; ``texture`` (RGB, any size) replaces the drawn one."""
    oval, left, right, top, bottom = _face_frame(mesh)
    nose_line = (mesh[6, 1] + mesh[4, 1]) / 2 + rng.uniform(-0.05, 0.1) * (bottom - top)
    lower = oval[oval[:, 1] > nose_line]
    width = right - left
    upper = np.array([[right + 0.04 * width, nose_line], [(left + right) / 2, nose_line - 0.05 * width],
                      [left - 0.04 * width, nose_line]])
    outline = np.concatenate([lower[np.argsort(np.arctan2(lower[:, 1] - nose_line, lower[:, 0] - (left + right) / 2))],
                              upper])
    mask = np.zeros((SIZE, SIZE), np.float32)
    cv2.fillPoly(mask, [cv2.convexHull((outline * 1.0).astype(np.int32))], 1.0)
    mask = cv2.dilate(mask, np.ones((3, 3), np.uint8), iterations=int(rng.integers(0, 3)))
    colour = rng.choice([np.array([170, 210, 230]), np.array([235, 235, 235]), np.array([30, 30, 35]),
                         _random_colour(rng)]).astype(np.float32)
    layer = _texture(rng, colour, int(rng.choice([0, 0, 1, 2])))
    ys = np.arange(SIZE, dtype=np.float32)[:, None, None]
    layer = layer * (1 - 0.12 * (np.sin(ys / rng.uniform(2.5, 4.5)) > 0.8))  # pleats
    if texture is not None:
        layer = cv2.resize(texture, (SIZE, SIZE), interpolation=cv2.INTER_AREA).astype(np.float32)
    for side in (left, right):  # ear loops
        cv2.line(image, (int(side), int(nose_line)), (int(side - np.sign((left + right) / 2 - side) * 8),
                                                       int(nose_line - 6)), tuple(float(v) for v in colour), 1)
    _paste(image, labels, layer, _soft(mask, 0.8), OCCLUDER)


def add_microphone(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray, hard: bool = False) -> None:
    mouth = mesh[LIPS_OUTER].mean(0)
    _, left, right, top, bottom = _face_frame(mesh)
    width = right - left
    if hard and rng.random() < 0.25:  # a headset boom: a thin rod from beside the ear to the mouth, a small foam head
        side = left - 0.05 * width if rng.random() < 0.5 else right + 0.05 * width
        ear = np.array([side, top + rng.uniform(0.4, 0.6) * (bottom - top)], np.float32)
        head = mouth + rng.normal(0, 0.05, 2).astype(np.float32) * width
        coverage, shading = _capsule(ear, head, rng.uniform(0.7, 1.8))
        cv2.circle(coverage, tuple(np.int32(head)), int(width * rng.uniform(0.04, 0.09)), 1.0, -1)
        colour = np.full(3, rng.uniform(10, 70), np.float32) if rng.random() < 0.7 else _random_colour(rng)
        _paste(image, labels, colour * (0.6 + 0.4 * shading[..., None]), _soft(coverage, 0.4), OCCLUDER)
        return
    ball = mouth + rng.normal(0, 0.15, 2) * width + np.array([0, rng.uniform(0, 0.3) * width])
    radius = width * rng.uniform(0.12, 0.25)
    angle = rng.uniform(np.pi * 0.25, np.pi * 0.75)
    end = ball + np.array([np.cos(angle), np.sin(angle)]) * SIZE
    mask = np.zeros((SIZE, SIZE), np.float32)
    cv2.line(mask, tuple(np.int32(ball)), tuple(np.int32(end)), 1.0, max(3, int(radius * rng.uniform(0.5, 0.9))))
    rod = mask.copy()
    cv2.circle(mask, tuple(np.int32(ball)), int(radius), 1.0, -1)
    dark = rng.uniform(10, 60) if not hard or rng.random() < 0.7 else rng.uniform(120, 210)  # black or silver
    layer = np.full((SIZE, SIZE, 3), dark, np.float32) + 15 * _noise_field(rng, 16, 3)
    ys, xs = np.mgrid[0:SIZE, 0:SIZE]
    grille = ((xs + ys) % 3 == 0) | ((xs - ys) % 3 == 0)
    layer = np.where((grille & (rod < 0.5))[..., None], layer + rng.uniform(30, 120), layer)
    _paste(image, labels, layer, _soft(mask, 0.7), OCCLUDER)


def _capsule(p0: np.ndarray, p1: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """A rod from ``p0`` to ``p1`` with rounded ends: (anti-aliased coverage, cylinder shading 0.55..1 across it)."""
    ys, xs = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    axis = p1 - p0
    length = max(float(np.linalg.norm(axis)), 1e-3)
    u = axis / length
    t = np.clip((xs - p0[0]) * u[0] + (ys - p0[1]) * u[1], 0, length)
    distance = np.hypot(xs - (p0[0] + t * u[0]), ys - (p0[1] + t * u[1]))
    coverage = np.clip(radius - distance + 0.5, 0, 1)
    across = np.clip(distance / max(radius, 0.5), 0, 1)
    return coverage, 0.55 + 0.45 * np.sqrt(1 - across**2)


def _across_face(rng: Rng, mesh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two points on a random line through the face, far enough apart that the line leaves the crop."""
    _, left, right, top, bottom = _face_frame(mesh)
    centre = rng.uniform([left + 0.1 * (right - left), top + 0.15 * (bottom - top)],
                         [right - 0.1 * (right - left), bottom - 0.1 * (bottom - top)])
    angle = rng.uniform(0, np.pi)
    direction = np.array([np.cos(angle), np.sin(angle)], np.float32)
    return centre - direction * SIZE * 1.5, centre + direction * SIZE * 1.5


def _cast_shadow(rng: Rng, image: np.ndarray, coverage: np.ndarray) -> None:
    """The shadow an object in front of the face throws beside itself (the face keeps its labels)."""
    shift = rng.uniform(-4, 4, 2)
    matrix = np.float32([[1, 0, shift[0]], [0, 1, shift[1]]])
    shadow = _soft(cv2.warpAffine(coverage, matrix, (SIZE, SIZE)), rng.uniform(0.5, 2.5)) * (1 - coverage)
    image[:] = image * (1 - shadow[..., None] * rng.uniform(0.15, 0.45))


def add_bar(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray, skin: np.ndarray) -> None:
    """A thin straight thing across the face (a pen, a stick, a cable, a microphone stand): 1.5–10 px wide at
    128 px, half of them in the face's own skin colour so only its edges and shading tell it apart."""
    p0, p1 = _across_face(rng, mesh)
    if rng.random() < 0.4:  # one end on the face (a pen held up, a stick)
        p1 = (p0 + p1) / 2 + (p1 - p0) / np.linalg.norm(p1 - p0) * rng.uniform(-10, 20)
    coverage, shading = _capsule(p0, p1, rng.uniform(0.8, 5.0))
    if rng.random() < 0.5:
        colour = np.clip(skin * rng.uniform(0.85, 1.15, 3), 0, 255)
    else:
        colour = _random_colour(rng)
    flat = rng.random() < 0.3
    layer = colour * (1 + 0.08 * _noise_field(rng, 16)) * (1 if flat else shading[..., None])
    if rng.random() < 0.6:
        _cast_shadow(rng, image, coverage)
    _paste(image, labels, layer, _soft(coverage, rng.uniform(0, 0.8)), OCCLUDER)


def add_finger(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray, skin: np.ndarray) -> None:
    """One or two fingers laid across the face from outside it: skin-coloured rounded rods with a nail."""
    _, left, right, top, bottom = _face_frame(mesh)
    width = right - left
    tip = rng.uniform([left + 0.1 * width, top + 0.2 * (bottom - top)], [right - 0.1 * width, bottom])
    angle = rng.uniform(0, 2 * np.pi)
    direction = np.array([np.cos(angle), np.sin(angle)], np.float32)
    radius = width * rng.uniform(0.06, 0.1)
    normal = np.array([-direction[1], direction[0]], np.float32)
    colour = np.clip(skin * rng.uniform(0.85, 1.15, 3), 0, 255)
    for k in range(int(rng.choice([1, 1, 2]))):
        end = tip + normal * 2.1 * radius * k - direction * rng.uniform(0, 0.3) * width * k
        coverage, shading = _capsule(end, end - direction * SIZE, radius)
        layer = colour * shading[..., None] * (1 + 0.08 * _noise_field(rng, 24))
        nail, _ = _capsule(end - direction * radius * 0.9, end - direction * radius * 1.9, radius * 0.6)
        if rng.random() < 0.5:
            layer = layer * (1 - nail[..., None]) + np.clip(colour * 1.15 + 15, 0, 255) * nail[..., None]
        if rng.random() < 0.5:
            _cast_shadow(rng, image, coverage)
        _paste(image, labels, layer, _soft(coverage, rng.uniform(0.3, 1.0)), OCCLUDER)


def add_stub(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray, skin: np.ndarray) -> None:
    """A short thing that starts and ends on the face (a fingertip, a pen, a short microphone, a stub of a stick):
    a rod 12–45 % of the face's width long and 2–14 % thick at any angle anywhere on the face, rounded or cut square,
    sometimes with a nail or a round head at one end; 60 % in the face's own skin colour, flat or shaded, often with
    a soft cast shadow. The long bars and fingers (:func:`add_bar`, :func:`add_finger`) leave the face, so a short
    skin-coloured piece floating on a cheek was never an occluder to the network (issue 17: p = 0.00)."""
    _, left, right, top, bottom = _face_frame(mesh)
    width, height = right - left, bottom - top
    centre = rng.uniform([left + 0.15 * width, top + 0.25 * height], [right - 0.15 * width, bottom - 0.1 * height])
    angle = rng.uniform(0, np.pi)
    direction = np.array([np.cos(angle), np.sin(angle)], np.float32)
    half = direction * width * rng.uniform(0.12, 0.45) / 2
    radius = max(0.8, width * rng.uniform(0.01, 0.07))
    p0, p1 = (centre - half).astype(np.float32), (centre + half).astype(np.float32)
    coverage, shading = _capsule(p0, p1, radius)
    if rng.random() < 0.3:  # cut square: the rounded caps removed
        normal = np.array([-direction[1], direction[0]], np.float32) * radius
        square = np.zeros((SIZE, SIZE), np.float32)
        cv2.fillConvexPoly(square, np.int32(np.round([p0 + normal, p1 + normal, p1 - normal, p0 - normal])), 1.0,
                           cv2.LINE_AA)
        coverage = square
    skin_coloured = rng.random() < 0.6
    colour = np.clip(skin * rng.uniform(0.8, 1.2, 3), 0, 255) if skin_coloured else (
        np.full(3, rng.uniform(10, 70), np.float32) if rng.random() < 0.5 else _random_colour(rng))
    flat = rng.random() < 0.5
    layer = colour * (1 + 0.06 * _noise_field(rng, 16)) * (1 if flat else shading[..., None])
    end = p1 if rng.random() < 0.5 else p0
    if rng.random() < 0.2:  # a fingertip's nail at one end
        nail, _ = _capsule(end, end - (end - centre) * 0.35, radius * 0.6)
        layer = layer * (1 - nail[..., None]) + np.clip(colour * 1.15 + 15, 0, 255) * nail[..., None]
    elif rng.random() < 0.2:  # a short microphone's head
        head = np.zeros((SIZE, SIZE), np.float32)
        cv2.circle(head, tuple(np.int32(end)), int(radius * rng.uniform(1.5, 2.5)) + 1, 1.0, -1, cv2.LINE_AA)
        coverage = np.maximum(coverage, head)
        layer = layer * (1 - head[..., None]) + np.full(3, rng.uniform(10, 200), np.float32) * head[..., None]
    if rng.random() < 0.6:
        _cast_shadow(rng, image, coverage)
    _paste(image, labels, layer, _soft(coverage, rng.uniform(0, 0.8)), OCCLUDER)


# -- hard negatives: looks that belong to the face (labels unchanged) -------------------------------------------


def _grown(mask: np.ndarray, pixels: int) -> np.ndarray:
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * pixels + 1, 2 * pixels + 1))
    return cv2.dilate(mask.astype(np.uint8), kernel).astype(np.float32) if pixels > 0 else mask.astype(np.float32)


def _tint(rng: Rng, darkness: float) -> np.ndarray:
    """A per-channel factor of mean ``darkness``: grey, or a coloured (warm, cool, theatrical) cast."""
    if rng.random() < 0.7:
        return np.full(3, darkness, np.float32)
    return np.clip(darkness * rng.uniform(0.6, 1.4, 3), 0.05, 1.0).astype(np.float32)


def add_side_shadow(rng: Rng, image: np.ndarray, mesh: np.ndarray) -> None:
    """Side light: one side of the face (and the scene) darkened to 0.15–0.6 beyond a soft, slightly wavy edge
    near the nose, or a smooth ramp of darkening across the face."""
    _, left, right, top, bottom = _face_frame(mesh)
    width = right - left
    ys, xs = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    angle = rng.normal(0, 0.35) + (np.pi if rng.random() < 0.5 else 0)
    if rng.random() < 0.15:
        angle = rng.uniform(0, 2 * np.pi)  # light from above or below
    centre = np.array([(left + right) / 2 + rng.normal(0, 0.15) * width, (top + bottom) / 2])
    along = (xs - centre[0]) * np.cos(angle) + (ys - centre[1]) * np.sin(angle)
    along = along + _noise_field(rng, 16)[..., 0] * rng.uniform(0, 0.08) * width
    darkness = rng.uniform(0.15, 0.6)
    if rng.random() < 0.3:  # a ramp across the whole face
        shade = np.clip(0.5 + along / (width * rng.uniform(0.5, 1.2)), 0, 1)
    else:
        shade = 1 / (1 + np.exp(-along / max(0.3, rng.uniform(0.01, 0.12) * width)))
    factor = 1 - shade[..., None] * (1 - _tint(rng, darkness))
    lit = rng.uniform(1.0, 1.2)  # the lit side often brighter than the photo was
    image[:] = np.clip(image * factor * (lit - (lit - 1) * shade[..., None]), 0, 255)


def add_dark_features(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray) -> None:
    """Heavy, dark brows (grown past the brow outline into the skin) and shadowed eye sockets."""
    if rng.random() < 0.7:
        brows = _soft(_grown(labels == BROWS, int(rng.integers(0, 3))), rng.uniform(0.5, 1.5))
        image[:] = image * (1 - brows[..., None] * (1 - _tint(rng, rng.uniform(0.2, 0.6))))
    if rng.random() < 0.7:
        sockets = np.zeros((SIZE, SIZE), np.float32)
        for eye in (mesh[RIGHT_EYE], mesh[LEFT_EYE]):
            span = float(np.ptp(eye[:, 0]))
            centre = eye.mean(0) - np.array([0, span * rng.uniform(0, 0.3)])
            axes = (int(span * rng.uniform(0.6, 0.9)), int(span * rng.uniform(0.4, 0.7)))
            cv2.ellipse(sockets, tuple(np.int32(centre)), axes, 0, 0, 360, 1.0, -1)
        sockets = _soft(sockets, rng.uniform(2, 5))
        image[:] = image * (1 - sockets[..., None] * (1 - _tint(rng, rng.uniform(0.35, 0.8))))


def add_beard(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray) -> None:
    """A beard, moustache or stubble on the lower face: dark hair texture or fine dots over the skin."""
    oval, left, right, top, bottom = _face_frame(mesh)
    nose_tip = mesh[4, 1]
    ys = np.mgrid[0:SIZE, 0:SIZE][0].astype(np.float32)
    lower = (labels == SKIN) | (labels == LIPS) | (labels == NOSE)
    start = nose_tip + rng.uniform(-0.05, 0.1) * (bottom - top)
    region = lower & (ys > start)
    if rng.random() < 0.5:  # sideburns and cheeks too
        region |= (labels == SKIN) & (ys > top + rng.uniform(0.35, 0.55) * (bottom - top)) & (
            np.abs(np.mgrid[0:SIZE, 0:SIZE][1] - (left + right) / 2) > 0.3 * (right - left))
    region &= labels != LIPS if rng.random() < 0.8 else np.ones_like(region)
    ragged = region.astype(np.float32) + 0.4 * _noise_field(rng, 6)[..., 0] * _grown(region, 2)
    alpha = _soft(ragged > 0.5, rng.uniform(1, 3))
    colour = _hair_colour(rng) * rng.uniform(0.5, 1.0)
    if rng.random() < 0.5:  # stubble: dots of hair colour, sparse to dense
        dots = (rng.random((SIZE, SIZE)) < rng.uniform(0.2, 0.7)).astype(np.float32)
        alpha = alpha * _soft(dots, 0.5) * rng.uniform(0.4, 0.9)
        layer = np.broadcast_to(colour, (SIZE, SIZE, 3))
    else:
        layer = hair_texture(rng, colour, rng.uniform(1.2, 1.9))
        alpha = alpha * rng.uniform(0.5, 0.95)
    image[:] = image * (1 - alpha[..., None]) + layer * alpha[..., None]


LIPSTICKS = np.array([[170, 25, 40], [200, 80, 110], [110, 30, 60], [220, 100, 80], [60, 20, 30], [150, 60, 70]],
                     np.float32)


def add_makeup(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray) -> None:
    """Lipstick, eye shadow, eyeliner and blush: colour on the face, shading kept."""
    luminance = image.mean(-1, keepdims=True) / max(float(image[labels == SKIN].mean()) if (labels == SKIN).any()
                                                    else 128.0, 1.0)
    if rng.random() < 0.7:
        lips = _soft(labels == LIPS, rng.uniform(0.3, 1.0))[..., None] * rng.uniform(0.4, 0.85)
        colour = LIPSTICKS[rng.integers(len(LIPSTICKS))] * rng.uniform(0.85, 1.15, 3)
        image[:] = image * (1 - lips) + np.clip(colour * luminance, 0, 255) * lips
    if rng.random() < 0.6:
        lids = np.zeros((SIZE, SIZE), np.float32)
        for eye in (mesh[RIGHT_EYE], mesh[LEFT_EYE]):
            span = float(np.ptp(eye[:, 0]))
            centre = eye.mean(0) - np.array([0, span * rng.uniform(0.15, 0.35)])
            cv2.ellipse(lids, tuple(np.int32(centre)), (int(span * 0.65), int(span * rng.uniform(0.25, 0.45))),
                        0, 0, 360, 1.0, -1)
        lids = _soft(lids * (labels != EYES), rng.uniform(1, 3))[..., None] * rng.uniform(0.3, 0.75)
        colour = _random_colour(rng) if rng.random() < 0.6 else np.array([40, 30, 30], np.float32)
        image[:] = image * (1 - lids) + np.clip(colour * luminance, 0, 255) * lids
    if rng.random() < 0.4:
        liner = _grown(labels == EYES, 1) - (labels == EYES)
        liner = _soft(liner, 0.4)[..., None] * rng.uniform(0.5, 0.9)
        image[:] = image * (1 - liner) + 20 * liner
    if rng.random() < 0.3:
        _, left, right, top, bottom = _face_frame(mesh)
        blush = np.zeros((SIZE, SIZE), np.float32)
        for x in (left + 0.22 * (right - left), right - 0.22 * (right - left)):
            cv2.circle(blush, (int(x), int(top + 0.6 * (bottom - top))), int(0.12 * (right - left)), 1.0, -1)
        blush = _soft(blush * (labels == SKIN), 4)[..., None] * rng.uniform(0.1, 0.3)
        image[:] = image * (1 - blush) + np.array([220, 90, 110], np.float32) * luminance * blush


def add_hard_negatives(rng: Rng, image: np.ndarray, labels: np.ndarray, mesh: np.ndarray) -> None:
    """Beard, make-up and dark features before the occluders (they are on the face); the labels do not change."""
    if rng.random() < 0.25:
        add_beard(rng, image, labels, mesh)
    if rng.random() < 0.2:
        add_makeup(rng, image, labels, mesh)
    if rng.random() < 0.25:
        add_dark_features(rng, image, labels, mesh)


# -- the sample --------------------------------------------------------------------------------------------------


def _keep_mask(rng: Rng, labels: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Which photo pixels to keep: the face and its known hair, grown by a ragged margin, inside the photo."""
    core = ((labels > 0) & (labels != IGNORE)).astype(np.uint8)
    grown = cv2.dilate(core, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (7, 7)), iterations=int(rng.integers(0, 3)))
    ragged = (grown.astype(np.float32) + 0.35 * _noise_field(rng, 6)[..., 0]) > 0.5
    keep = (ragged | core.astype(bool)) & valid
    return _soft(keep, rng.uniform(0.5, 1.5))


# occluder kinds and their shares: the shipped (round 2) recipe, and with ``hard`` (round 4's trial, not shipped)
KINDS = ["fringe", "strands", "glasses", "hand", "object", "mask", "microphone"]
SHARES = [0.17, 0.16, 0.22, 0.13, 0.12, 0.12, 0.08]
HARD_KINDS = KINDS + ["bar", "finger", "stub"]
HARD_SHARES = [0.12, 0.11, 0.18, 0.08, 0.08, 0.07, 0.08, 0.10, 0.06, 0.12]


def compose(rng: Rng, data: LabelSet, index: int, occlusion: float = 0.8,
            hard: bool = False, photo_edges: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``index`` of ``data`` in a random scene, with random occluders; (uint8 RGB, uint8 labels).

    ``hard`` adds the hard negatives (:func:`add_hard_negatives`, side shadows) and the bars and fingers;
    ``photo_edges`` is the share of samples cut as a tight photo (:func:`past_photo_edges`). Both off, the random
    stream is exactly the shipped recipe's, so ``make train-segmenter`` still reproduces the shipped model."""
    photo = data.images[index].astype(np.float32)
    labels = data.labels[index].copy()
    mesh = data.mesh[index].astype(np.float32)
    skin_pixels = photo[labels == SKIN]
    skin = np.median(skin_pixels, 0) if len(skin_pixels) else np.array([200, 160, 130], np.float32)

    image = background(rng, data)
    out_labels = np.full((SIZE, SIZE), BACKGROUND, np.uint8)
    if rng.random() < 0.75:
        colour = _hair_colour(rng)
        _paste(image, out_labels, hair_texture(rng, colour, rng.uniform(1.2, 1.9)), _soft(hairstyle_mask(rng, mesh), 1.0),
               HAIR)
    whole = data.valid[index].all() and rng.random() < 0.7  # a photo with its real scene: keep the scene
    keep = np.ones((SIZE, SIZE), np.float32) if whole else _keep_mask(rng, labels, data.valid[index])
    image = image * (1 - keep[..., None]) + photo * keep[..., None]
    kept = keep >= 0.5
    out_labels[kept] = labels[kept]
    # the photo's own undecided pixels that show around the face stay undecided
    out_labels[kept & (labels == IGNORE)] = IGNORE

    if hard:
        add_hard_negatives(rng, image, out_labels, mesh)
    if rng.random() < occlusion:
        for _ in range(int(rng.choice([1, 1, 1, 2, 2, 3]))):
            kind = rng.choice(HARD_KINDS, p=HARD_SHARES) if hard else rng.choice(KINDS, p=SHARES)
            if kind in ("fringe", "strands"):
                mask, angle = strands_mask(rng, mesh, kind == "fringe")
                _paste(image, out_labels, hair_texture(rng, _hair_colour(rng), angle), _soft(mask, 0.4), HAIR)
            elif kind == "glasses":
                add_glasses(rng, image, out_labels, mesh)
            elif kind == "hand":
                add_hand(rng, image, out_labels, mesh, skin)
            elif kind == "object":
                add_object(rng, image, out_labels, mesh, data)
            elif kind == "mask":
                add_mask(rng, image, out_labels, mesh)
            elif kind == "bar":
                add_bar(rng, image, out_labels, mesh, skin)
            elif kind == "finger":
                add_finger(rng, image, out_labels, mesh, skin)
            elif kind == "stub":
                add_stub(rng, image, out_labels, mesh, skin)
            else:
                add_microphone(rng, image, out_labels, mesh, hard)
    if hard and rng.random() < 0.35:  # side light falls on the face, the scene and whatever is in front alike
        add_side_shadow(rng, image, mesh)
    if photo_edges and rng.random() < photo_edges:
        image, out_labels = past_photo_edges(rng, image, out_labels, mesh)
    return augment(rng, image, out_labels)


def past_photo_edges(rng: Rng, image: np.ndarray, labels: np.ndarray,
                     mesh: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sample as the aligned crop of a tight photo: from one to four sides, an edge between the crop's border
    and a little inside the face, past it the photo reflected, as ``geometry.align.aligned_crop`` reflects it at
    inference; labels unknown there.

    Why: a still the face fills (att-faces, face-api-js's amy1) gets crops whose borders are its own face
    mirrored, a chin upside down over the forehead, a scene the shipped recipe never showed (it filled the
    outside with synthetic scenes); the network called the real brows and forehead beside such a mirror "hair" or
    "occluder", and the fusion kept the target's there (issue 17). Outside the photo nothing is pasted back, so the
    loss asks only that the pixels inside it are parsed right with a mirror beside them."""
    _, left, right, top, bottom = _face_frame(mesh)
    width, height = right - left, bottom - top
    sides = rng.random(4) < 0.5
    sides[rng.integers(4)] = True
    y0 = int(rng.uniform(0, top + 0.2 * height)) if sides[0] else 0
    y1 = int(rng.uniform(bottom - 0.1 * height, SIZE)) if sides[1] else SIZE
    x0 = int(rng.uniform(0, left + 0.1 * width)) if sides[2] else 0
    x1 = int(rng.uniform(right - 0.1 * width, SIZE)) if sides[3] else SIZE
    y0, x0 = max(0, y0), max(0, x0)
    y1, x1 = min(SIZE, max(y1, y0 + 16)), min(SIZE, max(x1, x0 + 16))
    border = (y0, SIZE - y1, x0, SIZE - x1)
    reflected = cv2.copyMakeBorder(np.ascontiguousarray(image[y0:y1, x0:x1]), *border, cv2.BORDER_REFLECT_101)
    unknown = np.full((SIZE, SIZE), IGNORE, np.uint8)
    unknown[y0:y1, x0:x1] = labels[y0:y1, x0:x1]
    return reflected, unknown


def augment(rng: Rng, image: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Small affine (labels nearest-neighbour), flip, colour, blur, noise, JPEG-like softness."""
    angle = rng.normal(0, 6)
    scale = np.exp(rng.normal(0, 0.07))
    matrix = cv2.getRotationMatrix2D((SIZE / 2, SIZE / 2), angle, scale)
    matrix[:, 2] += rng.normal(0, 3, 2)
    image = cv2.warpAffine(image, matrix, (SIZE, SIZE), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT101)
    labels = cv2.warpAffine(labels, matrix, (SIZE, SIZE), flags=cv2.INTER_NEAREST, borderMode=cv2.BORDER_REFLECT101)
    if rng.random() < 0.5:
        image, labels = image[:, ::-1], labels[:, ::-1]  # classes are not left/right specific
    image = image * rng.uniform(0.7, 1.3) * rng.uniform(0.88, 1.12, 3) + rng.uniform(-25, 25)
    if rng.random() < 0.2:
        image = image.mean(-1, keepdims=True).repeat(3, -1)
    if rng.random() < 0.3:
        image = cv2.GaussianBlur(image, (0, 0), rng.uniform(0.3, 1.3))
    if rng.random() < 0.4:
        image = image + rng.normal(0, rng.uniform(1, 8), image.shape)
    return np.clip(image, 0, 255).astype(np.uint8), np.ascontiguousarray(labels)
