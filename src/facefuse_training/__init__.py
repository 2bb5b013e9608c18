"""Training code (PyTorch): never imported by the inference package."""
