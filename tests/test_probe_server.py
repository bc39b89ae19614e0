"""`stopdoctor probe-server` against the STAND-IN server of tests/standin_server.py: only the answer
shapes no real server on this machine produces (vLLM's, SGLang's and Ollama's identity routes, a
reasoning parser's split or its absence, and servers that lie or break). The real servers are in
tests/test_probe_server_real.py. No test here depends on how fast anything runs: hostile servers
are bounded by the number of requests the stand-in saw, with a short per-request bound."""

from __future__ import annotations

import pytest

from stopdoctor import api
from stopdoctor.actions.probe_server.battery import PROBE_NAMES, Settings, all_probes
from stopdoctor.actions.probe_server.http import Bounds
from tests.helpers import cli
from tests.standin_server import Behaviour, generate, standin_server

QUICK = Settings(Bounds(request_s=2.0), battery_s=120.0)


def _probe(behaviour: Behaviour, *names: str):
    with standin_server(behaviour) as url:
        return api.probe_server(url, only=names or None, settings=QUICK)


def test_the_probe_names_are_the_issue_s():
    assert PROBE_NAMES == ("server", "end-of-turn", "stop-string", "stop-held-back", "finish-reason",
                           "default-budget", "context", "stream-whole", "reasoning-split")
    assert tuple(p.name for p in all_probes()) == PROBE_NAMES


def test_the_standin_holds_back_stop_prefixes_and_flushes_them_at_the_budget():
    # The stand-in's own reference behaviour, which the stop-held-back pass below relies on.
    body = {"messages": [{"role": "user", "content": "Tell me a story about a dragon."}], "max_tokens": 5,
            "stop": ["dragon named Ember" , "time,\x1f"]}
    chunks, finish, count = generate(body, Behaviour())
    assert "".join(chunks) == "Once upon a time, a" and finish == "length" and count == 5
    assert any(c.startswith("time,") and len(c) > 5 for c in chunks)  # held, then sent with what followed


@pytest.mark.parametrize(("behaviour", "probe", "status", "said"), [
    # Stand-in shapes: vLLM names itself in /v1/models and /version.
    (Behaviour(engine="vllm"), "server", "pass", "vllm 0.33.0"),
    (Behaviour(engine="none"), "server", "warn", "does not name itself"),
    (Behaviour(engine="ollama"), "server", "pass", "ollama 0.33.1"),
    # A server that keeps the stop string in the content (what a server with no stop handling returns).
    (Behaviour(keep_stop=True), "stop-string", "fail", "is in the content"),
    (Behaviour(), "stop-string", "pass", "ended the answer"),
    # A correct hold-back (vLLM after #3574): no real server here flushes at the budget.
    (Behaviour(), "stop-held-back", "pass", "held back"),
    # A server that cuts every answer at max_tokens and says 'stop'.
    (Behaviour(lie_finish=True), "finish-reason", "fail", "says finish 'stop'"),
    (Behaviour(), "finish-reason", "pass", "says finish 'length'"),
    # vLLM's and SGLang's completions default: 16 tokens; the tables expect it and the probe says so.
    (Behaviour(default_budget=16), "default-budget", "warn", "16 tokens when the request names no budget"),
    # Ollama's shape: a prompt past num_ctx is cut silently and answered.
    (Behaviour(engine="ollama", context=512, cut_prompt=True), "context", "fail", "cut silently to 512 tokens"),
    (Behaviour(engine="ollama", context=512), "context", "pass", "is refused"),
    (Behaviour(engine="sglang"), "context", "skip", "does not say its context"),
    # A server that decodes each token on its own: a multi-byte character cut between chunks.
    (Behaviour(split_utf8=True), "stream-whole", "fail", "split-utf8"),
    (Behaviour(), "stream-whole", "pass", "equal the whole answers"),
    # vLLM's reasoning parser: the thought in reasoning_content; no parser: <think> in content.
    (Behaviour(think="split"), "reasoning-split", "pass", "reasoning_content"),
    (Behaviour(think="in-content"), "reasoning-split", "fail", "the thought stayed in content"),
    (Behaviour(), "reasoning-split", "skip", "did not think"),
    # A model that thinks past the end-of-turn budget: asked again with thinking off, it ends its turn.
    (Behaviour(think="in-content", long_thought=True), "end-of-turn", "pass", "ended with finish 'stop'"),
])
def test_each_probe_on_a_standin_shape(behaviour, probe, status, said):
    result = _probe(behaviour, probe)
    (only,) = result.probes
    assert (only.name, only.status) == (probe, status), only.summary
    assert said in only.summary
    spec = next(p for p in all_probes() if p.name == probe)
    assert only.requests <= spec.max_requests


