"""Face restorer: a plain-3×3 U-Net teacher, a channel-pruned and feature-distilled student, ONNX + INT8/FP16."""
