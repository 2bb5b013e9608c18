"""The files the tests and benchmarks read, fetched by URL + SHA-256 into a test-data folder.

``tests/data_manifest.json`` lists every file (path under the data root, public origin URL pinned to a commit,
SHA-256, size, licence). :func:`ensure` fills the data root (``FACEFUSE_TEST_DATA``, default ``.test-data/`` in the
repository) from a local mirror folder when there is one — ``../shared`` beside the repository is found by itself,
or ``FACEFUSE_TEST_DATA_MIRROR`` names another — and downloads the rest, with the model store's own verified,
resumable transfer (:mod:`facefuse.models.download`). The root keeps the mirror's layout (``faces/``, ``models/``,
``video/``, ``train/``) but holds only the listed files, so every machine runs the tests on the same bytes.

Command line (``make test-data`` runs the first)::

    python tests/testdata.py fetch            # fill and verify the data root; one clear message when it cannot
    python tests/testdata.py check [FOLDER]   # the manifest against a folder (default: the mirror)
    python tests/testdata.py add PATH...      # list more mirror files or folders (hash, size, URL, licence filled in)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import urllib.error
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from facefuse.models.download import DigestMismatch, fetch, place, sha256_of

REPO = Path(__file__).resolve().parents[1]
MANIFEST = REPO / "tests" / "data_manifest.json"
HINT_HOSTS = "raw.githubusercontent.com and media.githubusercontent.com"


class MissingData(Exception):
    """Some listed files are neither in the data root nor obtainable; the message says which and what to do."""


@dataclass(frozen=True)
class Source:
    """Where a group of files comes from: a public repository pinned to a commit (or nothing: mirror-only)."""

    key: str
    prefix: str  # path under the data root this source covers (longest prefix wins)
    repo: str | None  # owner/name on GitHub; None when no public origin is known (mirror-only)
    commit: str | None
    upstream: str  # path in the repository that ``prefix`` corresponds to
    licence: str
    lfs: bool = False  # files stored with Git LFS are served from media.githubusercontent.com
    note: str = ""

    def url_for(self, path: str) -> str | None:
        if self.repo is None:
            return None
        host = "https://media.githubusercontent.com/media" if self.lfs else "https://raw.githubusercontent.com"
        return f"{host}/{self.repo}/{self.commit}/{self.upstream}{path[len(self.prefix):]}"


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the data root, '/'-separated
    source: str
    url: str | None  # None: mirror-only (see the source's note)
    sha256: str
    size: int
    licence: str


@dataclass(frozen=True)
class Manifest:
    sources: dict[str, Source]
    files: tuple[DataFile, ...]

    @classmethod
    def load(cls, path: Path = MANIFEST) -> Manifest:
        raw = json.loads(path.read_text())
        sources = {key: Source(key=key, **fields) for key, fields in raw["sources"].items()}
        return cls(sources, tuple(DataFile(**entry) for entry in raw["files"]))

    def save(self, path: Path = MANIFEST) -> None:
        def fields(obj: object) -> dict:
            return {k: v for k, v in vars(obj).items() if k != "key"}

        # one line per file: the list stays readable and a change shows as a one-line diff
        head = json.dumps({"about": ABOUT, "sources": {k: fields(s) for k, s in self.sources.items()}}, indent=1)
        rows = ",\n".join("  " + json.dumps(vars(f)) for f in sorted(self.files, key=lambda f: f.path))
        text = f'{head[:-2]},\n "files": [\n{rows}\n ]\n}}'
        path.write_text(text + "\n")

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def source_of(self, path: str) -> Source:
        matching = [s for s in self.sources.values() if path.startswith(s.prefix)]
        if not matching:
            raise ValueError(f"no source in {MANIFEST.name} covers {path}: add one (prefix, repository, commit, "
                             "upstream path, licence) to its \"sources\"")
        return max(matching, key=lambda s: len(s.prefix))


ABOUT = ("Every file the tests and benchmarks read, under the test-data root (tests/testdata.py). "
         "Add files with `python tests/testdata.py add PATH...` (PATH relative to the mirror, e.g. ../shared).")


def default_root() -> Path:
    return Path(os.environ.get("FACEFUSE_TEST_DATA") or REPO / ".test-data")


def default_mirror() -> Path | None:
    """``FACEFUSE_TEST_DATA_MIRROR`` (or the older ``FACEFUSE_SHARED``), else ``../shared`` when it exists."""
    named = os.environ.get("FACEFUSE_TEST_DATA_MIRROR") or os.environ.get("FACEFUSE_SHARED")
    if named:
        return Path(named)
    beside = REPO.parent / "shared"
    return beside if beside.is_dir() else None


def offline() -> bool:
    return os.environ.get("FACEFUSE_OFFLINE", "") not in ("", "0")


def check(manifest: Manifest, folder: Path) -> list[str]:
    """Problems of ``folder`` against the manifest: files absent, of the wrong size or with the wrong SHA-256."""
    problems = []
    for entry in manifest.files:
        path = folder / entry.path
        if not path.is_file():
            problems.append(f"{entry.path}: missing")
        elif path.stat().st_size != entry.size:
            problems.append(f"{entry.path}: {path.stat().st_size} bytes, expected {entry.size}")
        elif (digest := sha256_of(path)) != entry.sha256:
            problems.append(f"{entry.path}: SHA-256 {digest}, expected {entry.sha256}")
    return problems


def incomplete(manifest: Manifest, root: Path) -> list[str]:
    """Listed files absent from ``root`` or of the wrong size: a cheap check for scripts (no hashing)."""
    return [f.path for f in manifest.files
            if not (root / f.path).is_file() or (root / f.path).stat().st_size != f.size]


def ensure(manifest: Manifest, root: Path, mirror: Path | None, *, allow_network: bool = True,
           timeout_s: float = 60.0, progress: Callable[[str], None] = lambda line: None) -> dict[str, int]:
    """Make every listed file present and verified under ``root``; return how many came from where.

    Order per file: already there and verified, else the mirror, else its URL (eight downloads at a time). After
    the first failure to reach a server the remaining downloads are not started (an unreachable network would
    otherwise cost one timeout per file). Raises :class:`MissingData` with one message listing what is missing.
    """
    counts = {"present": 0, "mirror": 0, "downloaded": 0}
    refused: dict[str, str] = {}  # files with a reason of their own (wrong bytes, HTTP error, no public origin)
    to_download = []
    for entry in manifest.files:
        final = root / entry.path
        if final.is_file() and final.stat().st_size == entry.size and sha256_of(final) == entry.sha256:
            counts["present"] += 1
            continue
        if mirror is not None and (mirror / entry.path).is_file():
            try:
                place(mirror / entry.path, final, entry.sha256, copy=True)
                counts["mirror"] += 1
                continue
            except DigestMismatch as exc:
                refused[entry.path] = f"the mirror's copy has SHA-256 {exc.digest[:12]}…, expected {entry.sha256[:12]}…"
        if entry.url is None:
            refused.setdefault(entry.path, f"mirror only: {manifest.sources[entry.source].note}")
        to_download.append(entry)
    network = _Downloads(root, timeout_s, progress, refused)
    if allow_network:
        network.run([e for e in to_download if e.url is not None])
    counts["downloaded"] = len(network.done)
    missing = [e for e in to_download if e.path not in network.done]
    if missing:
        raise MissingData(_missing_message(manifest, root, mirror, missing, refused, network.error, allow_network))
    return counts


class _Downloads:
    """Several files fetched at once (each HTTPS request is mostly waiting); stops at the first network failure."""

    THREADS = 8

    def __init__(self, root: Path, timeout_s: float, progress: Callable[[str], None], refused: dict[str, str]):
        self.root, self.timeout_s, self.progress, self.refused = root, timeout_s, progress, refused
        self.done: set[str] = set()
        self.error: str | None = None  # the first failure to reach a server
        self._lock = threading.Lock()
        self._total = 0

    def run(self, entries: list[DataFile]) -> None:
        if not entries:
            return
        self._total = len(entries)
        self.progress(f"test data: downloading {len(entries)} files ({sum(e.size for e in entries) / 1e6:.1f} MB) "
                      f"into {self.root}")
        with ThreadPoolExecutor(self.THREADS) as pool:
            list(pool.map(self._one, entries))

    def _one(self, entry: DataFile) -> None:
        if self.error is not None:
            return
        try:
            fetch(entry.url, self.root / entry.path, entry.sha256, self.timeout_s)
        except DigestMismatch as exc:
            self.refused[entry.path] = f"{entry.url} sent bytes with SHA-256 {exc.digest[:12]}…, refused"
        except urllib.error.HTTPError as exc:
            self.refused[entry.path] = f"{entry.url}: HTTP {exc.code}"
        except OSError as exc:  # URLError, timeouts, refused connections: the network, not this file
            with self._lock:
                self.error = self.error or f"{entry.url}: {getattr(exc, 'reason', exc)}"
        else:
            with self._lock:
                self.done.add(entry.path)
                self.progress(f"  [{len(self.done)}/{self._total}] {entry.path} ({entry.size / 1e3:.0f} kB)")


def _missing_message(manifest: Manifest, root: Path, mirror: Path | None, missing: list[DataFile],
                     refused: dict[str, str], network_error: str | None, allow_network: bool) -> str:
    """One message: what is missing (by folder), why each way of getting it failed, how to provide it."""
    folders: dict[str, int] = {}  # by their first two levels: faces/dlib-faces, models/yunet, video/x.mp4
    for entry in missing:
        folder = "/".join(entry.path.split("/")[:2])
        folders[folder] = folders.get(folder, 0) + 1
    if mirror is None:
        mirror_line = "none (no ../shared beside the repository; FACEFUSE_TEST_DATA_MIRROR is not set)"
    else:
        mirror_line = f"{mirror} lacks them" if mirror.is_dir() else f"{mirror} does not exist"
    if not allow_network:
        network_line = "not used (FACEFUSE_OFFLINE is set)"
    else:
        network_line = f"unreachable — {network_error}" if network_error else "reachable"
    lines = [(f"test data: {len(missing)} of {len(manifest.files)} files "
              f"({sum(e.size for e in missing) / 1e6:.1f} MB) are missing from {root} and could not be fetched."),
             "  missing: " + ", ".join(f"{folder} ({n})" for folder, n in folders.items()),
             f"  mirror:  {mirror_line}",
             f"  network: {network_line}"]
    lines += [f"  refused: {path}: {why}" for path, why in list(refused.items())[:5]]
    if len(refused) > 5:
        lines.append(f"  … {len(refused) - 5} more refused (`python tests/testdata.py check {root}` lists all)")
    lines += ["Provide them, then run `make test-data` (or the tests) again:",
              f"  - allow HTTPS to {HINT_HOSTS} ({manifest.total_bytes / 1e6:.0f} MB in all), or",
              "  - set FACEFUSE_TEST_DATA_MIRROR to a folder laid out like ../shared (faces/, models/, video/, train/)"]
    return "\n".join(lines)


def prepared_root() -> Path:
    """The data root for scripts (benchmarks): filled when files are absent, else trusted without hashing.

    Exits with the one message of :class:`MissingData` when the files cannot be had.
    """
    manifest, root = Manifest.load(), default_root()
    if incomplete(manifest, root):
        try:
            ensure(manifest, root, default_mirror(), allow_network=not offline(),
                   progress=lambda line: print(line, file=sys.stderr))
        except MissingData as exc:
            sys.exit(str(exc))
    return root


def add(manifest: Manifest, mirror: Path, paths: Iterable[str]) -> Manifest:
    """The manifest with the mirror files ``paths`` listed (hash, size, URL and licence from their source).

    A folder stands for every file under it (the mirror's own ``SOURCE.txt`` notes excepted). Raises
    ``ValueError`` for a path that is not in the mirror or that no source covers.
    """
    files = {f.path: f for f in manifest.files}
    for given in paths:
        local = mirror / Path(given)
        if local.is_dir():
            found = sorted(p for p in local.rglob("*") if p.is_file() and p.name != "SOURCE.txt"
                           and not p.name.startswith("."))
        elif local.is_file():
            found = [local]
        else:
            raise ValueError(f"{given} is not in the mirror {mirror}")
        for file in found:
            path = file.relative_to(mirror).as_posix()
            source = manifest.source_of(path)
            files[path] = DataFile(path, source.key, source.url_for(path), sha256_of(file), file.stat().st_size,
                                   source.licence)
    return Manifest(manifest.sources, tuple(files.values()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="fill and verify the test-data root")
    check_cmd = commands.add_parser("check", help="check the manifest against a folder (default: the mirror)")
    check_cmd.add_argument("folder", nargs="?", type=Path)
    add_cmd = commands.add_parser("add", help="list files (or folders) of the mirror in the manifest")
    add_cmd.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    manifest = Manifest.load()
    mirror = default_mirror()
    if args.command == "fetch":
        root = default_root()
        try:
            counts = ensure(manifest, root, mirror, allow_network=not offline(),
                            progress=lambda line: print(line, file=sys.stderr))
        except MissingData as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"test data ready: {len(manifest.files)} files, {manifest.total_bytes / 1e6:.1f} MB in {root} "
              f"({counts['present']} already there, {counts['mirror']} from {mirror}, "
              f"{counts['downloaded']} downloaded)")
        return 0
    if args.command == "check":
        folder = args.folder or mirror
        if folder is None:
            print("no folder given and no mirror found (set FACEFUSE_TEST_DATA_MIRROR)", file=sys.stderr)
            return 1
        problems = check(manifest, folder)
        print("\n".join(problems) or f"{folder}: all {len(manifest.files)} files present and verified")
        return 1 if problems else 0
    if mirror is None:
        print("`add` reads the files from the mirror: set FACEFUSE_TEST_DATA_MIRROR", file=sys.stderr)
        return 1
    try:
        grown = add(manifest, mirror, args.paths)
    except ValueError as exc:
        print(f"nothing added: {exc}", file=sys.stderr)
        return 1
    grown.save()
    print(f"{len(grown.files) - len(manifest.files)} files added to {MANIFEST} ({len(grown.files)} listed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
