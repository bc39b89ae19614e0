"""The `--html` pages of generate, stop-odds and check (#30), as a person sees them: opened in
headless Chromium, no console line, every chart drawn (points, rules, bars, tick and legend
texts read from the SVG), the numbers on the page equal to the JSON report's, hostile text (token
texts, stop strings, model names) shown as text, a screenshot kept in tmp_path.
generate and stop-odds load the real SmolLM2 (slow); a --server run goes through llama.cpp's own
llama-server on its GGUF."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from stopdoctor.reporters.plain import printable

from .browser import chromium, drawn_charts, open_page, screenshot, visible_text
from .helpers import cli

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = "<img src=x onerror=alert(1)></script><script>alert(2)</script>"
TOKEN = re.compile(r'<span class="tok (\w+)" data-step="(\d+)" data-id="(\d+)" title="([^"]*)">(.*?)</span>', re.S)


def _browser() -> str:
    browser = chromium()
    if browser is None:
        pytest.skip("no Chromium: apt-get install -y chromium (the .ci/run script does)")
    return browser


def _without_code(text: str) -> str:
    """The page less the inlined library and drawing script (their code names elements)."""
    return re.sub(r"<script>.*?</script>", "", text, flags=re.S)


def _looked_at(browser: str, page: Path, tmp_path: Path) -> tuple[str, list]:
    dom, console = open_page(browser, page, tmp_path / "profile")
    assert console == []  # no error, no Vega warning
    assert '<pre id="chart-errors" hidden=""></pre>' in dom
    return dom, drawn_charts(dom)


@pytest.mark.slow
@pytest.mark.needs_torch
def test_generate_page_colours_the_stream_and_marks_the_missed_stop(tmp_path, real_models):
    """The broken-eos SmolLM2 runs past <|im_end|>: that token is the red one in the stream, the
    chart has one point per step at the JSON's P(end-of-turn), and a red rule at the missed step."""
    browser = _browser()
    page = tmp_path / "generate.html"
    run = cli("generate", str(real_models.smollm2_hf_broken_eos), "-m", "user", "What is the capital of France?",
              "--max-new-tokens", "24", "--device", "cpu", "--html", str(page), "--json")
    assert run.code == 1
    doc = run.json()
    steps, missed = doc["steps"], doc["should_have_stopped"]
    assert missed["text"] == "<|im_end|>" and doc["finish_reason"] == "length"
    dom, charts = _looked_at(browser, page, tmp_path)

    tokens = TOKEN.findall(dom)
    assert [(int(step), int(token_id)) for _, step, token_id, _, _ in tokens] == [(s["step"], s["id"]) for s in steps]
    stop_ids = {s["id"] for s in doc["stops"]["ids"]}
    for (kind, step, token_id, title, text), s in zip(tokens, steps, strict=True):
        assert f"P(end-of-turn) {s['p_end_of_turn']:.3g}" in title
        expected = ("missed" if s["step"] == missed["step"] else "stop" if s["id"] in stop_ids
                    else "ender" if s["id"] == missed["id"] else "special" if s["special"] else "plain")
        assert kind == expected, (s, kind)
    assert [t[4] for t in tokens if t[0] == "missed"] == ["&lt;|im_end|&gt;"]
    assert sum(t[0] == "ender" for t in tokens) == sum(s["id"] == missed["id"] for s in steps) - 1 > 0

    (odds,) = charts
    assert odds.kind == "odds" and odds.drawn
    turn = doc["hallucinated_turn"]
    assert odds.points == len(steps) and odds.rules == 2 and odds.mark_texts == ["missed stop", f"{turn['role']} turn"]
    p = steps[missed["step"]]["p_end_of_turn"]
    assert odds.titles == [f"red dashed line: the missed stop, <|im_end|> at step {missed['step']} (P {p:.3g})",
                           f"purple dashed line: the model wrote a {turn['role']} turn itself at step {turn['step']}"]
    x_ticks, y_ticks = odds.axis_labels
    assert x_ticks[0] == "0" and x_ticks[-1] == str(len(steps) - 1) and y_ticks[-1] == "1e+0"
    assert "missed stop" in odds.legend_labels and "ordinary token" in odds.legend_labels

    text = visible_text(dom)
    assert f"fix {printable(doc['fix']['text'])}" in text
    assert f"stop ids {doc['counterfactual']['stop_ids']} would have ended it at step {doc['counterfactual']['step']}" in text
    screenshot(browser, page, tmp_path / "generate.png", tmp_path / "profile", size="1400,1500")


