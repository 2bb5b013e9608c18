"""The documentation: the site builds strictly and offline, and what it quotes is what the code and BENCHMARKS.md say.

The checks themselves live in ``docs/sync.py`` (also run by ``make docs``); here they run over the real pages, and
each is also shown to fail on a page that drifted, so a check that can never fire would be noticed.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from facefuse.errors import ErrorCode, FacefuseError
from facefuse.imageio import read_label

REPO = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("docs_sync", REPO / "docs" / "sync.py")
sync = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(sync)

PAGE_NAMES = [str(page.relative_to(REPO)) for page in sync.PAGES]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                         check=False, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


def test_site_builds_strictly_with_every_page(site: Path) -> None:
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)$", (REPO / "mkdocs.yml").read_text(), flags=re.MULTILINE)
    assert nav, "mkdocs.yml has no nav"
    for page in nav:
        assert (site / page.replace(".md", ".html")).is_file(), page
    assert "UPLOAD_TIMEOUT" in (site / "errors.html").read_text()


def test_site_loads_nothing_from_elsewhere(site: Path) -> None:
    """Scripts, styles and images come from the site itself (links to other sites are fine: they are not loaded)."""
    loaded = re.compile(r"<(?:script|link|img|iframe)\b[^>]*?\b(?:src|href)=\"(?:https?:)?//", re.IGNORECASE)
    offenders = [str(p.relative_to(site)) for p in site.rglob("*.html") if loaded.search(p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("page", PAGE_NAMES)
def test_generated_tables_match_the_code(page: str) -> None:
    text = (REPO / page).read_text()
    assert sync.render(text) == text, f"run `python docs/sync.py`: a generated table of {page} is stale"


@pytest.mark.parametrize("page", PAGE_NAMES)
def test_quoted_figures_and_statuses_are_backed(page: str) -> None:
    text = (REPO / page).read_text()
    sections = sync.benchmark_sections((REPO / "BENCHMARKS.md").read_text())
    assert sync.unbacked_figures(page, text, sections) + sync.wrong_statuses(page, text) == []


def test_error_page_lists_every_code_with_its_exit_code_and_status() -> None:
    """Read back from the page itself, independently of the renderer."""
    page = (REPO / "docs" / "errors.md").read_text()
    rows = dict(re.findall(r"^\| `([A-Z_]+)` \| (\d+ \| \d+) \|$", page, re.MULTILINE))
    expected = {code.value: f"{FacefuseError(code, '').exit_code} | {FacefuseError(code, '').http_status}"
                for code in ErrorCode}
    assert rows == expected


def test_model_page_marks_every_non_commercial_model() -> None:
    from facefuse.models.registry import ModelRegistry

    text = (REPO / "docs" / "models.md").read_text()
    for entry in ModelRegistry():
        row = re.search(rf"^\| `{re.escape(entry.name)}`.*$", text, re.MULTILINE)
        assert row, entry.name
        assert ("non-commercial only" in row.group(0)) == (not entry.commercial_use), row.group(0)


SECTIONS = {"Fusion speed (`benchmarks/fusion_speed.py`)": "| total | 118.3 | 181.8 |\n\nGoals: 720p ≤ 80 ms",
            "Video": "| 720p | 60 | 0.8 | 118 |"}


def test_a_figure_benchmarks_do_not_hold_is_caught() -> None:
    page = ("720p fusion takes 118.3 ms (goal ≤ 80 ms). <!-- bench: Fusion speed -->\n\n"
            "| 720p | 0.9 frames/s <!-- bench: Video --> |\n\n"
            "- a list item quoting 118 ms <!-- bench: Fusion speed -->\n\n"
            "A fusion takes 50 ms on any laptop.\n\n"
            "A 4-core node should reach 30 fusions/s. <!-- not measured -->\n\n"
            "Quoted from nowhere: 1 ms. <!-- bench: Face -->\n\n"
            "```console\n$ facefuse fuse  # in 231 ms\n```\n")
    complaints = sync.unbacked_figures("page.md", page, SECTIONS)
    expected = ["0.9 is not in the BENCHMARKS.md section(s) it cites",  # a drifted figure in a table row
                "118 is not in the BENCHMARKS.md section(s) it cites",  # rounded: BENCHMARKS.md says 118.3
                "'50 ms' has no <!-- bench: SECTION --> tag",  # a measured-looking figure without a source
                "bench tag 'Face' names 0 sections of BENCHMARKS.md",
                "1 is not in the BENCHMARKS.md section(s) it cites"]
    assert len(complaints) == len(expected), complaints
    for complaint, start in zip(complaints, expected):
        assert complaint.startswith(f"page.md: {start}"), complaint


def test_a_wrong_status_is_caught() -> None:
    page = ("A job too big is 400 `JOB_TOO_LARGE`; a cut video is `CORRUPT_VIDEO` (400, exit 2).\n\n"
            "| 422 | `NO_FACE`, `QUEUE_FULL` |\n\n413 `NOT_A_CODE`; 413 `IMAGE_TOO_LARGE`.\n")
    complaints = sync.wrong_statuses("page.md", page)
    assert len(complaints) == 4, complaints
    assert any("`JOB_TOO_LARGE` is HTTP 413" in c for c in complaints)
    assert any("`CORRUPT_VIDEO` is HTTP 400, exit 3" in c for c in complaints)
    assert any("`QUEUE_FULL` is HTTP 429" in c for c in complaints)
    assert any("`NOT_A_CODE` is not an error code" in c for c in complaints)


def test_a_stale_generated_table_is_rewritten() -> None:
    stale = "# Errors\n\n<!-- generated: errors -->\n| `NO_FACE` | 3 | 400 |\n<!-- /generated -->\n"
    fresh = sync.render(stale)
    assert fresh != stale
    assert "| `NO_FACE` | 3 | 422 |" in fresh and "| `UPLOAD_TIMEOUT` | 5 | 408 |" in fresh
    assert sync.render(fresh) == fresh


def test_readme_is_short_and_its_links_resolve() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for must in ("consent", "make run", "make test", "AI-generated", "non-commercial"):
        assert must in readme, must
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"https?://", t)]
    assert local, "the README links to no page"
    assert [t for t in local if not (REPO / t).exists()] == []


def test_before_after_picture_is_labelled() -> None:
    """The committed picture shows a fused face, so it carries the AI-generated metadata like every output."""
    label = read_label((REPO / "docs" / "img" / "before_after.jpg").read_bytes())
    assert label, "docs/img/before_after.jpg has no AI-generated label: regenerate it with docs/make_figures.py"
