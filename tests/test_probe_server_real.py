"""`stopdoctor probe-server` against real servers: llama.cpp's own llama-server (b10434, the tests'
fixture, tests/llamaserver_fixture.py) on SmolLM2 with several flag sets, `transformers serve` on the
broken-eos SmolLM2, and a plain HTTP server that is no LLM server at all.

What b10434 does, as the probes see it: SmolLM2 ends its turn and stop strings end the answer
(whole and streamed), but a partial stop match held back when the budget runs out is never sent
(the `not-flushed` defect `generate --server --stream` found): `stop-held-back` fails.
Each test bounds the requests a probe may send, never the seconds (the battery's time is measured
in benchmarks/bench_probe_server.py)."""

from __future__ import annotations

import http.server
import threading

import pytest

from stopdoctor import api
from stopdoctor.actions.probe_server.battery import PROBE_NAMES, Settings, all_probes
from stopdoctor.actions.probe_server.http import Bounds
from tests.helpers import cli
from tests.llamaserver_fixture import running_llama_server

pytestmark = pytest.mark.slow

IDENTITY_ROUTES = 4  # /v1/models, /props or /api/version, /info, /version at most


def _statuses(doc) -> dict[str, str]:
    return {p["name"]: p["status"] for p in doc["probes"]}


@pytest.fixture(scope="module")
def llama_flags(real_gguf_models, tmp_path_factory, request):
    """A llama-server with the flags of the test's parameter, started once per flag set."""
    log = tmp_path_factory.mktemp("probe-server") / "llama.log"
    with running_llama_server(real_gguf_models.smollm2_gguf, log, *request.param) as server:
        yield server


def test_llama_server_b10434_smollm2_the_whole_battery(llama_server):
    run = cli("probe-server", llama_server.url, "--json")
    doc = run.json()
    assert _statuses(doc) == {
        "server": "pass", "end-of-turn": "pass", "stop-string": "pass", "stop-held-back": "fail",
        "finish-reason": "pass", "default-budget": "pass", "context": "pass", "stream-whole": "pass",
        "reasoning-split": "skip"}, [(p["name"], p["summary"]) for p in doc["probes"]]
    assert run.code == 1
    assert doc["server"]["engine"] == "llama.cpp" and doc["server"]["context"] == 2048
    assert doc["expected"]["known"] and "end-of-generation" in doc["expected"]["stop_rule"]
    held = next(p for p in doc["probes"] if p["name"] == "stop-held-back")
    # The held-back tail is what the stream lost; the whole answer has it.
    lost = held["figures"]["lost"]
    assert lost.strip() and lost.endswith(held["figures"]["tail"]) and "never sent" in held["summary"]
    stop = next(p for p in doc["probes"] if p["name"] == "stop-string")
    assert all(count >= 2 for count in stop["figures"]["stop_tokens"].values()), stop["figures"]
    context = next(p for p in doc["probes"] if p["name"] == "context")
    assert context["figures"]["sent_tokens"] > 2048 and "HTTP 400" in context["summary"]
    assert doc["requests"] <= IDENTITY_ROUTES + sum(p.max_requests for p in all_probes())
    for probe in doc["probes"]:
        assert probe["requests"] <= next(p.max_requests for p in all_probes() if p.name == probe["name"])


@pytest.mark.parametrize("llama_flags", [("--ignore-eos",)], indirect=True)
def test_end_of_turn_fails_when_the_server_ignores_the_eos(llama_flags):
    (probe,) = api.probe_server(llama_flags.url, only=["end-of-turn"]).probes
    assert probe.status == "fail" and "finish 'length'" in probe.summary, probe.summary
    assert probe.figures["completion_tokens"] == probe.figures["max_tokens"]


@pytest.mark.parametrize("llama_flags", [("--no-jinja",)], indirect=True)
def test_the_legacy_template_path_ends_turns_and_stops_too(llama_flags):
    result = api.probe_server(llama_flags.url, only=["end-of-turn", "stop-string", "finish-reason"])
    assert {p.name: p.status for p in result.probes} == {"end-of-turn": "pass", "stop-string": "pass",
                                                         "finish-reason": "pass"}, [p.summary for p in result.probes]


@pytest.mark.parametrize("llama_flags", [("-c", "512", "-n", "16")], indirect=True)
def test_a_small_context_is_refused_and_a_server_budget_of_16_is_a_warning(llama_flags):
    result = api.probe_server(llama_flags.url, only=["default-budget", "context"])
    budget, context = result.probes
    assert budget.status == "warn" and budget.figures["chat"] == {"tokens": 16}, budget.summary
    # /props keeps saying n_predict -1 under `-n 16`: only a request shows the budget.
    assert result.identity.default_max_tokens == -1 and "/props says n_predict -1" in budget.summary
    assert context.status == "pass" and context.figures["served_context"] == 512, context.summary
    assert api.probe_server_report(result).exit_code() == 0  # warnings never fail


@pytest.mark.parametrize("llama_flags", [("--jinja", "--reasoning-format", "deepseek")], indirect=True)
def test_a_reasoning_parser_on_a_model_that_does_not_think_is_skipped(llama_flags):
    result = api.probe_server(llama_flags.url, only=["end-of-turn", "reasoning-split"])
    assert [(p.name, p.status) for p in result.probes] == [("end-of-turn", "pass"), ("reasoning-split", "skip")]
    # (b10434's /props says reasoning_format "none" whatever the flag: a request is what tells.)


def test_a_plain_http_server_is_no_openai_server(tmp_path):
    # A real HTTP server (the standard library's), serving an empty folder: /v1/models is a 404.
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        run = cli("probe-server", f"http://127.0.0.1:{server.server_address[1]}", "--json")
    finally:
        server.shutdown()
        server.server_close()
    doc = run.json()
    statuses = _statuses(doc)
    assert statuses["server"] == "fail" and "not a model list" in doc["probes"][0]["summary"]
    assert run.code == 1 and set(statuses) == set(PROBE_NAMES)


@pytest.mark.needs_torch
def test_transformers_serve_on_the_broken_eos_model_fails_end_of_turn(served_broken):
    # The broken-eos SmolLM2 never stops under transformers (its generation_config eos is not
    # <|im_end|>): the server strips the special tokens, and the probe still sees the next turn.
    # transformers serve loads the model on the first request and writes ~2 tokens a second on a
    # busy CPU: a request bound that allows for it (the default is 20 s).
    result = api.probe_server(served_broken, only=["end-of-turn"], settings=Settings(Bounds(request_s=600.0)))
    (probe,) = result.probes
    assert probe.status == "fail" and "finish 'length'" in probe.summary, probe.summary
    assert "the model wrote the next turn itself" in probe.summary


from tests.test_generate import served_broken  # noqa: E402,F401  the module's real `transformers serve` fixture
