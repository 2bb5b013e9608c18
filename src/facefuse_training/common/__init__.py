"""Pieces every trainer shares: the UTKFace listing and fixed hold-out split, seeded randomness, the train loop
(progress bar, resumable checkpoints) and ONNX export with a PyTorch-vs-ONNX parity check."""