def test_the_default_budget_names_what_the_tables_expect_of_vllm():
    result = _probe(Behaviour(default_budget=16), "default-budget")
    assert "stopdoctor's tables expect 16" in result.probes[0].summary
    assert result.probes[0].figures["completions"] == {"tokens": 16}


def test_a_server_that_cuts_at_max_tokens_and_says_stop_fails_finish_reason_with_exit_1():
    behaviour = Behaviour(lie_finish=True)
    with standin_server(behaviour) as url:
        run = cli("probe-server", url, "--json")
    doc = run.json()
    assert run.code == 1 and doc["exit_code"] == 1
    probes = {p["name"]: p for p in doc["probes"]}
    assert probes["finish-reason"]["status"] == "fail"
    evidence = probes["finish-reason"]["evidence"]
    assert any(e["request"].get("max_tokens") == 6 and e["finish_reason"] == "stop" for e in evidence)
    assert doc["schema"] == "stopdoctor.probe-server/1" and doc["server"]["engine"] == "vllm"
    assert doc["summary"]["fail"] >= 1 and doc["requests"] == len(behaviour.requests)


def test_an_honest_standin_passes_and_exits_0():
    with standin_server(Behaviour()) as url:
        run = cli("probe-server", url)
    assert run.code == 0, run.stdout
    assert "pass  end-of-turn" in run.stdout and "\n  fail" not in run.stdout and "0 fail" in run.stdout


def test_the_api_key_comes_from_the_named_variable():
    behaviour = Behaviour()
    with standin_server(behaviour) as url:
        run = cli("probe-server", url, "--api-key-env", "H8_PROBE_KEY", "--json", env={"H8_PROBE_KEY": "sekrit"})
        missing = cli("probe-server", url, "--api-key-env", "H8_UNSET_VARIABLE", env={"H8_UNSET_VARIABLE": ""})
    assert run.code == 0 and set(behaviour.authorizations) == {"Bearer sekrit"}
    assert "sekrit" not in run.stdout
    assert missing.code == 2 and "H8_UNSET_VARIABLE" in missing.stderr


@pytest.mark.parametrize("url", ["http://127.0.0.1:9", "ftp://example.com", "http://127.0.0.1:notaport", "nothing"])
def test_an_unreachable_server_or_a_bad_url_is_one_line_and_exit_2(url):
    run = cli("probe-server", url)
    assert run.code == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("stopdoctor: error")]
    assert len(errors) == 1 and "Traceback" not in run.stderr


def test_sarif_is_refused_with_exit_2():
    run = cli("probe-server", "http://127.0.0.1:9", "--format", "sarif")
    assert run.code == 2 and "human or json" in run.stderr


def test_a_redirect_is_one_line_never_followed():
    behaviour = Behaviour(hostile="redirect")
    with standin_server(behaviour) as url:
        run = cli("probe-server", url)
    assert run.code == 2 and "redirected (HTTP 302" in run.stderr and behaviour.requests == ["GET /v1/models"]


