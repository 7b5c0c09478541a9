"""`make bench` writes its figures into the docs' Performance page, between its markers only."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import report
from infra import ROOT


def test_the_performance_page_has_the_markers_once():
    text = (ROOT / "docs" / "design" / "performance.md").read_text()
    assert text.count(report.FIGURES_BEGIN) == 1 and text.count(report.FIGURES_END) == 1
    assert text.index(report.FIGURES_BEGIN) < text.index(report.FIGURES_END)


def test_only_the_marked_part_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(report, "readme_section", lambda results: "## Performance\n\nnew figures\n")
    page = tmp_path / "performance.md"
    page.write_text(f"# Performance\n\n{report.FIGURES_BEGIN}\nold figures\n{report.FIGURES_END}\n\nprose\n")
    assert report.update_docs_page({}, page)
    assert page.read_text() == (
        f"# Performance\n\n{report.FIGURES_BEGIN}\nnew figures\n{report.FIGURES_END}\n\nprose\n"
    )


def test_a_page_without_markers_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(report, "readme_section", lambda results: "## Performance\n\nnew figures\n")
    page = tmp_path / "performance.md"
    page.write_text("# Performance\n\nhand-written\n")
    assert not report.update_docs_page({}, page)
    assert page.read_text() == "# Performance\n\nhand-written\n"
