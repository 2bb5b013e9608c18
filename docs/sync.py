"""Ties the documentation to the one source of each fact it quotes, so the pages cannot drift from the code.

Three kinds of fact are tied:

- **Generated blocks.** ``<!-- generated: NAME -->`` … ``<!-- /generated -->`` in a page holds a table rendered
  from the code: ``errors`` from the error table (:mod:`facefuse.errors`), ``models`` from the model registry,
  ``fusion-options``, ``video-options`` and ``serve-settings`` from their schema models, ``test-data`` from
  ``tests/data_manifest.json``. Editing such a block by hand is pointless: this script rewrites it.
- **Measured figures.** A paragraph or table row that quotes figures from ``BENCHMARKS.md`` carries
  ``<!-- bench: SECTION -->`` (one or more ``;``-separated heading prefixes of ``BENCHMARKS.md``); every number in
  it must appear in those sections. A figure followed by a unit of speed or quality (ms, frames/s, dB, …) outside
  code blocks must be tagged so: a measured figure cannot be quoted without its source. A unit marked
  ``<!-- not measured -->`` (a limit set in the code, or an estimate the text says is one) is exempt.
- **Error statuses.** A status or exit code the prose gives an error code (``413 `JOB_TOO_LARGE` ``,
  ``(415, exit 3)``, a row of a status table) must be the error table's.

``python docs/sync.py`` rewrites the generated blocks, then checks the figures; ``--check`` changes nothing and
exits 1 naming each stale block and each figure BENCHMARKS.md does not back. ``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from enum import Enum
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from facefuse import FusionOptions
from facefuse.config import AnalysisConfig, ImageLimits, QualityConfig
from facefuse.fusion.restorer import RestoreConfig
from facefuse.schema import fields_of, flag_of, shell_name
from facefuse.errors import ErrorCode, FacefuseError
from facefuse.models.registry import ModelRegistry
from facefuse.serve import ServeSettings
from facefuse.video import VideoOptions

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from testdata import Manifest  # tests/ is no package: the manifest's reader lives there

BENCHMARKS = REPO / "BENCHMARKS.md"
# docs/benchmarks.md is BENCHMARKS.md itself (a link, so the site shows it): the source, not a page that quotes it
PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "benchmarks.md")]

GENERATED = re.compile(r"(<!-- generated: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /generated -->)", re.DOTALL)
BENCH_TAG = re.compile(r"<!-- bench: (?P<sections>[^>]+?) -->")
NOT_MEASURED = "<!-- not measured -->"
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# a number with a unit of speed or quality: the figures that must come from a benchmark
FIGURE = re.compile(r"\d+(?:[.,]\d+)*\s?(?:ms|frames/s|fusions/s|photos/s|fps|dB)\b")
LIST_ITEM = re.compile(r"\s*(?:[-*]|\d+\.)\s")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.DOTALL | re.MULTILINE)


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = [header, ["---"] * len(header), *rows]
    return "".join("| " + " | ".join(cells) + " |\n" for cells in lines)


def errors_table() -> str:
    """Every error code with its CLI exit code and HTTP status, read through the errors' public API."""
    rows = []
    for code in ErrorCode:
        error = FacefuseError(code, "")
        rows.append([f"`{code.value}`", str(error.exit_code), str(error.http_status)])
    return _table(["code", "CLI exit", "HTTP status"], rows)


def models_table() -> str:
    """Every registered model with its use (commercial or not), licence and input contract."""
    rows = []
    for entry in ModelRegistry():
        name = f"`{entry.name}`" + (" (default)" if entry.default else "")
        use = "any" if entry.commercial_use else "**non-commercial only**"
        rows.append([name, entry.task.value, use, entry.licence, entry.input.describe().replace("|", "\\|")])
    return _table(["model", "task", "use", "licence", "input"], rows)


def test_data_table() -> str:
    """Files, size and licence of the test data, per source of ``tests/data_manifest.json``."""
    manifest = Manifest.load()
    count: dict[str, int] = defaultdict(int)
    size: dict[str, int] = defaultdict(int)
    for item in manifest.files:
        count[item.source] += 1
        size[item.source] += item.size
    rows = []
    for key, source in manifest.sources.items():
        origin = f"{source.repo} `{source.upstream}`" if source.repo else "mirror only"
        rows.append([f"`{source.prefix}`", str(count[key]), f"{size[key] / 1e6:.1f}", origin, source.licence])
    rows.append(["all", str(len(manifest.files)), f"{manifest.total_bytes / 1e6:.1f}", "", ""])
    return _table(["under the data root", "files", "MB", "origin", "licence"], rows)


def _default(info: FieldInfo) -> str:
    """A field's default as the docs show it: factory defaults depend on the machine (cores), so they are named."""
    if info.default_factory is not None:
        return "see meaning"
    value = info.default.value if isinstance(info.default, Enum) else info.default
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def fields_table(model: type[BaseModel], *, env: bool = False) -> str:
    """One row per field of an options model (its name, its ``--[no-]NAME`` flag for booleans: the shells' name,
    :func:`facefuse.schema.shell_name`, or the field's own flag) or of the service's settings (``env``: flags that
    take a value, and their ``FACEFUSE_*`` variables): default and description. Nested options models
    (``AnalysisConfig.quality``) have tables of their own."""
    rows = []
    for name, info in fields_of(model).items():
        shell = shell_name(model, name)
        flag = flag_of(shell, info)
        if env:
            names = [f"`{flag}`", f"`FACEFUSE_{shell.upper()}`"]
        else:
            names = [f"`{name}`", "`" + (flag.replace("--", "--[no-]", 1) if info.annotation is bool else flag) + "`"]
        rows.append([*names, _default(info), (info.description or "").replace("|", "\\|")])
    header = ["flag", "environment"] if env else ["option", "CLI flag"]
    return _table([*header, "default", "meaning"], rows)


