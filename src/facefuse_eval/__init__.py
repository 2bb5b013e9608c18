"""Measurement code for the tests and benchmarks — never imported by the facefuse library, CLI or service.

``analysis``: detection recall and landmark error against dlib's annotated faces; ``fusion``: an independent
identity judge (MobileFaceNet) and the fusion's quality measures (PSNR outside the face, seam score, openness);
``flops``: multiply-accumulates of an ONNX graph; ``pose_judge`` (YuNet + solvePnP) and ``lighting`` (a low-pass
Lab comparison). Each judge is independent of what the pipeline itself uses, so the pipeline cannot score well by
agreeing with itself; ``tests/test_inference_imports.py`` checks inference never loads this package.
"""