@pytest.mark.slow
@pytest.mark.needs_torch
def test_hostile_token_texts_and_stop_strings_stay_text(tmp_path, real_models):
    """SmolLM2 continuing a repeated `<img onerror></script><script>` writes those tokens: each is a
    span of text, the chart's data carries them without closing its script block, nothing runs."""
    browser = _browser()
    page = tmp_path / "hostile.html"
    run = cli("generate", str(real_models.smollm2_hf), "--raw", "--prompt", f"{HOSTILE}\n" * 4, "--stop", HOSTILE,
              "--stops", "none", "--max-new-tokens", "24", "--device", "cpu", "--html", str(page), "--json")
    doc = run.json()
    written = "".join(s["text"] for s in doc["steps"])
    assert "</script>" in written and "<img" in written  # the model did write the hostile tokens
    markup = _without_code(page.read_text())
    assert "<img" not in markup and "alert(2)</script>" not in markup
    assert markup.count("<script") == markup.count('<script type="application/json" class="chart-spec"') == 1
    dom, charts = _looked_at(browser, page, tmp_path)
    assert "<img" not in _without_code(dom) and charts[0].drawn and charts[0].points == len(doc["steps"])
    stream = re.search(r'<div class="stream"><span class="tok.*?</div>', dom, re.S).group(0)
    assert visible_text(stream).replace(" ", "") == written.replace(" ", "").replace("\n", "")
    assert HOSTILE in visible_text(dom)  # the stop string, in the stop set's row, as text


@pytest.mark.slow
def test_server_page_shows_the_text_and_says_no_odds(tmp_path, real_gguf_models, llama_server):
    """A --server run returns text, not probabilities: the page shows it and says the odds are not
    available; it draws no chart."""
    browser = _browser()
    page = tmp_path / "server.html"
    run = cli("generate", str(real_gguf_models.smollm2_gguf), "-m", "user", "What is the capital of France?",
              "--server", llama_server.url, "--max-new-tokens", "24", "--html", str(page), "--json")
    doc = run.json()
    assert doc["steps"] == [] and doc["text"]
    dom, charts = _looked_at(browser, page, tmp_path)
    assert charts == [] and "odds not available" in visible_text(dom)
    assert f"finish_reason={doc['server']['finish_reason']}" in visible_text(dom) and llama_server.url in visible_text(dom)
    assert printable(doc["text"]).strip() in visible_text(dom)
    screenshot(browser, page, tmp_path / "server.png", tmp_path / "profile", size="1400,900")


EDGES = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1.0)


@pytest.mark.slow
@pytest.mark.needs_torch
def test_stop_odds_page_draws_the_spread_and_every_answer(tmp_path, real_models):
    browser = _browser()
    page = tmp_path / "stop-odds.html"
    run = cli("stop-odds", str(real_models.smollm2_hf), "--html", str(page), "--json")
    doc = run.json()
    dom, charts = _looked_at(browser, page, tmp_path)
    histogram, strip = charts
    p = [e["p_end_of_turn"] for e in doc["examples"]]
    assert strip.drawn and strip.points == len(p) and strip.rules == 3
    assert strip.mark_texts == [f"median {doc['median_p_end_of_turn']:.4f}", "0.01: below, never learned",
                                "0.1: above, ends turns"]
    counts = [sum(low <= x < high or (high == 1.0 and x == 1.0) for x in p) for low, high in zip(EDGES, EDGES[1:])]
    assert histogram.drawn and histogram.bars == 7
    assert histogram.mark_texts == [str(n) for n in counts if n]
    assert histogram.axis_labels[0] == ["< 1e-06", "1e-06 – 1e-05", "1e-05 – 0.0001", "0.0001 – 0.001", "0.001 – 0.01",
                                        "0.01 – 0.1", "0.1 – 1"]
    assert histogram.legend_labels == ["never learned (< 0.01)", "sometimes (0.01 – 0.1)", "ends turns (≥ 0.1)"]
    cells = re.findall(r'<td class="num p">([^<]*)</td>', dom)
    assert cells == [f"{x:.4g}" for x in p]
    text = visible_text(dom)
    assert f"median {doc['median_p_end_of_turn']:.4f} over {len(p)}" in text and printable(doc["reason"]) in text
    screenshot(browser, page, tmp_path / "stop-odds.png", tmp_path / "profile", size="1400,1000")


@pytest.fixture
def repo(tmp_path, synth_root, monkeypatch):
    shutil.copytree(synth_root / "llama3-eot-missing", tmp_path / "models" / "runaway")
    shutil.copytree(synth_root / "clean-chatml", tmp_path / "models" / "clean")
    shutil.copytree(synth_root / "clean-chatml", tmp_path / "models" / "<img src=x onerror=alert(1)>")
    shutil.copy(ROOT / "fixtures" / "serving" / "request-bad.json", tmp_path / "request.json")
    monkeypatch.chdir(tmp_path)
    for name in ("MODELS", "SERVING", "FAIL_ON", "SELECT", "IGNORE", "SEVERITY", "FORMAT", "CONFIG"):
        monkeypatch.delenv(f"STOPDOCTOR_{name}", raising=False)
    return tmp_path