@pytest.mark.parametrize(("hostile", "said"), [
    ("500", "HTTP 500"),
    ("bad-utf8", "not valid UTF-8"),
    ("endless-stream", "did not finish answering within 2 s"),
    ("endless-chunk", "did not finish answering within 2 s"),
])
def test_a_broken_server_gets_one_line_per_probe_and_a_bounded_number_of_requests(hostile, said):
    behaviour = Behaviour(hostile=hostile)
    result = _probe(behaviour)
    assert len(result.probes) == len(PROBE_NAMES)
    assert any(said in p.summary and p.status == "fail" for p in result.probes)
    assert all("\n" not in p.summary for p in result.probes)
    # After two probes meet the broken server, the rest are skipped without a request.
    assert len(behaviour.requests) <= 10, behaviour.requests
    assert result.probes[-1].status == "skip"
    report = api.probe_server_report(result)
    assert report.exit_code() == 1


def test_the_json_schema_fields():
    with standin_server(Behaviour()) as url:
        doc = cli("probe-server", url, "--json").json()
    assert set(doc) >= {"schema_version", "schema", "tool", "url", "server", "expected", "probes", "summary",
                        "requests", "seconds", "exit_code"}
    assert set(doc["server"]) == {"engine", "version", "told_by", "model", "models", "context", "routes"}
    assert set(doc["expected"]) == {"engine", "known", "stop_rule", "defaults"}
    for probe in doc["probes"]:
        assert set(probe) == {"name", "status", "summary", "requests", "seconds", "figures", "evidence"}
        assert probe["status"] in ("pass", "fail", "warn", "skip")
    answered = [e for p in doc["probes"] for e in p["evidence"] if "request" in e]
    assert answered and all({"request", "answer", "finish_reason", "usage"} <= set(e) for e in answered)


def test_timeout_bounds_each_answer_and_a_bad_timeout_is_exit_2():
    behaviour = Behaviour(hostile="endless-chunk")
    with standin_server(behaviour) as url:
        run = cli("probe-server", url, "--timeout", "0.5", "--json")
        bad = cli("probe-server", url, "--timeout", "-1")
    doc = run.json()
    assert run.code == 1 and "did not finish answering within 0.5 s" in doc["probes"][1]["summary"]
    assert bad.code == 2 and "--timeout" in bad.stderr


def test_json_nested_past_the_bound_is_a_broken_server_not_a_recursion_error():
    from stopdoctor.facts.http_client import ServerBroken, parse_json

    assert parse_json('{"a": [1, {"b": "[[[["}]}', Bounds().limits, "GET /x") == {"a": [1, {"b": "[[[["}]}
    with pytest.raises(ServerBroken, match="nested more than 64 deep"):
        parse_json("[" * 100_000 + "]" * 100_000, Bounds().limits, "GET /x")
    assert parse_json("not json", Bounds().limits, "GET /x") is None


@pytest.mark.parametrize("hostile", ["endless-stream", "endless-chunk"])
def test_a_streamed_request_to_an_endless_server_ends_at_its_bound(hostile):
    from stopdoctor.actions.probe_server.client import ServerClient
    from stopdoctor.actions.probe_server.http import BoundedHttp
    from stopdoctor.facts.http_client import ServerBroken

    behaviour = Behaviour(hostile=hostile)
    with standin_server(behaviour) as url:
        client = ServerClient(BoundedHttp(url, Bounds(request_s=1.0, max_bytes=1024 * 1024)), "standin-model")
        with pytest.raises(ServerBroken, match="did not finish answering within 1 s|longer than"):
            client.chat_stream([{"role": "user", "content": "What is 2+2?"}], max_tokens=8)
    assert behaviour.requests == ["POST /v1/chat/completions"]


def test_output_file_gets_the_document_and_stdout_stays_empty(tmp_path):
    target = tmp_path / "out" / "probe.json"
    with standin_server(Behaviour()) as url:
        run = cli("probe-server", url, "--json", "-o", str(target))
    assert run.code == 0 and run.stdout == "" and f"wrote json report to {target}" in run.stderr
    import json

    assert json.loads(target.read_text())["schema"] == "stopdoctor.probe-server/1"
