"""A report page as a person sees it: opened in headless Chromium, its DOM after the charts have
drawn, the console lines it wrote, a screenshot, and what each Vega chart drew (axis tick texts,
axis titles, legend labels, the texts on the marks, the number of bars), read from the SVG."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def chromium() -> str | None:
    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if shutil.which(name)), None)


def _flags(browser: str, profile: Path) -> list[str]:
    # The virtual-time budget lets the page's promises (vega-embed draws asynchronously) settle
    # before the DOM is dumped or the screenshot taken, without waiting on the wall clock.
    return [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--enable-logging=stderr", "--v=0"]


def open_page(browser: str, page: Path, profile: Path) -> tuple[str, list[str]]:
    """The DOM once drawn, and the page's console lines (Chromium's `CONSOLE` log lines)."""
    run = subprocess.run(_flags(browser, profile) + ["--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=180)
    return run.stdout, [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def screenshot(browser: str, page: Path, shot: Path, profile: Path, size: str = "1400,2400") -> None:
    subprocess.run(_flags(browser, profile) + [f"--screenshot={shot}", f"--window-size={size}", page.as_uri()],
                   capture_output=True, timeout=180, check=True)


@dataclass
class DrawnChart:
    name: str
    kind: str
    drawn: bool = False
    axis_labels: list[list[str]] = field(default_factory=list)  # per axis, its tick texts
    axis_titles: list[str] = field(default_factory=list)
    legend_labels: list[str] = field(default_factory=list)
    mark_texts: list[str] = field(default_factory=list)  # the values written on the bars
    bars: int = 0
    points: int = 0  # the symbols of a point mark
    rules: int = 0  # the lines of a rule mark
    titles: list[str] = field(default_factory=list)  # the chart's title lines


class _Charts(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []  # (tag, class)
        self.charts: list[DrawnChart] = []
        self.chart_depth: int | None = None
        self.text_into: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        css = a.get("class") or ""
        if tag not in VOID:
            self.stack.append((tag, css))
        if tag == "div" and "data-chart" in a:
            self.charts.append(DrawnChart(a["data-chart"], css.replace("chart", "").strip()))
            self.chart_depth = len(self.stack)
        if self.chart_depth is None:
            return
        chart = self.charts[-1]
        if a.get("data-drawn") == "yes":
            chart.drawn = True
        if tag == "g" and "role-axis-label" in css:
            chart.axis_labels.append([])
        classes = [c for _, c in self.stack]
        if tag == "path" and any("mark-rect role-mark" in c for c in classes):
            chart.bars += 1
        if tag == "path" and any("mark-symbol role-mark" in c for c in classes):
            chart.points += 1
        if tag == "line" and any("mark-rule role-mark" in c for c in classes):
            chart.rules += 1
        if tag == "tspan" and any("role-title-text" in c for c in classes):
            if not chart.titles or chart.titles[-1]:  # a title of several lines: a tspan each
                chart.titles.append("")
            self.text_into = chart.titles
            return
        if tag == "text":
            owner = next((c for c in reversed(classes) if "role-" in c), "")
            self.text_into = (chart.axis_labels[-1] if "role-axis-label" in owner else
                              chart.axis_titles if "role-axis-title" in owner else
                              chart.legend_labels if "role-legend-label" in owner else
                              chart.mark_texts if "mark-text role-mark" in owner else
                              chart.titles if "role-title-text" in owner else None)
            if self.text_into is not None:
                self.text_into.append("")

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        while self.stack:
            if self.stack.pop()[0] == tag:
                break
        if self.chart_depth is not None and len(self.stack) < self.chart_depth:
            self.chart_depth = None
        if tag in ("text", "tspan"):
            self.text_into = None

    def handle_data(self, data):
        if self.text_into is not None:
            self.text_into[-1] += data


def drawn_charts(dom: str) -> list[DrawnChart]:
    parser = _Charts()
    parser.feed(dom)
    return parser.charts


def visible_text(dom: str) -> str:
    """The page's text as read: outside scripts and styles, tags dropped, entities decoded."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))