RENDERERS = {"errors": errors_table, "models": models_table, "test-data": test_data_table,
             "fusion-options": lambda: fields_table(FusionOptions), "video-options": lambda: fields_table(VideoOptions),
             "serve-settings": lambda: fields_table(ServeSettings, env=True),
             **{f"{name}-options": lambda model=model: fields_table(model) for name, model in
                (("analysis", AnalysisConfig), ("quality", QualityConfig), ("limits", ImageLimits),
                 ("restore", RestoreConfig))}}


def render(text: str) -> str:
    """The page with every generated block rendered afresh."""
    def fill(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDERERS:
            raise KeyError(f"unknown generated block '{name}' (known: {', '.join(RENDERERS)})")
        return match.group(1) + RENDERERS[name]() + match.group(4)

    return GENERATED.sub(fill, text)


def benchmark_sections(text: str) -> dict[str, str]:
    """BENCHMARKS.md's level-2 sections by heading."""
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2])}


def _units(text: str) -> list[str]:
    """Paragraphs, list items and table rows outside fenced code, inline code removed: what a bench tag covers."""
    units: list[str] = []
    for block in re.split(r"\n\s*\n", FENCE.sub("", text)):
        lines = block.strip().splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            units.extend(lines)
            continue
        current: list[str] = []
        for line in lines:
            if LIST_ITEM.match(line) and current:
                units.append(" ".join(current))
                current = []
            current.append(line.strip())
        if current:
            units.append(" ".join(current))
    return [re.sub(r"`[^`]*`", "", unit) for unit in units]


def unbacked_figures(page: str, text: str, sections: dict[str, str]) -> list[str]:
    """One complaint per quoted figure that no named BENCHMARKS.md section holds, or that has no bench tag."""
    complaints = []
    for unit in _units(text):
        if NOT_MEASURED in unit:
            continue
        tags = BENCH_TAG.findall(unit)
        if not tags:
            complaints += [f"{page}: '{figure}' has no <!-- bench: SECTION --> tag: {unit[:90]}…"
                           for figure in FIGURE.findall(unit)]
            continue
        known: set[str] = set()
        for prefix in (p.strip() for tag in tags for p in tag.split(";")):
            matches = [h for h in sections if h.startswith(prefix)]
            if len(matches) != 1:
                complaints.append(f"{page}: bench tag '{prefix}' names {len(matches)} sections of BENCHMARKS.md")
                continue
            known |= set(NUMBER.findall(sections[matches[0]]))
        for number in NUMBER.findall(BENCH_TAG.sub("", unit)):
            if number not in known:
                complaints.append(f"{page}: {number} is not in the BENCHMARKS.md section(s) it cites: {unit[:90]}…")
    return complaints


STATUS_ROW = re.compile(r"^\|\s*(\d{3}(?:\s*/\s*\d{3})*)\s*\|(.*)$", re.MULTILINE)
STATUS_BEFORE = re.compile(r"\b(\d{3}) `([A-Z][A-Z_]+)`")
STATUS_AFTER = re.compile(r"`([A-Z][A-Z_]+)` \((\d{3})(?:, exit (\d+))?\)")


def wrong_statuses(page: str, text: str) -> list[str]:
    """Statuses and exit codes the prose gives error codes (``413 `JOB_TOO_LARGE` ``, ``(415, exit 3)``, a row of
    a status table) that the error table does not."""
    claims = [(code, {int(status)}, None) for status, code in STATUS_BEFORE.findall(text)]
    claims += [(code, {int(status)}, int(exit) if exit else None) for code, status, exit in STATUS_AFTER.findall(text)]
    for statuses, cells in STATUS_ROW.findall(text):  # a row also names methods (`HEAD`): only codes count there
        statuses_set = {int(s) for s in re.findall(r"\d{3}", statuses)}
        claims += [(code, statuses_set, None) for code in re.findall(r"`([A-Z][A-Z_]+)`", cells)
                   if code in ErrorCode.__members__]
    complaints = []
    for code, statuses, exit in claims:
        error = FacefuseError(ErrorCode(code), "") if code in ErrorCode.__members__ else None
        if error is None:
            complaints.append(f"{page}: `{code}` is not an error code")
        elif error.http_status not in statuses or (exit is not None and error.exit_code != exit):
            said = "/".join(map(str, sorted(statuses))) + (f", exit {exit}" if exit is not None else "")
            complaints.append(f"{page}: `{code}` is HTTP {error.http_status}, exit {error.exit_code}; the page says {said}")
    return complaints


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 on any stale block or figure")
    args = parser.parse_args(argv)
    sections = benchmark_sections(BENCHMARKS.read_text())
    complaints = []
    for page in PAGES:
        text = page.read_text()
        fresh = render(text)
        name = str(page.relative_to(REPO))
        if fresh != text:
            if args.check:
                complaints.append(f"{name}: a generated block is stale (run `python docs/sync.py`)")
            else:
                page.write_text(fresh)
                print(f"rewrote the generated blocks of {name}")
        complaints += unbacked_figures(name, fresh, sections) + wrong_statuses(name, fresh)
    print("\n".join(complaints) or "docs in sync with the code and BENCHMARKS.md")
    return 1 if complaints else 0


if __name__ == "__main__":
    raise SystemExit(main())