def test_check_page_says_pass_at_the_top(repo):
    run = cli("check", "models/clean", "--html", "clean.html")
    page = (repo / "clean.html").read_text()
    assert run.code == 0 and '<p class="banner pass" data-exit-code="0">PASS' in page
    run = cli("check", "models/runaway", "--html", "runaway.html")
    assert run.code == 1 and '<p class="banner fail" data-exit-code="1">FAIL: 1 finding(s) at or above error' in \
        (repo / "runaway.html").read_text()


@pytest.mark.slow
def test_check_page_lists_every_model_and_finding_with_its_file_and_line(repo, tmp_path):
    browser = _browser()
    models = ["models/runaway", "models/clean", "models/<img src=x onerror=alert(1)>", "models/nothing-here"]
    run = cli("check", *models, "--serving", "request.json", "--html", "check.html", "--format", "json")
    doc = run.json()
    assert run.code == doc["exit_code"] == 2
    page = repo / "check.html"
    assert "<img" not in _without_code(page.read_text())
    dom, charts = _looked_at(browser, page, tmp_path)
    assert "<img" not in _without_code(dom)
    assert '<p class="banner cannot" data-exit-code="2">' in dom
    assert dom.count('<tr class="subject">') == len(doc["models"]) == 4
    text = visible_text(dom)
    assert "FAIL: 1 of 4 model(s) could not be checked" in text and "models/<img src=x onerror=alert(1)>" in text
    sections = re.findall(r'<section class="model">.*?</section>', dom, re.S)
    for section, model in zip(sections, doc["models"], strict=True):
        assert section.count('<tr class="finding">') == len(model["findings"])
        for finding in model["findings"]:
            assert f"<code>{finding['path']}:{finding['line']}</code>" in section
            assert f"fix: {printable(finding['fix'])}" in visible_text(section)
    assert "request.json" in {f["path"] for f in doc["models"][0]["findings"]}
    assert "no such folder" in visible_text(sections[3])

    (chart,) = charts
    assert chart.drawn and chart.axis_labels[1] == [m["spec"] for m in doc["models"]]
    assert chart.bars == sum(1 for m in doc["models"] for s in ("error", "warning", "info")
                             if any(f["severity"] == s for f in m["findings"]))
    assert chart.mark_texts == [str(len(m["findings"])) for m in doc["models"]]
    assert chart.legend_labels == ["error", "warning", "info"]
    screenshot(browser, page, tmp_path / "check.png", tmp_path / "profile", size="1400,2000")


@pytest.mark.slow
@pytest.mark.needs_torch
def test_generate_page_on_weights_with_a_nan_end_of_turn_row_says_so(tmp_path, real_models):
    """NaN odds at every step (a NaN <|im_end|> row): the page says the odds are not finite and
    draws no chart of NaN, instead of the command failing."""
    import numpy as np

    from .test_hostile_stop_odds import _with_row

    browser = _browser()
    folder = _with_row(real_models.smollm2_hf, tmp_path / "m", np.nan)
    page = tmp_path / "nan.html"
    run = cli("generate", str(folder), "-m", "user", "What is the capital of France?", "--max-new-tokens", "8",
              "--device", "cpu", "--html", str(page), "--json")
    assert run.code in (0, 1), run.stderr
    dom, charts = _looked_at(browser, page, tmp_path)
    assert charts == [] and len(TOKEN.findall(dom)) == len(run.json()["steps"]) == 8
    assert "8 of 8 steps have no finite P(end-of-turn)" in visible_text(dom)


@pytest.mark.slow
@pytest.mark.needs_torch
def test_stop_odds_page_keeps_hostile_answers_and_file_names_as_text(tmp_path, real_models):
    browser = _browser()
    folder = tmp_path / "<img src=x onerror=alert(3)>"
    folder.mkdir()
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": "Say it."},
                                                     {"role": "assistant", "content": f"{HOSTILE} {i}"}]}) + "\n"
                            for i in range(2)))
    page = tmp_path / "hostile-odds.html"
    doc = cli("stop-odds", str(real_models.smollm2_hf), "--data", str(data), "--html", str(page), "--json").json()
    assert len(doc["examples"]) == 2
    assert "<img" not in _without_code(page.read_text())
    dom, charts = _looked_at(browser, page, tmp_path)
    assert "<img" not in _without_code(dom) and all(c.drawn for c in charts) and charts[1].points == 2
    text = visible_text(dom)
    assert all(printable(e["answer_end"]) in text and e["source"] in text for e in doc["examples"])


def test_html_refusals_are_one_line_and_exit_2(repo, synth_root):
    run = cli("generate", str(synth_root / "clean-chatml"), "--fragment-test", "--html", "page.html")
    assert run.code == 2 and "--html draws one generation; drop --fragment-test" in run.stderr
    (repo / "a-folder").mkdir()
    run = cli("check", "models/clean", "--html", "a-folder")
    assert run.code == 2 and "a-folder: cannot write: not a regular file" in run.stderr and "Traceback" not in run.stderr
