"""`stopdoctor logs` on a real fleet's shapes: each provider and telemetry shape read with exact
normalised counts (fixtures written from each API's spec, fixtures/logs/shapes/), the three
problems of finish reasons that lie counted exactly on fixtures with known truth and silent on
honest answers (fixtures/logs/lies.jsonl), input with no response exits 2, and the pictures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from stopdoctor.logs.query import analyze_logs
from stopdoctor.core.errors import InputError

from .helpers import cli

pytest.importorskip("duckdb")

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ROOT / "fixtures" / "logs" / "shapes"
LIES = ROOT / "fixtures" / "logs" / "lies.jsonl"

# file -> (lines, answers, bad, blank, unrecognised, answers from n > 1, shapes, normalised, as logged)
EXPECTED = {
    "anthropic.jsonl": (8, 8, 0, 0, 0, 0, {"anthropic": 8},
                        {"stop": 4, "length": 2, "content_filter": 1, "tool_calls": 1},
                        {"end_turn": 2, "stop_sequence": 1, "pause_turn": 1, "max_tokens": 1,
                         "model_context_window_exceeded": 1, "refusal": 1, "tool_use": 1}),
    # streamed: 31 events (each after its `event:` line, counted blank) in 4 messages
    "anthropic-stream.jsonl": (62, 4, 0, 31, 0, 0, {"anthropic-stream": 4},
                               {"stop": 2, "length": 1, "tool_calls": 1},
                               {"end_turn": 1, "stop_sequence": 1, "max_tokens": 1, "tool_use": 1}),
    "bedrock.jsonl": (7, 7, 0, 0, 0, 0, {"bedrock-converse": 7},
                      {"stop": 2, "length": 2, "tool_calls": 1, "content_filter": 2},
                      {"end_turn": 1, "stop_sequence": 1, "max_tokens": 2, "tool_use": 1, "guardrail_intervened": 1,
                       "content_filtered": 1}),
    "gemini.jsonl": (9, 10, 0, 0, 0, 2, {"gemini": 10},
                     {"stop": 2, "length": 2, "tool_calls": 1, "content_filter": 3, "error": 2},
                     {"STOP": 3, "MAX_TOKENS": 2, "SAFETY": 1, "RECITATION": 1, "PROHIBITED_CONTENT": 1,
                      "MALFORMED_FUNCTION_CALL": 1, "OTHER": 1}),
    # streamed: 7 chunks of 3 responses grouped by responseId (interleaved), and one whole response
    "gemini-stream.jsonl": (8, 4, 0, 0, 0, 0, {"gemini-stream": 3, "gemini": 1},
                            {"stop": 2, "length": 1, "tool_calls": 1}, {"STOP": 3, "MAX_TOKENS": 1}),
    "openai-responses.jsonl": (6, 6, 0, 0, 0, 0, {"openai-responses": 6},
                               {"stop": 2, "length": 1, "tool_calls": 1, "content_filter": 1, "error": 1},
                               {"completed": 3, "max_output_tokens": 1, "content_filter": 1, "failed": 1}),
    "openai-stream.jsonl": (13, 4, 0, 1, 0, 2, {"openai-chat-stream": 4},
                            {"stop": 2, "length": 1, "tool_calls": 1}, {"stop": 2, "length": 1, "tool_calls": 1}),
    "otel-otlp.jsonl": (8, 9, 0, 0, 1, 3, {"otlp": 9},
                        {"stop": 3, "length": 2, "tool_calls": 1, "content_filter": 1, "error": 2},
                        {"stop": 3, "length": 2, "tool_call": 1, "content_filter": 1, "error": 1, "timeout": 1}),
    "otel-flat.jsonl": (4, 5, 0, 0, 0, 2, {"otel": 5}, {"stop": 3, "length": 1, "tool_calls": 1},
                        {"stop": 3, "length": 1, "tool_call": 1}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_shape_is_read_with_exact_normalised_counts(name):
    lines, answers, bad, blank, unrecognised, multi, shapes, finish, native = EXPECTED[name]
    report = analyze_logs([str(SHAPES / name)])
    assert (report.lines, report.responses, report.bad_lines, report.blank, report.unrecognised,
            report.multi_choice) == (lines, answers, bad, blank, unrecognised, multi)
    assert report.shapes == shapes
    assert report.finish == finish
    assert report.finish_raw == native
    # every provider value sits under the normalised reason it counts for
    assert {k: sum(v.values()) for k, v in report.finish_native.items()} == finish


def test_the_json_counts_are_normalised_with_the_providers_value_beside():
    doc = cli("logs", str(SHAPES / "gemini.jsonl"), "--json").json()
    assert doc["finish_reason"] == EXPECTED["gemini.jsonl"][7]
    assert doc["finish_reason_native"]["content_filter"] == {"SAFETY": 1, "RECITATION": 1, "PROHIBITED_CONTENT": 1}
    example = doc["problems"]["budget-truncated"]["examples"][0]
    assert (example["finish_reason"], example["native_finish_reason"]) == ("length", "MAX_TOKENS")


def test_a_stream_is_reassembled_before_it_is_diagnosed(tmp_path):
    pieces = ["Paris.", "<|im_end|>\n<|im_start|>", "user\nAnd Germany?"]
    chunks = [{"id": "s1", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    chunks.append({"id": "s1", "object": "chat.completion.chunk", "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in chunks))
    report = analyze_logs([str(path)])
    assert (report.responses, report.streams, report.chunks) == (1, 1, 4)
    assert report.flagged["hallucinated-turn"] == ((str(path), 1),)
    assert report.problems["mid-sentence"].count == 0  # "And Germany?" ends a sentence: the whole text was read


def test_an_anthropic_stream_is_one_answer_per_message(tmp_path):
    # Only message_start names its message: the events after it are that message's, until the next.
    report = analyze_logs([str(SHAPES / "anthropic-stream.jsonl")])
    assert (report.streams, report.chunks) == (4, 31)
    tails = [e.excerpt for e in report.problems["budget-truncated"].examples]
    assert tails == ["Let me think about the question step by step. First, the user asks"]
    assert report.stop_reasons == {repr("\n\nHuman:"): 1}
    # a capture that starts mid-message: its first events are one answer of their own
    lines = (SHAPES / "anthropic-stream.jsonl").read_text().splitlines()
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines[8:]) + "\n")
    cut = analyze_logs([str(path)])
    assert (cut.responses, cut.finish) == (4, {"stop": 2, "length": 1, "tool_calls": 1})


def test_a_gemini_stream_is_one_answer_per_response_id():
    # The chunks of three streams interleave; a function call in an earlier chunk than the
    # finishReason still makes the answer a tool call; the cut answer is the whole stream's text.
    report = analyze_logs([str(SHAPES / "gemini-stream.jsonl")])
    assert (report.streams, report.chunks) == (3, 7)
    assert [(e.line, e.excerpt) for e in report.problems["budget-truncated"].examples] == [
        (5, "The history of Rome begins with")]
    assert report.problems["mid-sentence"].count == 1


# fixtures/logs/lies.jsonl: lines 1-2 truncated at the budget yet reported finished, 5-6 loops
# reported `stop`, 9-11 budget consumed by reasoning; 14 vLLM's loop stop (finish_reason
# repetition), 15-16 loops without whitespace (`?!?!…`, CJK), 17 `stop` with no answer; 18 a tool
# call reported `stop` (a tool call), 19 CJK prose (honest), as is every other line.
LIE_LINES = {"truncated-but-reported-finished": [1, 2], "degenerate-repetition": [5, 6, 14, 15, 16],
             "reasoning-consumed-budget": [9, 10, 11], "empty-answer": [17]}


def test_finish_reasons_that_lie_are_counted_exactly_and_never_on_honest_answers():
    report = analyze_logs([str(LIES)])
    for key, lines in LIE_LINES.items():
        assert report.problems[key].count == len(lines), key
        assert [n for _, n in report.flagged[key]] == lines, key
    details = {k: [e.detail for e in report.problems[k].examples] for k in LIE_LINES}
    assert details["truncated-but-reported-finished"][0] == "64 output tokens = max_tokens 64"
    assert details["degenerate-repetition"][0].startswith("100% of its last word 4-grams repeat")
    assert details["degenerate-repetition"][2:] == [
        "finish_reason repetition: the engine stopped a loop",
        "99% of the character 8-grams of its last run without spaces repeat",
        "99% of the character 8-grams of its last run without spaces repeat"]
    assert details["empty-answer"] == ["finish_reason stop, no answer text"]
    assert report.finish_native["tool_calls"].get("stop") == 1  # line 18: `stop` with a tool call
    assert details["reasoning-consumed-budget"] == [
        "no answer after the reasoning, reasoning 100% of 512 output tokens", "reasoning 95% of 1,000 output tokens",
        "</think> 2 times"]


def test_the_shape_fixtures_hold_only_the_lies_they_were_written_with():
    flagged = {}
    for path in sorted(SHAPES.glob("*.jsonl")):
        report = analyze_logs([str(path)])
        for key in LIE_LINES:
            if report.problems[key].count:
                flagged[(path.name, key)] = [n for _, n in report.flagged[key]]
    assert flagged == {("anthropic-stream.jsonl", "reasoning-consumed-budget"): [18],
                       ("bedrock.jsonl", "reasoning-consumed-budget"): [7],
                       ("gemini.jsonl", "reasoning-consumed-budget"): [2],
                       ("openai-responses.jsonl", "reasoning-consumed-budget"): [2],
                       ("openai-responses.jsonl", "truncated-but-reported-finished"): [6],
                       ("otel-otlp.jsonl", "truncated-but-reported-finished"): [3]}


def test_the_new_problems_are_findings():
    run = cli("logs", str(LIES), "--json")
    codes = [f["code"] for f in run.json()["findings"]]
    assert {"SD704", "SD705", "SD706", "SD707"} <= set(codes)


def test_a_streamed_tool_call_reported_stop_is_a_tool_call_and_one_cut_stays_length(tmp_path):
    def chunks(stream_id, finish):
        return [{"id": stream_id, "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": {
                    "role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                         "function": {"name": "get_weather", "arguments": ""}}]},
                    "finish_reason": None}]},
                {"id": stream_id, "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
    path = tmp_path / "stream.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in chunks("a", "stop") + chunks("b", "length")))
    report = analyze_logs([str(path)])
    assert report.finish == {"length": 1, "tool_calls": 1} and report.problems["empty-answer"].count == 0


@pytest.mark.parametrize("lines", [
    ['{"event": "login", "user": "alice"}', '{"event": "logout"}'],  # JSON, but no response in it
    ["not json", "{broken"],  # every line bad
    [],  # empty
])
def test_input_with_no_response_exits_2_with_one_line(tmp_path, lines):
    path = tmp_path / "x.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    with pytest.raises(InputError, match="no response recognised"):
        analyze_logs([str(path)])
    run = cli("logs", str(path))
    assert run.code == 2 and run.stderr.splitlines()[0].startswith("stopdoctor: error: no response recognised in")
    assert run.stdout == ""


def test_charts_figures_from_tokens_and_timestamps():
    report = analyze_logs([str(LIES)])
    histogram = {(h.model, h.max_tokens): h for h in report.charts.histograms}
    assert histogram[("qwen3-8b", 64)].at_budget == 1 and histogram[("qwen3-8b", 64)].total == 2
    assert sum(h.total for h in report.charts.histograms) + report.charts.without_tokens <= report.responses
    otlp = analyze_logs([str(SHAPES / "otel-otlp.jsonl")])
    assert otlp.charts.timeline is not None and otlp.charts.timeline.bucket == "5 minutes"
    assert sum(sum(c.values()) for _, c in otlp.charts.timeline.rows) == 9


def test_absurd_output_tokens_fall_in_the_last_or_no_bin_not_a_crash(tmp_path):
    # 10^9 output tokens against max_tokens 1 is 2*10^10 bins: past what the bin's integer holds.
    def line(tokens):
        return json.dumps({"request": {"model": "m", "max_tokens": 1, "messages": []},
                           "response": {"object": "chat.completion", "model": "m", "usage": {"completion_tokens": tokens},
                                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi."},
                                                     "finish_reason": "stop"}]}})
    path = tmp_path / "absurd.jsonl"
    path.write_text(f"{line(10 ** 9)}\n{line(-10 ** 9)}\n{line(0)}\n")
    (histogram,) = analyze_logs([str(path)]).charts.histograms
    assert (histogram.bins[0], sum(histogram.bins), histogram.at_budget, histogram.total) == (1, 1, 1, 3)


# --------------------------------------------------------------------------------------------
# Pictures
# --------------------------------------------------------------------------------------------


def test_terminal_pictures_and_html_page(tmp_path):
    page = tmp_path / "report.html"
    run = cli("logs", str(LIES), "--html", str(page), "--no-color")
    assert "output tokens per model and max_tokens" in run.stdout
    assert "qwen3-8b @ 64" in run.stdout and "1 of 2 at the budget (50.0%)" in run.stdout
    text = page.read_text()
    markup = re.sub(r"(<script\b[^>]*>).*?</script>", r"\1", text, flags=re.S)  # the library is inlined, never fetched
    assert not re.search(r"<(script|link|img)\b[^>]*\b(src|href)=", markup)
    assert text.count('class="chart histogram"') == 6  # the six most common (model, max_tokens) pairs
    otlp_page = tmp_path / "otlp.html"
    cli("logs", str(SHAPES / "otel-otlp.jsonl"), "--html", str(otlp_page))
    assert 'class="chart timeline"' in otlp_page.read_text()


def _chromium() -> str | None:
    import shutil

    return next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if shutil.which(name)), None)


def _png_pixels(data: bytes) -> tuple[int, int, set[bytes]]:
    """Width, height and the distinct RGB(A) pixels of an 8-bit PNG, by the PNG spec (zlib only)."""
    import struct
    import zlib

    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, kind = 8, b"", 0, 0, 6
    while pos < len(data):
        length, name = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if name == b"IHDR":
            width, height, _, kind = struct.unpack(">IIBB", chunk[:10])
        elif name == b"IDAT":
            idat += chunk
        pos += 12 + length
    channels = {2: 3, 6: 4}[kind]
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind_byte, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b, c = previous[x], previous[x - channels] if x >= channels else 0
            if kind_byte == 1:
                line[x] = (line[x] + a) & 255
            elif kind_byte == 2:
                line[x] = (line[x] + b) & 255
            elif kind_byte == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif kind_byte == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        previous = line
    pixels = {row[i:i + 3] for row in rows[::4] for i in range(0, stride, channels * 4)}
    return width, height, pixels


@pytest.mark.slow
def test_the_html_report_renders_in_headless_chromium(tmp_path):
    """The page is opened by a real browser: the charts' SVG bars are in the rendered DOM, and a
    screenshot is not blank (the red of the at-budget bars is on it)."""
    from .browser import drawn_charts, open_page, screenshot

    browser = _chromium()
    if browser is None:
        pytest.skip("no Chromium: apt-get install -y chromium (the .ci/run script does)")
    page = tmp_path / "report.html"
    cli("logs", str(LIES), "--html", str(page))
    dom, _ = open_page(browser, page, tmp_path / "profile")
    assert dom.count('class="chart histogram"') == 6
    bars = sum(chart.bars for chart in drawn_charts(dom))
    assert bars >= 6 * 21, bars  # 20 bins and the at-budget bar per histogram, plus the length shares
    shot = tmp_path / "shot.png"
    screenshot(browser, page, shot, tmp_path / "profile", size="800,3000")  # the findings come first; the charts below them
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert (width, height) == (800, 3000)
    assert len(pixels) > 5, "blank screenshot"
    assert any(p[0] > 150 and p[1] < 80 and p[2] < 80 for p in pixels), "no red at-budget bar on the screenshot"


# --------------------------------------------------------------------------------------------
# The two-level read (a line's key group, then only the paths it can have)
# --------------------------------------------------------------------------------------------


_EVERY_PATH_ROWS: dict[str, list] = {}  # each file's every-path records, computed once for both samples


# groups from one line (most lines through the every-path branch) in the quick loop; the usual
# 20,000-line sample in the full suite (test_logs_oneparse checks the usual read quickly)
@pytest.mark.parametrize("sample", [1, pytest.param(20_000, marks=pytest.mark.slow)])
def test_the_two_level_read_gives_exactly_the_records_of_reading_every_path(sample):
    """Groups change the speed, never a record: on every fixture, the query reading only each
    line's group's paths gives the same rows as the query reading every path (with groups sampled
    from one line, the other lines go through the every-path branch)."""
    import duckdb

    from stopdoctor.logs.groups import sample_groups
    from stopdoctor.logs.records import normalise_sql, prepared_lines
    from stopdoctor.logs.sql import source_sql
    from stopdoctor.logs.vocabulary import builtin_vocabulary

    vocabulary = builtin_vocabulary()
    files = sorted(SHAPES.glob("*.jsonl")) + [LIES, ROOT / "fixtures" / "logs" / "responses.jsonl"]
    con = duckdb.connect()
    for path in files:
        source = source_sql(str(path))
        groups = sample_groups(con, source, prepared_lines, lines=sample)
        assert groups or (sample == 1 and path.read_text().startswith("event:"))  # an SSE capture's first line
        if str(path) not in _EVERY_PATH_ROWS:  # binding the 190 KB every-path query: ~0.4 s a file
            _EVERY_PATH_ROWS[str(path)] = con.execute(
                f"SELECT * FROM ({normalise_sql(source, vocabulary)}) ORDER BY ALL").fetchall()
        every = _EVERY_PATH_ROWS[str(path)]
        grouped = con.execute(f"SELECT * FROM ({normalise_sql(source, vocabulary, groups=groups)}) ORDER BY ALL").fetchall()
        assert grouped == every, path.name


# --------------------------------------------------------------------------------------------
# Review fixes (#21): Gemini responses sharing an id, function calls, error events, timestamps
# --------------------------------------------------------------------------------------------

ANSWER = ("Rome was founded, the legend says, by Romulus in 753 BC on the Palatine Hill. It grew from a "
          "small settlement of farmers and shepherds into a kingdom, then a republic governed by elected "
          "magistrates and a senate, and finally an empire that stretched from Britain to Egypt and lasted "
          "in the west until the deposition of its last emperor in 476 AD.")


def gemini(parts, finish=None, response_id="r-1", tokens=None, **extra):
    candidate = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    usage = {"promptTokenCount": 8}
    if tokens is not None:
        usage.update(candidatesTokenCount=tokens, totalTokenCount=8 + tokens)
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash",
            "responseId": response_id, **extra}


def test_complete_gemini_responses_sharing_an_id_are_answers_of_their_own(tmp_path):
    # A retried or re-logged response: the same complete response three times (each with its
    # finishReason) is three answers, never one stream whose texts are joined into a loop.
    whole = gemini([{"text": ANSWER}], "STOP", tokens=80)
    path = tmp_path / "same-id.jsonl"
    path.write_text((json.dumps(whole) + "\n") * 3)
    report = analyze_logs([str(path)])
    assert (report.responses, report.streams, report.chunks) == (3, 0, 0)
    assert report.shapes == {"gemini": 3} and report.finish == {"stop": 3}
    assert report.problems["degenerate-repetition"].count == 0
    # A stream (chunks without a finishReason, then the last chunk) and the same id logged again
    # whole after it: one stream and one answer.
    chunks = [gemini([{"text": "Rome was founded"}]), gemini([{"text": " in 753 BC."}], "STOP", tokens=7),
              gemini([{"text": "Rome was founded in 753 BC."}], "STOP", tokens=7)]
    path = tmp_path / "stream-then-whole.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in chunks))
    report = analyze_logs([str(path)])
    assert (report.responses, report.streams, report.chunks) == (2, 1, 2)
    assert report.shapes == {"gemini-stream": 1, "gemini": 1} and report.finish == {"stop": 2}


def test_a_gemini_function_call_is_a_tool_call_only_when_the_finish_is_stop(tmp_path):
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    request = {"generationConfig": {"maxOutputTokens": 32}}
    lines = [
        {"request": request, "response": gemini([call], "MAX_TOKENS", "r-1", tokens=32)},  # cut: length
        {"request": request, "response": gemini([call], "STOP", "r-2", tokens=12)},  # a tool call
        {"request": request, "response": gemini([call], "MALFORMED_FUNCTION_CALL", "r-3", tokens=12)},  # error
        # streamed: the call in a chunk, the budget hit in the last one
        gemini([call], None, "s-1"), gemini([{"text": "and"}], "MAX_TOKENS", "s-1", tokens=32),
    ]
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = analyze_logs([str(path)])
    assert report.finish == {"length": 2, "tool_calls": 1, "error": 1}
    assert report.problems["truncated-but-reported-finished"].count == 0


def test_an_anthropic_stream_error_event_is_the_streams_error_finish(tmp_path):
    events = [{"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                                                    "model": "claude-sonnet-4-5", "content": [], "stop_reason": None,
                                                    "usage": {"input_tokens": 10, "output_tokens": 1}}},
              {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
              {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Rome was"}},
              {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}]
    path = tmp_path / "error.jsonl"
    path.write_text("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n" for e in events))
    report = analyze_logs([str(path)])
    assert (report.responses, report.unrecognised, report.streams, report.chunks) == (1, 0, 1, 4)
    assert report.finish == {"error": 1} and report.finish_raw == {"overloaded_error": 1}


@pytest.mark.parametrize("stamp", [{"created": -100000000000}, {"timestamp": "50000-01-01T00:00:00"},
                                   {"created": 99999999999999999999}, {"timestamp": "0001-01-01T00:00:00"}])
def test_a_timestamp_outside_any_log_is_absent_not_a_crash(tmp_path, stamp):
    good = {"object": "chat.completion", "model": "m", "created": 1767225600,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}]}
    odd = {**{k: v for k, v in good.items() if k != "created"}, **stamp}
    path = tmp_path / "times.jsonl"
    path.write_text(json.dumps(odd) + "\n" + json.dumps(good) + "\n")
    report = analyze_logs([str(path)])
    assert report.responses == 2
    assert report.charts.timeline.rows == (("2026-01-01T00:00:00", {"stop": 1}),)
    run = cli("logs", str(path), "--json")
    assert run.code == 0, run.stderr
