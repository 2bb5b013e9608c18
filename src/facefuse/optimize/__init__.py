"""The model optimisation toolkit: INT8 (static QDQ) and FP16 variants judged against FP32, TensorRT engines,
and compute-cost counting. Entry point: :func:`optimize_model` (what `facefuse optimize` calls)."""

from .quantize import Int8Options
from .report import QualityReport
from .workflow import OptimizeRequest, optimize_model

__all__ = ["Int8Options", "OptimizeRequest", "QualityReport", "optimize_model"]
