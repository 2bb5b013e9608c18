"""Named models: the registry (what exists) and the store (where its verified bytes are)."""

from .download import sha256_of
from .registry import InputContract, ModelEntry, ModelRegistry, PackageSource, Task, UrlSource, WheelSource
from .store import ModelStore, VerifyResult

__all__ = ["InputContract", "ModelEntry", "ModelRegistry", "ModelStore", "PackageSource", "Task", "UrlSource",
           "VerifyResult", "WheelSource", "sha256_of"]
