"""Measurement code for the tests and benchmarks — never imported by the facefuse library, CLI or service.

``analysis``: detection recall and landmark error against dlib's annotated faces; ``fusion``: an independent
identity judge (MobileFaceNet) and the fusion's quality measures (PSNR outside the face, seam score, openness);
``flops``: multiply-accumulates of an ONNX graph. Kept apart so inference imports no evaluation code
(``tests/test_inference_imports.py`` checks it).
"""
