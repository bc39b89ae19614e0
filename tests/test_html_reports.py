"""The `--html` reports as a person sees them (#30): each page opened in headless Chromium, no
console line, every Vega chart drawn as SVG with its axes, tick labels, legend and the values on
its bars, those values equal to the JSON report's, the findings with their fixes and example
answers, hostile text escaped, and a screenshot kept in tmp_path (looked at, not only counted)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stopdoctor.reporters.plain import printable

from .browser import chromium, drawn_charts, open_page, screenshot, visible_text
from .helpers import cli

pytest.importorskip("duckdb")

ROOT = Path(__file__).resolve().parents[1]
LIES = ROOT / "fixtures" / "logs" / "lies.jsonl"
OTLP = ROOT / "fixtures" / "logs" / "shapes" / "otel-otlp.jsonl"


def _browser() -> str:
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium: apt-get install -y chromium (the .ci/run script does)")
    return browser


def _report(tmp_path: Path, log: Path, name: str) -> tuple[Path, dict]:
    page = tmp_path / f"{name}.html"
    run = cli("logs", str(log), "--html", str(page), "--json")
    return page, json.loads(run.stdout)


def _seen(text: str) -> str:
    return printable(text)


def test_the_page_is_one_offline_file_with_the_library_inlined(tmp_path):
    page, _ = _report(tmp_path, LIES, "lies")
    text = page.read_text()
    markup = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", text, flags=re.S)  # the page without the scripts' bodies
    assert not re.search(r"""<(script|link|img|iframe)\b[^>]*\b(src|href)=""", markup)  # nothing loaded from anywhere
    assert markup.count("<script") == 9 + 2  # the specs, the inlined library, the drawing script
    assert "vega-lite" in text and text.count('class="chart-spec"') == 9
    assert "sourceMappingURL" not in text


@pytest.mark.slow
def test_the_logs_page_draws_every_chart_with_the_json_reports_numbers(tmp_path):
    browser = _browser()
    page, report = _report(tmp_path, LIES, "lies")
    dom, console = open_page(browser, page, tmp_path / "profile")
    assert console == []  # no error, and no Vega warning (a dropped sort order is a warning)
    assert '<pre id="chart-errors" hidden=""></pre>' in dom
    charts = drawn_charts(dom)
    histograms = [c for c in charts if c.kind == "histogram"]
    assert [c.drawn for c in charts] == [True] * 9 and len(histograms) == 6
    for chart, figures in zip(histograms, report["charts"]["output_tokens"], strict=True):
        budget = figures["max_tokens"]
        assert chart.bars == 21
        x_ticks, y_ticks = chart.axis_labels
        assert len(x_ticks) == 21 and x_ticks[0] == "0" and x_ticks[-1] == f"≥{budget:,}"
        assert all(t.isdigit() for t in y_ticks) and y_ticks[0] == "0"  # whole answers, never 0.5
        assert chart.axis_titles == [f"output tokens (each bar 5% of max_tokens {budget:,}; last bar: at the budget)",
                                     "answers"]
        assert chart.legend_labels == ["under the budget", "at the budget"]
        # the values written on the bars, left to right, are the JSON's non-empty bins then the at-budget count
        assert chart.mark_texts == [str(v) for v in figures["bins"] + [figures["at_budget"]] if v]
    share = next(c for c in charts if c.kind == "length-share")
    by_budget = report["by_max_tokens"]
    assert share.bars == len(by_budget) and share.axis_labels[0] == list(by_budget)
    expected = [f"{c.get('length', 0) / sum(c.values()) * 100:.0f}% ({c.get('length', 0)} of {sum(c.values())})"
                for c in by_budget.values()]
    assert share.mark_texts == expected
    assert "100% (1 of 1)" in expected and "0% (0 of 8)" in expected

    # the drill-downs: per model and per max_tokens, each finish reason's share written on its segment
    for name, table in (("by-model", report["by_model"]), ("by-budget", report["by_max_tokens"])):
        drill = next(c for c in charts if c.name == name)
        assert drill.axis_labels[1] == list(table) and drill.axis_labels[0] == ["0%", "25%", "50%", "75%", "100%"]
        assert drill.bars == sum(len(counts) for counts in table.values())
        assert sorted(drill.mark_texts) == sorted(f"{n / sum(c.values()) * 100:.0f}%" for c in table.values()
                                                  for n in c.values() if n / sum(c.values()) >= 0.04)
        assert set(drill.legend_labels) == {r for c in table.values() for r in c}
        rows = re.findall(rf'<tr class="drill {name}">(.*?)</tr>', dom, re.S)
        assert len(rows) == len(table)
        for row, counts in zip(rows, table.values()):
            total = sum(counts.values())
            assert f"<td class=\"num\">{total:,}</td>" in row
            for n in counts.values():
                assert f"{n:,} <span class=\"where\">({n / total * 100:.1f}%)</span>" in row
    budget_rows = dict(zip(report["by_max_tokens"], re.findall(r'<tr class="drill by-budget">(.*?)</tr>', dom, re.S)))
    for figures in report["charts"]["output_tokens"]:  # the answers at the budget, per budget, as the histograms count them
        assert f"{figures['at_budget']} of {figures['total']} (" in budget_rows[str(figures["max_tokens"])]
    model_row = re.search(r'<tr class="drill by-model">.*?</tr>', dom, re.S).group(0)
    for key, problem in report["problems"].items():
        if problem["count"]:
            assert f"{key} {problem['by_model']['qwen3-8b']}" in visible_text(model_row)

    text = visible_text(dom)
    assert dom.count('<tr class="finding">') == len(report["findings"]) == 5
    for finding in report["findings"]:
        assert _seen(finding["message"]) in text and f"fix: {_seen(finding['fix'])}" in text
    # SD701's examples: the first three answers cut by the budget, with file:line and their ends
    sd701 = re.search(r'<tr class="finding">.*?SD701.*?</tr>', dom, re.S).group(0)
    examples = re.search(r'<ul class="examples">.*?</ul>', sd701, re.S).group(0)
    assert re.findall(r"lies\.jsonl:(\d+)", examples) == ["9", "10", "11"]
    assert re.search(r'class="where">.*?lies\.jsonl:9<', sd701)  # where the finding points
    assert "The answer is" in sd701 and "&lt;think&gt;x&lt;/think&gt;Answer: 3" in sd701

    shot = tmp_path / "logs.png"
    screenshot(browser, page, shot, tmp_path / "profile", size="1400,4200")  # down to the drill-downs
    assert shot.stat().st_size > 50_000  # a page of charts and tables, not a blank one


@pytest.mark.slow
def test_the_timeline_draws_a_stacked_bar_per_bucket_with_its_total(tmp_path):
    browser = _browser()
    page, report = _report(tmp_path, OTLP, "otlp")
    dom, console = open_page(browser, page, tmp_path / "profile")
    assert console == []
    timeline = next(c for c in drawn_charts(dom) if c.kind == "timeline")
    rows = report["charts"]["timeline"]["rows"]
    assert timeline.drawn and timeline.axis_labels[0] == [r["start"] for r in rows]
    assert timeline.bars == sum(len(r["finish_reason"]) for r in rows)
    assert timeline.mark_texts == [f"{sum(r['finish_reason'].values()):,}" for r in rows]
    assert set(timeline.legend_labels) == {f for r in rows for f in r["finish_reason"]}


@pytest.mark.slow
def test_hostile_names_and_answers_stay_text(tmp_path):
    """A model name and an answer holding markup, a closing script tag and a bidi override are
    shown as text: no element of theirs in the DOM, the charts still draw, nothing is logged."""
    browser = _browser()
    hostile = '<img src=x onerror=alert(1)></script><script>alert(2)</script>\u202e'
    lines = [{"request": {"model": hostile, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
              "response": {"id": f"c{i}", "object": "chat.completion", "model": hostile,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": f"{hostile} and then"},
                                        "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 3, "completion_tokens": 16, "total_tokens": 19}}} for i in range(3)]
    log = tmp_path / "hostile.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    page, report = _report(tmp_path, log, "hostile")
    assert report["findings"]
    markup = re.sub(r"<script>.*?</script>", "", page.read_text(), flags=re.S)  # the page less the library's code
    assert "<img" not in markup and "alert(2)</script>" not in markup and "\u202e" not in markup
    assert markup.count("<script") == markup.count('<script type="application/json" class="chart-spec"')
    dom, console = open_page(browser, page, tmp_path / "profile")
    assert console == [] and "<img" not in re.sub(r"<script>.*?</script>", "", dom, flags=re.S)
    histogram = next(c for c in drawn_charts(dom) if c.kind == "histogram")
    assert histogram.drawn and histogram.mark_texts == ["3"]
    assert "&lt;img src=x onerror=alert(1)&gt;" in dom and "<img src=x onerror=alert(1)>" in visible_text(dom)


@pytest.mark.slow
def test_the_inspect_page_shows_which_token_stops_which_runtime(tmp_path, real_models):
    """The broken-eos SmolLM2 (generation_config eos is <|endoftext|> only): the grid shows, cell by
    cell, the JSON's stop ids per runtime, transformers' <|im_end|> cell is the one that does not
    stop, the findings carry their fixes, and the sample prompt marks <|im_end|> as the end of turn."""
    browser = _browser()
    model = real_models.smollm2_hf_broken_eos
    page = tmp_path / "inspect.html"
    report = json.loads(cli("inspect", str(model), "--html", str(page), "--json").stdout)
    dom, console = open_page(browser, page, tmp_path / "profile")
    assert console == []
    grid = next(c for c in drawn_charts(dom) if c.kind == "stops")
    per_runtime = report["stop_ids"]["per_runtime"]
    runtimes = list(per_runtime)
    ids = sorted({i for r in per_runtime.values() for i in r["ids"]} | {i for e in report["end_of_turn"] for i in e["ids"]}
                 | {d["id"] for d in report["declared"] if d["role"] in ("eos", "eot", "eom") and d["id"] is not None})
    assert grid.drawn and grid.axis_labels[0] == runtimes and len(grid.axis_labels[1]) == len(ids)
    assert grid.bars == len(ids) * len(runtimes)
    assert grid.mark_texts == ["stops" if i in per_runtime[r]["ids"] else "does not stop" for i in ids for r in runtimes]
    assert "<|im_end|> (2)" in grid.axis_labels[1] and 2 not in per_runtime["transformers"]["ids"]
    assert "end of turn, does not stop" in grid.legend_labels

    text = visible_text(dom)
    assert dom.count('<tr class="finding">') == len(report["findings"]) and "SD101" in text
    for finding in report["findings"]:
        assert f"fix: {printable(finding['fix'])}" in text
    prompt = re.search(r'<pre class="prompt">.*?</pre>', dom, re.S).group(0)
    assert prompt.count('<mark class="eot"') == 2 and '<mark class="special" title="id 1">&lt;|im_start|&gt;</mark>' in prompt
    screenshot(browser, page, tmp_path / "inspect.png", tmp_path / "profile", size="1400,1800")
