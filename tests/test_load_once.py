"""Engines load behind one future each: a slow load (a swapper download) blocks only callers of that engine."""

from __future__ import annotations

import threading

import pytest

from facefuse.pipeline import LoadOnce


def test_a_slow_load_blocks_only_callers_of_the_same_key():
    once: LoadOnce[str] = LoadOnce()
    assert once.get("mesh", lambda: "mesh engine") == "mesh engine"
    started, release = threading.Event(), threading.Event()
    results: list[str] = []

    def slow() -> str:
        started.set()
        assert release.wait(30)
        return "swapper engine"

    first = threading.Thread(target=lambda: results.append(once.get("swapper", slow)))
    first.start()
    assert started.wait(30)
    # while the swapper is still loading, the loaded engine is answered at once and never rebuilt
    assert once.get("mesh", lambda: pytest.fail("built twice")) == "mesh engine"
    second = threading.Thread(target=lambda: results.append(once.get("swapper", lambda: "built twice")))
    second.start()
    release.set()
    first.join(30)
    second.join(30)
    assert results == ["swapper engine", "swapper engine"]


def test_a_failed_load_is_retried_by_the_next_caller():
    once: LoadOnce[str] = LoadOnce()

    def broken() -> str:
        raise OSError("download failed")

    with pytest.raises(OSError):
        once.get("swapper", broken)
    assert once.get("swapper", lambda: "loaded on retry") == "loaded on retry"
