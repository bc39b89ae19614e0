"""`stopdoctor generate` on the real test models: stopping as a runtime would, the diagnosis of a
runaway, a real `transformers serve` server, and the base-vs-instruct fragment test.

Tests that load weights are marked slow and share one loaded model per folder (session scope).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.helpers import stop_server
from typer.testing import CliRunner

from stopdoctor.cli.app import app
from stopdoctor.core.errors import InputError
from stopdoctor.actions.generate.request import Sampling, build_prompt, resolve_stops
from stopdoctor.actions.generate.run import load_context, run_generate

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
runner = CliRunner()


def _cli(*args: str):
    return runner.invoke(app, ["generate", *args])


# --------------------------------------------------------------------------------------------
# No weights needed
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broken_context(real_models):
    return load_context(str(real_models.smollm2_hf_broken_eos))


def test_default_stops_are_the_models_own_runtime_and_say_so(real_models, broken_context):
    stops = resolve_stops(broken_context.analysis, None, [], [])
    assert stops.runtime == "transformers"
    assert stops.ids == [0]  # the broken generation_config.json eos
    assert stops.stops[0].location.file == "generation_config.json"
    gguf = load_context(str(real_models.smollm2_gguf))
    assert resolve_stops(gguf.analysis, None, [], []).runtime == "llama.cpp"


def test_stop_options_combine_as_documented(broken_context):
    analysis = broken_context.analysis
    assert resolve_stops(analysis, "runtime:vllm", [], []).ids == [0, 2]  # tokenizer eos + generation eos
    only = resolve_stops(analysis, None, [7], ["###"])
    assert (only.ids, only.texts, only.runtime) == ([7], ("###",), "--stop-id")
    both = resolve_stops(analysis, "model", [2], [])
    assert both.ids == [0, 2]
    assert resolve_stops(analysis, "none", [], []).ids == []
    for bad in ("runtime:nope", "whatever"):
        with pytest.raises(InputError):
            resolve_stops(analysis, bad, [], [])
    with pytest.raises(InputError):
        resolve_stops(analysis, None, [10**9], [])


def test_templated_and_raw_prompts(broken_context):
    facts = broken_context.facts
    chat = build_prompt(facts, messages=QUESTION)
    assert chat.templated and chat.text.endswith("<|im_start|>assistant\n")
    assert chat.ids[0] == 1  # <|im_start|> written by the template, encoded as the special token
    raw = build_prompt(facts, prompt="The capital of France is", raw=True)
    assert not raw.templated and raw.text == "The capital of France is"
    assert 1 not in raw.ids


def test_missing_torch_says_how_to_install_it(real_models, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    result = _cli(str(real_models.smollm2_hf), "--prompt", "Hi")
    assert result.exit_code == 2
    from stopdoctor.actions.generate.local import TORCH_CPU_INSTALL

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "stopdoctor generate runs" in result.output
    assert TORCH_CPU_INSTALL in result.output and TORCH_CPU_INSTALL in readme  # the README's CPU-torch line


@pytest.mark.needs_torch
def test_pickle_only_weights_are_refused_without_allow_pickle(real_models, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(real_models.smollm2_hf / name, folder / name)
    (folder / "pytorch_model.bin").write_bytes(b"not loaded")
    result = _cli(str(folder), "--prompt", "Hi", "--device", "cpu")
    assert result.exit_code == 2
    assert "pickle" in result.output and "--allow-pickle" in result.output


def test_bad_input_exits_2(real_models):
    assert _cli(str(real_models.smollm2_hf)).exit_code == 2  # no prompt
    assert _cli(str(real_models.smollm2_hf), "--prompt", "x", "--max-new-tokens", "0").exit_code == 2
    assert _cli(str(real_models.smollm2_hf), "--prompt", "x", "--stops", "runtime:nope").exit_code == 2


def test_request_errors_come_before_loading_the_model(synth_root):
    # a synthetic folder has no weights: each of these must fail on the request, not on the load
    folder = str(synth_root / "clean-chatml")
    cases = {
        ("-m", "user", "hi", "--stops", "junk"): "--stops 'junk'",
        ("-m", "user", "hi", "--stop-id", "99999"): "--stop-id 99999",
        ("-m", "user", "hi", "--max-new-tokens", "1000000000000"): "--max-new-tokens must be between",
        ("-m", "user", "hi", "--temperature", "nan"): "--temperature must be a finite number",
        ("-m", "user", "hi", "--server", "notaurl"): "not an http(s) URL",
        ("--fragment-test", "-m", "user", "hi"): "--fragment-test runs its own probes",
        ("--fragment-test", "--max-new-tokens", "4"): "--fragment-test needs --max-new-tokens",
    }
    for args, message in cases.items():
        result = _cli(folder, *args)
        assert result.exit_code == 2, (args, result.stderr)
        assert message in result.stderr.splitlines()[0], (args, result.stderr)


def test_a_server_reply_that_is_not_openai_shaped_is_one_line(synth_root):
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"[]"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        result = _cli(str(synth_root / "clean-chatml"), "-m", "user", "hi", "--server", url, "--server-model", "m")
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 2, result.stderr
    assert "no choices[0] object" in result.stderr.splitlines()[0]


# --------------------------------------------------------------------------------------------
# Real generation (one loaded SmolLM2 shared by the tests of this file)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol(real_models):
    from stopdoctor.actions.generate.local import LocalEngine

    context = load_context(str(real_models.smollm2_hf))
    return context, LocalEngine.load(context.facts, device="cpu")


@pytest.mark.slow
@pytest.mark.needs_torch
def test_smollm2_stops_on_im_end(smol):
    context, engine = smol
    prompt = build_prompt(context.facts, messages=QUESTION)
    result = run_generate(context, engine, prompt, resolve_stops(context.analysis, None, [], []), 64)
    g = result.generation
    assert g.finish_reason == "stop"
    assert (g.cause.kind, g.cause.id, g.cause.text) == ("eos", 2, "<|im_end|>")
    assert g.cause.location.file == "generation_config.json"
    assert len(g.tokens) < 20 and g.tokens[-1] == 2
    assert "Paris" in g.text and "<|im_end|>" not in g.text  # the stop token's text is not reported
    assert result.diagnosis.should_have_stopped is None and result.diagnosis.hallucinated_turn is None


@pytest.mark.slow
@pytest.mark.needs_torch
def test_smollm2_with_stop_id_0_runs_away_and_says_why(smol):
    context, engine = smol
    prompt = build_prompt(context.facts, messages=QUESTION)
    result = run_generate(context, engine, prompt, resolve_stops(context.analysis, None, [0], []), 24)
    g, d = result.generation, result.diagnosis
    assert g.finish_reason == "length" and len(g.tokens) == 24
    assert (d.should_have_stopped.id, d.should_have_stopped.text) == (2, "<|im_end|>")
    step = d.should_have_stopped.step
    assert g.tokens[step] == 2 and 2 not in g.tokens[:step]
    assert d.counterfactual.stop_ids == (0, 2) and d.counterfactual.wasted == 24 - step - 1
    assert d.hallucinated_turn.role == "user" and d.hallucinated_turn.step > step
    assert "<|im_start|>user\n" in g.text  # special tokens visible


@pytest.mark.slow
@pytest.mark.needs_torch
def test_greedy_loop_matches_model_generate(smol):
    import torch

    context, engine = smol
    prompt = build_prompt(context.facts, messages=QUESTION)
    ours = run_generate(context, engine, prompt, resolve_stops(context.analysis, "none", [], []), 16).generation.tokens
    with torch.inference_mode():
        out = engine.model.generate(torch.tensor([prompt.ids]), max_new_tokens=16, do_sample=False,
                                    eos_token_id=None, pad_token_id=2)
    assert ours == out[0, len(prompt.ids):].tolist()


@pytest.mark.slow
@pytest.mark.needs_torch
def test_stop_string_is_held_back_and_located(smol):
    context, engine = smol
    prompt = build_prompt(context.facts, messages=QUESTION)
    result = run_generate(context, engine, prompt, resolve_stops(context.analysis, None, [], [" Paris"]), 32)
    g = result.generation
    assert g.finish_reason == "stop" and g.cause.kind == "stop_string" and g.cause.stop_string == " Paris"
    assert g.text == "The capital of France is"
    assert "Paris" in g.steps[g.cause.step].text and len(g.tokens) == g.cause.step + 1


@pytest.mark.slow
@pytest.mark.needs_torch
def test_sampling_with_a_seed_is_reproducible(smol):
    context, engine = smol
    prompt = build_prompt(context.facts, prompt="Once upon a time", raw=True)
    stops = resolve_stops(context.analysis, "none", [], [])
    runs = [run_generate(context, engine, prompt, stops, 8, Sampling(0.9, 0.95, 123)).generation.tokens for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) == 8


@pytest.mark.slow
@pytest.mark.needs_torch
def test_fragment_test_says_instruct_for_smollm2(smol):
    from stopdoctor.actions.generate.run import fragment_test

    context, engine = smol
    verdict = fragment_test(context, engine, 24)
    assert verdict.verdict == "instruct"
    assert [p.name for p in verdict.probes] == ["raw fragment", "chat question"]
    assert verdict.probes[1].ended_turn


@pytest.mark.slow
@pytest.mark.needs_torch
def test_cli_broken_eos_folder_json_contract_and_exit_1(real_models):
    result = _cli(str(real_models.smollm2_hf_broken_eos), "-m", "user", "What is the capital of France?",
                  "--max-new-tokens", "24", "--device", "cpu", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["finish_reason"] == "length" and doc["cause"] == {"kind": "length", "step": 23}
    assert doc["stops"]["source"] == "transformers" and [s["id"] for s in doc["stops"]["ids"]] == [0]
    assert doc["should_have_stopped"]["id"] == 2 and doc["should_have_stopped"]["text"] == "<|im_end|>"
    assert doc["hallucinated_turn"]["role"] == "user"
    assert len(doc["tokens"]) == 24 and doc["text"].startswith("The capital of France is Paris.<|im_end|>")


@pytest.mark.slow
@pytest.mark.needs_torch
def test_cli_human_report_and_trace(real_models):
    result = _cli(str(real_models.smollm2_hf), "--prompt", "What is the capital of France?", "--device", "cpu",
                  "--trace", "--no-color")
    assert result.exit_code == 0, result.output
    assert "stop: eos <|im_end|> (id 2)" in result.stdout
    assert "generation_config.json:eos_token_id" in result.stdout
    assert "special" in result.stdout  # the trace marks the <|im_end|> step


# --------------------------------------------------------------------------------------------
# A real OpenAI-compatible server: `transformers serve`
# --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served_broken(real_models, tmp_path_factory):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")
    exe = Path(sys.executable).with_name("transformers")
    if not exe.exists():
        pytest.skip("the transformers CLI is not installed next to this Python")
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as handle:
        process = subprocess.Popen(
            [str(exe), "serve", str(real_models.smollm2_hf_broken_eos), "--host", "127.0.0.1", "--port", str(port),
             "--device", "cpu"],
            stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/v1/models", timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"transformers serve did not come up:\n{log.read_text()[-2000:]}")
                time.sleep(0.5)
        yield url
    finally:
        stop_server(process)


@pytest.mark.slow
@pytest.mark.needs_torch
def test_server_runaway_is_flagged_even_with_special_tokens_stripped(real_models, served_broken):
    result = _cli(str(real_models.smollm2_hf_broken_eos), "--server", served_broken, "-m", "user",
                  "What is the capital of France?", "--max-new-tokens", "24", "--json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    server = doc["server"]
    assert server["finish_reason"] == "length" and doc["finish_reason"] == "length"
    assert server["usage"]["completion_tokens"] == 24
    # transformers serve refuses vLLM's stop_token_ids; stopdoctor says so and retries without.
    assert server["rejected_fields"] == ["stop_token_ids"]
    assert "<|im_start|>" not in doc["text"] and "Paris" in doc["text"]
    assert doc["hallucinated_turn"]["role"] == "user"
    assert doc["hallucinated_turn"]["source"] == "role word on its own line"


@pytest.mark.slow
@pytest.mark.needs_torch
def test_server_stop_string_is_passed_through(real_models, served_broken):
    result = _cli(str(real_models.smollm2_hf_broken_eos), "--server", served_broken, "--prompt",
                  "What is the capital of France?", "--stop", "Paris", "--max-new-tokens", "24", "--json")
    doc = json.loads(result.stdout)
    assert doc["server"]["finish_reason"] == "stop" and doc["server"]["sent"]["stop"] == ["Paris"]
    assert doc["server"]["usage"]["completion_tokens"] < 24
    # transformers serve stops there but keeps the stop string in the answer (OpenAI's API drops it):
    # flagged, exit 1 (issue #27 §5)
    assert doc["text"].endswith("Paris") and doc["stop_string_left"]["text"] == "Paris"
    assert result.exit_code == 1, result.output


def test_unreachable_server_exits_2(real_models):
    result = _cli(str(real_models.smollm2_hf), "--server", f"http://127.0.0.1:{_free_port()}", "--prompt", "Hi")
    assert result.exit_code == 2 and "cannot reach" in result.output


@pytest.fixture()
def budget_server():
    """An OpenAI-compatible server that always runs to the budget and says so in `usage`, as vLLM
    does (no token ids, no steps: the count comes from the server or the request)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _reply(self, document: dict) -> None:
            data = json.dumps(document).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._reply({"data": [{"id": "served"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = "Paris is the capital of France and it is"
            choice = {"finish_reason": "length"}
            if self.path.endswith("/chat/completions"):
                choice["message"] = {"role": "assistant", "content": text}
            else:
                choice["text"] = text
            self._reply({"choices": [choice], "usage": {"prompt_tokens": 12, "completion_tokens": body["max_tokens"]}})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_generation_carries_its_budget_and_never_says_0_new_tokens(real_models, budget_server):
    from stopdoctor.actions.generate.server import ServerEngine
    from stopdoctor.reporters.generation import render_generation_human

    model = str(real_models.smollm2_hf)
    args = (model, "--server", budget_server, "--prompt", "What is the capital of France?", "--max-new-tokens", "24")
    doc = json.loads(_cli(*args, "--json").stdout)
    assert doc["max_new_tokens"] == 24 and doc["new_tokens"] == 24 and doc["finish_reason"] == "length"
    human = _cli(*args, "--no-color").stdout
    assert "ran to the token budget (24 new tokens)" in human and "0 new tokens" not in human
    # The result carries its request: a reporter needs nothing else to state the budget.
    context = load_context(model)
    engine = ServerEngine(budget_server, facts=context.facts)
    engine.pick_model(model, context.facts.source.root)
    result = run_generate(context, engine, build_prompt(context.facts, prompt="Hi"),
                          resolve_stops(context.analysis, None, [], []), 24)
    assert "(24 new tokens)" in render_generation_human(result) and "0 new tokens" not in render_generation_human(result)
    fragment = _cli(model, "--server", budget_server, "--fragment-test", "--max-new-tokens", "24", "--no-color")
    # an instruct model (its files say so) that never ends its turn behaves as base: SD501, exit 1 (#29)
    assert fragment.exit_code == 1, fragment.output
    assert "did not end its turn in 24 tokens" in fragment.stdout and " 0 tokens" not in fragment.stdout


# --------------------------------------------------------------------------------------------
# Gemma 3 270M base (GGUF: slow to load, one test)
# --------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.needs_torch
def test_gemma_base_runs_to_the_budget_and_the_fragment_test_says_base(real_models):
    result = _cli(str(real_models.gemma_gguf), "--fragment-test", "--max-new-tokens", "24", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "base"
    raw = doc["probes"][0]
    assert raw["name"] == "raw fragment" and raw["finish_reason"] == "length" and len(raw["tokens"]) == 24


@pytest.mark.slow
@pytest.mark.needs_torch
def test_server_stream_reassembles_to_the_answer(real_models, served_broken):
    # greedy, no stop string: transformers serve's stream must reassemble to its non-streamed answer
    result = _cli(str(real_models.smollm2_hf_broken_eos), "--server", served_broken, "-m", "user",
                  "What is the capital of France?", "--max-new-tokens", "16", "--stream", "--json")
    doc = json.loads(result.stdout)
    stream = doc["stream"]
    assert stream["chunks"] > 1, stream
    # transformers serve 5.24 ends its stream without `data: [DONE]`: reported, not a text defect
    assert stream["text"] == doc["text"] and {i["kind"] for i in stream["issues"]} <= {"no-done"}, stream

