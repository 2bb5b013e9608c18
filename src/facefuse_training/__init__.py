"""Training code for the models facefuse trains itself (restorer, segmenter).

Kept apart from the inference package on purpose: ``facefuse`` never imports this package or PyTorch at import
time; only ``facefuse train`` loads it, lazily. Install it with the ``train`` extra (PyTorch, torch-pruning).
Everything is seeded and resumable; each model has a ``--quick`` configuration the tests run for real.
"""
