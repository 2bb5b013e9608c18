"""Judges of fusion quality for the tests and benchmarks: never imported by the inference package.

Each judge is independent of what the pipeline itself uses (MobileFaceNet for identity, YuNet + solvePnP for pose,
a low-pass Lab comparison for lighting), so the pipeline cannot score well by agreeing with itself.
"""
