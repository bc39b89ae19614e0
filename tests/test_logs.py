"""`stopdoctor logs`: every logged shape read per line, bad lines counted, the problems found on
realistic answers (precision first), the SD7xx checks, the CLI contract, and a log written by a
real `transformers serve` with half the requests on a broken stop config (slow)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from stopdoctor.api import logs_findings
from stopdoctor.logs.query import LogsSettings, analyze_logs, diagnose_text
from stopdoctor.logs.vocabulary import builtin_vocabulary, model_vocabulary

from .helpers import cli

pytest.importorskip("duckdb")

RUNAWAY = "The capital of France is Paris.\nsystem\n\nuser\nWhat is the capital of Germany?"


def chat(content, finish="stop", model="m", **choice):
    return {"object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish, **choice}]}


# One line per shape; the expected (shape, finish) per line number.
SHAPES = [
    ({"request": {"model": "m", "max_tokens": 64, "messages": []}, "response": chat("Paris.", stop_reason=2)},
     "openai-chat", "stop"),
    ({"id": "cmpl-1", "model": "m", "choices": [{"index": 0, "text": "Paris", "finish_reason": "length"}]},
     "openai-completions", "length"),
    ({"custom_id": "r1", "response": {"status_code": 200, "body": chat("Paris.", "length")}}, "openai-chat", "length"),
    ({"model": "llama3", "message": {"role": "assistant", "content": "Paris."}, "done": True, "done_reason": "stop"},
     "ollama", "stop"),
    ({"model": "llama3", "response": "The capital is", "done": True, "done_reason": "length"}, "ollama", "length"),
    ({"generated_text": "Paris.", "details": {"finish_reason": "eos_token", "generated_tokens": 3}}, "tgi", "stop"),
    ({"content": "Paris", "stop_type": "limit", "stopping_word": ""}, "llama.cpp", "length"),
    ({"content": "Paris.", "stopped_eos": False, "stopped_word": True, "stopped_limit": False, "stopping_word": "\n\n"},
     "llama.cpp", "stop"),
    ({"request": {"model": "m", "max_tokens": 64}, "response": chat("Paris.", matched_stop="###")}, "openai-chat", "stop"),
    ({"request": {"model": "m", "max_tokens": 64}, "response": chat(None, "tool_calls")}, "openai-chat", "tool_calls"),
]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


# --------------------------------------------------------------------------------------------
# Reading: shapes, bad lines, formats
# --------------------------------------------------------------------------------------------


def test_every_shape_is_read_and_bad_lines_are_counted_not_fatal(tmp_path):
    lines = [s for s, _, _ in SHAPES]
    lines[3:3] = ["{not json", "", '["a list"]', '{"some": "other log"}']
    path = write_jsonl(tmp_path / "mixed.jsonl", lines)
    report = analyze_logs([str(path)])
    assert (report.lines, report.responses, report.bad_lines, report.blank, report.unrecognised) == (14, 10, 1, 1, 2)
    assert report.bad_examples == ((str(path), 4),)
    expected_shapes: dict = {}
    for _, shape, _ in SHAPES:
        expected_shapes[shape] = expected_shapes.get(shape, 0) + 1
    assert report.shapes == expected_shapes
    assert report.finish == {"stop": 5, "length": 4, "tool_calls": 1}
    assert report.finish_raw["eos_token"] == 1 and report.finish_raw["limit"] == 1
    # vLLM's stop id, SGLang's matched stop string, llama.cpp's stopping word
    assert report.stop_reasons == {"id 2": 1, "'###'": 1, "'\\n\\n'": 1, "''": 1}
    assert report.by_max_tokens["64"] == {"stop": 2, "tool_calls": 1}
    assert report.by_model["llama3"] == {"stop": 1, "length": 1}
    # line numbers are physical lines (the bad and blank lines count)
    cut_lines = [e.line for e in report.problems["budget-truncated"].examples]
    assert cut_lines == [2, 3, 9, 11]
    assert report.length_share == pytest.approx(0.4)


def test_every_choice_of_an_n_above_1_response_is_read(tmp_path):
    """Each choice of an n > 1 response is an answer of its own; the report says how many were."""
    two = chat("Paris.")
    two["choices"].append({"index": 1, "message": {"role": "assistant", "content": "Par"}, "finish_reason": "length"})
    lines = [two, {"custom_id": "r", "response": {"body": two}}, {"response": two}, chat("One."), SHAPES[1][0],
             {"choices": [1, 2]}]
    report = analyze_logs([str(write_jsonl(tmp_path / "n.jsonl", lines))])
    assert report.responses == 8 and report.multi_choice == 6 and report.unrecognised == 1
    assert report.finish == {"stop": 4, "length": 4}
    assert [(e.line, e.finish_reason) for e in report.problems["budget-truncated"].examples] == [
        (1, "length"), (2, "length"), (3, "length"), (5, "length")]
    run = cli("logs", str(tmp_path / "n.jsonl"))
    assert "6 answers are choices of n > 1 responses (each choice is counted)" in run.stdout
    assert json.loads(cli("logs", str(tmp_path / "n.jsonl"), "--json").stdout)["lines"]["multi_choice"] == 6
    single = analyze_logs([str(write_jsonl(tmp_path / "one.jsonl", [row for row, _, _ in SHAPES]))])
    assert single.multi_choice == 0


def test_gzip_and_parquet_give_the_same_report(tmp_path):
    import duckdb

    lines = [s for s, _, _ in SHAPES] + [chat(RUNAWAY, "length")]
    plain = write_jsonl(tmp_path / "r.jsonl", lines)
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    parquet = tmp_path / "r.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT line FROM read_csv('{plain}', columns={{'line': 'VARCHAR'}}, delim='\x01', quote='', "
                f"escape='', header=false, auto_detect=false)) TO '{parquet}' (FORMAT parquet)")
    one = write_jsonl(tmp_path / "one.jsonl", [chat("Paris", "length", model="pq")])
    structured = tmp_path / "s.parquet"  # a table whose columns are the response's fields
    con.execute(f"COPY (SELECT * FROM read_json('{one}')) TO '{structured}' (FORMAT parquet)")
    reports = [analyze_logs([str(p)]) for p in (plain, gz, parquet)]
    for report in reports:
        assert report.finish == reports[0].finish and report.shapes == reports[0].shapes
        assert report.flagged["hallucinated-turn"][0][1] == len(lines)
    assert analyze_logs([str(structured)]).by_model == {"pq": {"length": 1}}


def test_progress_is_reported_per_file_and_ends_at_100(tmp_path):
    first = write_jsonl(tmp_path / "a.jsonl", [chat("Fine.")] * 50)
    second = write_jsonl(tmp_path / "b.jsonl", [chat("Cut in the", "length")] * 50)
    seen: list = []
    report = analyze_logs([str(first), str(second)], on_progress=lambda path, done: seen.append((path, done)))
    assert report.finish == {"stop": 50, "length": 50}
    assert [p for p, done in seen if done == 100.0] == [str(first), str(second)]
    assert report.problems["budget-truncated"].examples[0].file == str(second)


def test_field_overrides_read_a_custom_log(tmp_path):
    path = write_jsonl(tmp_path / "custom.jsonl", [
        {"out": {"txt": RUNAWAY, "why": "MAX_TOKENS"}, "meta": {"llm": "ours-7b", "budget": 32}},
        {"out": {"txt": "Fine.", "why": "STOP"}, "meta": {"llm": "ours-7b", "budget": 32}},
    ])
    settings = LogsSettings(overrides={"text": "$.out.txt", "finish_reason": "$.out.why", "model": "$.meta.llm",
                                       "max_tokens": "$.meta.budget"})
    report = analyze_logs([str(path)], settings=settings)
    assert report.shapes == {"custom": 2}
    assert report.finish == {"length": 1, "stop": 1}  # spellings are normalised case-insensitively
    assert report.by_max_tokens == {"32": {"length": 1, "stop": 1}}
    assert report.flagged["hallucinated-turn"] == ((str(path), 1),)


# --------------------------------------------------------------------------------------------
# Precision: realistic answers are not turns; real runaways are
# --------------------------------------------------------------------------------------------

ORDINARY = {
    "transcript": "Here is an example dialogue for training:\n\nUser: My order hasn't arrived.\n"
                  "Agent: I'm sorry, let me check the tracking number.\nUser: Thanks!",
    "code-block-label": "Use a template string:\n\n```python\nprompt = '''\nUser: hi\nAssistant: hello\n'''\n```\n",
    "code-block-chatml": "ChatML looks like this:\n\n```\n<|im_start|>system\nYou are helpful.<|im_end|>\n"
                         "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n```\nEach turn ends with `<|im_end|>`.",
    "inline-chatml": "Each message starts with `<|im_start|>user` or `<|im_start|>assistant` and ends with "
                     "`<|im_end|>`; then the next turn begins.",
    "inline-llama3": "Llama 3 opens a user turn with `<|start_header_id|>user<|end_header_id|>` and two newlines.",
    "table": "| field | value |\n|---|---|\n| user | alice |\n| system | linux |",
    "prose": "The user should restart the system.\nThe system will then reboot.",
    "bullet-list": "The three roles are:\n- user\n- system\n- assistant",
    "bare-list": "Default accounts:\nroot\nuser\nguest",
    "sql-block": "```sql\nSELECT user\nFROM accounts;\n```",
    "ends-with-end-of-turn": "The capital of France is Paris.<|im_end|>",
    "html-strikethrough": "Use <s>old</s> for strikethrough text, then continue the paragraph.",
    "human-label-inline": "The old Human: / Assistant: format is still used by some datasets.",
}
RUNAWAYS = {
    "chatml-stripped": (RUNAWAY, "role word on its own line", None),
    "chatml-raw": ("Paris.<|im_end|>\n<|im_start|>user\nWhat about Germany?<|im_end|>", "template header", "<|im_end|>"),
    "llama3-raw": ("Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd Germany?", "template header", "<|eot_id|>"),
    "gemma-raw": ("Paris.<end_of_turn>\n<start_of_turn>user\nAnd Germany?", "template header", "<end_of_turn>"),
    "starts-with-turn": ("user\nAnd what about Germany?", "role word on its own line", None),
}


@pytest.mark.parametrize("name", sorted(ORDINARY))
def test_ordinary_answers_are_not_turns(name):
    found = diagnose_text(ORDINARY[name], "stop", builtin_vocabulary())
    assert found.hallucinated_turn is None and found.should_have_stopped is None


@pytest.mark.parametrize("name", sorted(RUNAWAYS))
def test_runaways_are_found(name):
    text, source, ender = RUNAWAYS[name]
    found = diagnose_text(text, "length", builtin_vocabulary())
    assert found.hallucinated_turn is not None and found.hallucinated_turn.role == "user"
    assert found.hallucinated_turn.source == source
    assert (found.should_have_stopped.text if found.should_have_stopped else None) == ender


def test_an_end_of_turn_followed_by_more_text_is_its_own_problem(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [chat("Paris.<|im_end|>\nBerlin is the capital of Germany."),
                                              chat("Paris.<|im_end|>")])
    report = analyze_logs([str(path)])
    assert report.flagged["ran-past-end-of-turn"] == ((str(path), 1),)
    assert report.problems["hallucinated-turn"].count == 0


def test_the_prefilter_keeps_every_answer_a_turn_may_be_in(tmp_path):
    """Every text above goes through DuckDB: the SQL prefilter must never drop a runaway."""
    texts = [t for t, _, _ in RUNAWAYS.values()] + list(ORDINARY.values())
    path = write_jsonl(tmp_path / "r.jsonl", [chat(t, "length") for t in texts])
    report = analyze_logs([str(path)])
    assert [line for _, line in report.flagged["hallucinated-turn"]] == list(range(1, len(RUNAWAYS) + 1))


def test_model_template_decides_what_a_header_is(synth_root, tmp_path):
    llama3 = model_vocabulary(str(synth_root / "clean-llama3"))
    path = write_jsonl(tmp_path / "r.jsonl", [
        chat("Paris.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnd Germany?", "length"),
        chat("Paris. In ChatML a turn opens with <|im_start|>user and closes with <|im_end|> to end it.", "stop"),
    ])
    report = analyze_logs([str(path)], llama3)
    assert report.vocabulary == str(synth_root / "clean-llama3")
    assert report.flagged["hallucinated-turn"] == ((str(path), 1),)
    assert report.flagged["ran-past-end-of-turn"] == ((str(path), 1),)
    # without --model the ChatML mention reads as a leaked end-of-turn (it is followed by text)
    assert analyze_logs([str(path)]).flagged["ran-past-end-of-turn"] == ((str(path), 1), (str(path), 2))


def test_mid_sentence_only_under_length(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [
        chat("The Roman Empire began with the founding of", "length"),
        chat("It ended in 476.", "length"),
        chat("Here is the code:\n```python\nprint(1)\n```", "length"),
        chat("no punctuation but stopped", "stop"),
    ])
    report = analyze_logs([str(path)])
    assert report.problems["budget-truncated"].count == 3
    assert [e.line for e in report.problems["mid-sentence"].examples] == [1]


# --------------------------------------------------------------------------------------------
# Checks SD701-SD703: positive and negative
# --------------------------------------------------------------------------------------------


def _codes(path: Path, settings: LogsSettings = LogsSettings()) -> list[str]:
    return [f.code for f in logs_findings(analyze_logs([str(path)], settings=settings))]


def test_sd601_budget_truncation_rate_threshold(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [chat("Cut in the", "length")] + [chat("Fine.")] * 9)
    assert _codes(path) == ["SD701"]  # 10% > 5%
    assert _codes(path, LogsSettings(max_length_share=0.10)) == []


def test_sd602_and_sd603_positive_and_negative(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [chat("Paris.<|im_end|>\n<|im_start|>user\nAnd Germany?")] + [chat("Fine.")] * 99)
    findings = logs_findings(analyze_logs([str(bad)]))
    assert [f.code for f in findings] == ["SD702", "SD703"]
    assert str(findings[0].location) == f"{bad}:1" and findings[0].evidence["count"] == 1
    assert _codes(bad, LogsSettings(max_turn_share=0.02)) == ["SD703"]
    good = write_jsonl(tmp_path / "good.jsonl", [chat(t) for t in ORDINARY.values()])
    assert _codes(good) == []


def test_model_checks_never_see_logs(synth_root):
    from stopdoctor.api import inspect_model

    assert not [f for f in inspect_model(str(synth_root / "clean-chatml")).findings if f.code.startswith("SD7")]


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def test_cli_json_contract_and_exit_codes(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [chat(RUNAWAY, "length"), chat("Cut in the", "length"), "oops", chat("Fine.")])
    run = cli("logs", str(path), "--json")
    assert run.code == 1, run.stderr  # SD702 is an error
    doc = run.json()
    assert doc["schema_version"] == 1 and doc["schema"] == "stopdoctor.logs/1" and doc["tool"]["name"] == "stopdoctor"
    assert doc["lines"]["bad"] == 1 and doc["lines"]["bad_examples"] == [{"file": str(path), "line": 3}]
    assert doc["finish_reason"] == {"length": 2, "stop": 1}
    assert doc["problems"]["hallucinated-turn"]["lines"] == [{"file": str(path), "line": 1}]
    assert doc["problems"]["mid-sentence"]["examples"][0]["line"] == 2
    assert [f["code"] for f in doc["findings"]] == ["SD702", "SD701"]
    human = cli("logs", str(path), "--no-color")
    assert human.code == 1 and "SD702 hallucinated-turns-in-logs" in human.stdout
    assert f"{path}:1" in human.stdout and "role word on its own line" in human.stdout
    only_cut = write_jsonl(tmp_path / "cut.jsonl", [chat("Cut in the", "length"), chat("Fine.")])
    assert cli("logs", str(only_cut)).code == 0  # SD701 is a warning
    assert cli("logs", str(only_cut), "--fail-on", "warning").code == 1


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [chat("Fine.")])
    cases = {
        (str(tmp_path / "missing.jsonl"),): "no such file",
        (str(path), "--field", "finish=$.x"): "--field 'finish=$.x'",
        (str(path), "--field", "text=x"): "--field 'text=x'",
        (str(path), "--max-length-share", "5"): "--max-length-share must be a share",
    }
    for args, message in cases.items():
        run = cli("logs", *args)
        assert run.code == 2, (args, run.stderr)
        assert message in run.stderr.splitlines()[0], (args, run.stderr)
    binary = tmp_path / "b.jsonl.gz"
    binary.write_bytes(b"\x1f\x8b not really gzip")
    run = cli("logs", str(binary))
    assert run.code == 2 and "cannot read it" in run.stderr.splitlines()[0]
    stray = tmp_path / "cr.jsonl"  # a CR that ends no line among LF line ends: DuckDB cannot split it
    stray.write_bytes(b'{"a": 1}\r{"b": 2}\n' + path.read_bytes())
    run = cli("logs", str(stray))
    assert run.code == 2 and "a carriage return (\\r) stands alone" in run.stderr.splitlines()[0], run.stderr
    assert "tr -d" in run.stderr


def test_cli_model_and_show_sql(synth_root, tmp_path):
    import duckdb

    path = write_jsonl(tmp_path / "r.jsonl", [chat("Paris.<|im_end|>\n<|im_start|>user\nAnd Germany?", "length"),
                                              chat("Fine.")])
    run = cli("logs", str(path), "--model", str(synth_root / "clean-chatml"), "--json")
    assert run.code == 1 and run.json()["turn_headers_from"] == str(synth_root / "clean-chatml")
    assert run.json()["problems"]["hallucinated-turn"]["lines"] == [{"file": str(path), "line": 1}]
    stream = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "shapes" / "openai-stream.jsonl"
    sql = cli("logs", str(path), str(stream), "--show-sql")
    assert sql.code == 0 and f"-- {path}\n" in sql.stdout and f"-- {stream}\n" in sql.stdout
    # The whole script runs as printed and ends with the finish reasons the report counts, the
    # streamed chunks grouped into their answers.
    counts = dict(duckdb.connect().execute(sql.stdout).fetchall())
    assert counts == analyze_logs([str(path), str(stream)]).finish
    assert sum(counts.values()) == 2 + analyze_logs([str(stream)]).streams


def test_importing_the_cli_does_not_import_duckdb():
    code = "import sys, stopdoctor.cli; assert 'duckdb' not in sys.modules, 'duckdb imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


# --------------------------------------------------------------------------------------------
# A real server: half the requests with a broken stop config
# --------------------------------------------------------------------------------------------

from .test_generate import served_broken  # noqa: E402,F401  (the one `transformers serve` fixture)

PROMPTS = ["What is the capital of France?", "What is the capital of Italy?", "What is the capital of Spain?",
           "What is the capital of Japan?"]


@pytest.mark.slow
@pytest.mark.needs_torch
def test_a_real_server_log_shows_exactly_the_broken_requests(served_broken, tmp_path):  # noqa: F811
    """The server runs the broken-eos SmolLM2 (stops only on <|endoftext|>); the good requests
    carry a generation_config that stops on <|im_end|> too, as a fixed deployment would."""
    with urllib.request.urlopen(served_broken + "/v1/models", timeout=30) as response:
        model = json.loads(response.read())["data"][0]["id"]  # the server is pinned to the folder's path
    lines, broken = [], []
    for i, question in enumerate(q for q in PROMPTS for _ in (0, 1)):
        body = {"model": model, "messages": [{"role": "user", "content": question}],
                "max_tokens": 40, "temperature": 0}
        if i % 4 in (1, 2):  # each question once broken, once fixed; broken lines 1, 4, 5, 8
            body["generation_config"] = json.dumps({"eos_token_id": [0, 2], "do_sample": False})
        else:
            broken.append(len(lines) + 1)
        request = urllib.request.Request(served_broken + "/v1/chat/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            lines.append(json.dumps({"request": body, "response": json.loads(response.read())}))
    log = tmp_path / "serve.jsonl"
    log.write_text("\n".join(lines) + "\n")
    run = cli("logs", str(log), "--json")
    doc = run.json()
    text = "\n".join(f"{n}: {json.loads(l)['response']['choices'][0]}" for n, l in enumerate(lines, 1))
    assert doc["finish_reason"] == {"length": 4, "stop": 4}, text
    assert doc["length_share"] == 0.5
    assert [e["line"] for e in doc["problems"]["budget-truncated"]["examples"]] == broken, text
    assert [e["line"] for e in doc["problems"]["hallucinated-turn"]["lines"]] == broken, text
    assert doc["by_max_tokens"] == {"40": {"length": 4, "stop": 4}}
    assert run.code == 1 and [f["code"] for f in doc["findings"]] == ["SD702", "SD701"]


def test_duckdb_never_draws_its_progress_bar_on_stdout(capfd):
    # stdout carries the JSON report: DuckDB's own bar (drawn for a query past 2 s) broke
    # `stopdoctor logs --format json big.jsonl > report.json`.
    from stopdoctor.logs.query import connect

    con, _ = connect()
    con.execute("SET enable_progress_bar = true")
    con.execute("SET progress_bar_time = 0")
    con.execute("SELECT count(*) FROM range(400000000) t(i) WHERE i % 7 = 3").fetchall()
    con.close()
    assert "%" not in capfd.readouterr().out


def test_show_sql_on_bad_input_is_one_line_and_reads_a_path_literally(tmp_path):
    import duckdb

    good = json.dumps(chat("Paris.")) + "\n"
    not_utf8 = tmp_path / "n.jsonl"
    not_utf8.write_bytes(good.encode() + b'{"a": "\xff\xfe"}\n')
    broken_gz = tmp_path / "b.jsonl.gz"
    broken_gz.write_bytes(b"\x1f\x8b not really gzip")
    not_parquet = tmp_path / "c.parquet"
    not_parquet.write_text("not parquet\n")
    for path, message in [(not_utf8, "not UTF-8"), (broken_gz, "cannot read it"), (not_parquet, "cannot read it")]:
        run = cli("logs", str(path), "--show-sql")
        assert run.code == 2 and message in run.stderr.splitlines()[0], (path, run.stderr)
        assert run.stdout == ""
    # A file named like a glob is read as named, not as the file the glob matches.
    folder = tmp_path / "g"
    folder.mkdir()
    named = write_jsonl(folder / "x[1].jsonl", [chat("Paris.", "length")])
    write_jsonl(folder / "x1.jsonl", [chat("Paris."), chat("Rome.")])
    sql = cli("logs", str(named), "--show-sql")
    assert sql.code == 0, sql.stderr
    assert dict(duckdb.connect().execute(sql.stdout).fetchall()) == {"length": 1}


def test_running_out_of_memory_says_to_raise_the_limit(tmp_path, monkeypatch):
    # A readable file in too little DuckDB memory: the message names the setting to raise, not
    # a file that cannot be read as JSONL.
    text = "Rome was founded on the Palatine Hill. " * 2000
    line = json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
                       "responseId": "r"})
    path = tmp_path / "big.jsonl"
    path.write_text((line + "\n") * 400)
    monkeypatch.setenv("STOPDOCTOR_LOGS_MEMORY", "4MB")
    run = cli("logs", str(path))
    assert run.code == 2, run.stderr
    assert "out of its memory limit" in run.stderr.splitlines()[0] and "STOPDOCTOR_LOGS_MEMORY" in run.stderr
