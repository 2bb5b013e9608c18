"""Re-identification of the chosen person after a scene cut, by appearance: the colours of their clothes.

Why not a face descriptor: MobileFaceNet is the project's independent judge of identity and must not steer the
pipeline, the ArcFace weights the swappers use are non-commercial, and no other recognizer with usable weights can
be installed here. Descriptors of our own were measured instead (``benchmarks/reid.py``; BENCHMARKS.md): on the
photos of ``faces/hard/same-person`` (different shoots) the LBP face texture (Ahonen et al. 2004) and the FaceMesh
shape separate same from different people barely better than chance (ROC AUC 0.58 and 0.64; the judge: 1.00).
On the Hamilton clip, whose faces are 40–90 px and often turned, the shape ranks well (0.88) but two different
people there are as alike by it as one person with himself (0.999), so no threshold separates them. What does
carry across the shots of one event is what a person wears: the colour histogram of the region below the face
(AUC 0.79), where no two different people of the clip come as close as :data:`SAME_PERSON`. So the lock moves to
a face after a cut only when the clothes below it match; when none does, the shot is left unfused rather than
fused into someone else.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

RUNNING_WEIGHT = 0.3  # weight of each new sighting in a track's running descriptor
SAME_PERSON = 0.88  # the least similarity at which a face after a cut is taken for the locked person
# the region below a face box (x, y, w, h) whose colours are compared: from 0.6 w left of the box to 0.6 w right of
# it, from 1.2 h below its top to 2.7 h (the chest and shoulders of an upright person)
TORSO = ((-0.6, 1.6), (1.2, 2.7))
HISTOGRAM_BINS = [8, 3, 3]  # hue, saturation, value


def torso_colours(image: np.ndarray, box: np.ndarray) -> np.ndarray | None:
    """Unit-norm square roots of the normalised colour histogram of the region below a face (their dot product is
    the Hellinger affinity of the two histograms: 1 for equal colours), or None when that region is off the frame."""
    x, y, w, h = box
    (left, right), (top, bottom) = TORSO
    x0, x1 = int(max(0, x + left * w)), int(min(image.shape[1], x + right * w))
    y0, y1 = int(max(0, y + top * h)), int(min(image.shape[0], y + bottom * h))
    if x1 - x0 < 8 or y1 - y0 < 8:
        return None
    hsv = cv2.cvtColor(np.ascontiguousarray(image[y0:y1, x0:x1]), cv2.COLOR_RGB2HSV)
    hist = cv2.calcHist([hsv], [0, 1, 2], None, HISTOGRAM_BINS, [0, 180, 0, 256, 0, 256]).ravel()
    vector = np.sqrt(hist / max(float(hist.sum()), 1.0))
    return vector / max(float(np.linalg.norm(vector)), 1e-12)


@dataclass
class PersonAppearance:
    """What the locked person wears, averaged over the detections that saw them, and who wears it after a cut."""

    reference: np.ndarray | None = None

    @property
    def known(self) -> bool:
        return self.reference is not None

    def confirm(self, image: np.ndarray, box: np.ndarray) -> None:
        """A detection saw the locked person at ``box``: fold what is below it into the reference."""
        found = torso_colours(image, box)
        if found is None:
            return
        blended = found if self.reference is None else self.reference + RUNNING_WEIGHT * (found - self.reference)
        self.reference = blended / np.linalg.norm(blended)

    def find(self, image: np.ndarray, candidates: list[tuple[int, np.ndarray]]) -> int | None:
        """The id of the (track id, face box) candidate dressed most like the person, when alike enough."""
        if self.reference is None:
            return None
        scored = [(float(self.reference @ d), track_id) for track_id, box in candidates
                  if (d := torso_colours(image, box)) is not None]
        best = max(scored, default=None)
        return best[1] if best is not None and best[0] >= SAME_PERSON else None

    def state(self) -> list[float] | None:
        return None if self.reference is None else self.reference.tolist()

    @classmethod
    def restored(cls, state: list[float] | None) -> PersonAppearance:
        return cls(None if state is None else np.asarray(state, dtype=np.float64))
