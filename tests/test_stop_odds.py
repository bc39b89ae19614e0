"""`stop-odds`, and the end-of-turn odds `generate` and `check --live` report, on the real SmolLM2
and its copy whose `<|im_end|>` row is zeroed (slow: the models are loaded)."""

from __future__ import annotations

import json

import pytest

from .helpers import cli


def test_data_errors_come_before_the_model_loads(tmp_path, real_models):
    missing = cli("stop-odds", str(real_models.smollm2_hf), "--data", str(tmp_path / "none.jsonl"))
    assert missing.code == 2 and "no such data file" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{not json\n')
    run = cli("stop-odds", str(real_models.smollm2_hf), "--data", str(bad))
    assert run.code == 2 and "line 2 is not JSON" in run.stderr and "Traceback" not in run.stderr
    assert cli("stop-odds", str(real_models.smollm2_hf), "--limit", "0").code == 2


@pytest.mark.slow
def test_healthy_smollm2_ends_its_turns(real_models):
    run = cli("stop-odds", "--json", str(real_models.smollm2_hf))
    assert run.code == 0, run.stderr
    document = run.json()
    assert document["schema"] == "stopdoctor.stop-odds/1" and document["schema_version"] == 1
    assert document["median_p_end_of_turn"] >= 0.3 and document["verdict"] == "stops"
    first = document["examples"][0]
    assert first["end_of_turn_ids"] == [2] and first["rank"] == 1 and abs(first["p_end_of_turn"] - 0.77) < 0.02
    assert len(first["top"]) == 5 and document["tokens_per_second"] > 0


@pytest.mark.slow
def test_zeroed_end_of_turn_row_never_stops(broken_weights):
    run = cli("stop-odds", "--json", str(broken_weights.zeroed_hf))
    assert run.code == 1
    document = run.json()
    assert document["median_p_end_of_turn"] <= 0.01 and document["verdict"] == "weights"
    assert all(e["rank"] > 1000 for e in document["examples"])
    human = cli("stop-odds", str(broken_weights.zeroed_hf), "--limit", "2")
    assert "never learned to stop" in human.stdout


@pytest.mark.slow
def test_healthy_weights_with_a_broken_eos_are_a_configuration_bug(real_models):
    document = cli("stop-odds", "--json", "--limit", "4", str(real_models.smollm2_hf_broken_eos)).json()
    assert document["verdict"] == "configuration" and "SD101" in document["reason"]


@pytest.mark.slow
def test_user_rows_chat_and_plain(tmp_path, real_models):
    data = tmp_path / "rows.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": "What is the capital of Italy?"},
                      {"role": "assistant", "content": "The capital of Italy is Rome."}]},
        {"prompt": [{"role": "user", "content": "Say hello."}], "completion": [{"role": "assistant", "content": "Hello!"}]},
        {"messages": [{"role": "user", "content": "no answer here"}]},
        {"prompt": "The end of the story.", "completion": " The end."},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    document = cli("stop-odds", "--json", str(real_models.smollm2_hf), "--data", str(data), "--batch-size", "2").json()
    kinds = [e["kind"] for e in document["examples"]]
    assert kinds == ["chat", "chat", "text"]
    assert document["skipped"] == [{"source": f"{data}:3", "why": "no assistant message to end"}]
    assert document["examples"][0]["p_end_of_turn"] > 0.3


@pytest.mark.slow
def test_stop_odds_on_a_gguf(real_models):
    document = cli("stop-odds", "--json", "--limit", "3", str(real_models.smollm2_gguf)).json()
    assert document["verdict"] == "stops" and document["median_p_end_of_turn"] >= 0.3


@pytest.mark.slow
def test_generate_names_the_weights(broken_weights, real_models):
    args = ["-m", "user", "What is the capital of France?", "--max-new-tokens", "24"]
    broken = cli("generate", str(broken_weights.zeroed_hf), *args)
    assert broken.code == 1
    assert "its weights never learned to stop" in broken.stdout and "budget may just be too small" not in broken.stdout
    document = cli("generate", "--json", str(broken_weights.zeroed_hf), *args).json()
    assert all(s["p_end_of_turn"] is not None and s["p_end_of_turn"] < 1e-4 for s in document["steps"])
    assert document["stop_evidence"]["never_stops"] is True
    assert document["stop_evidence"]["untrained_end_of_turn"][0]["id"] == 2
    healthy = cli("generate", "--json", str(real_models.smollm2_hf), "-m", "user", "What is the capital of France?").json()
    assert healthy["finish_reason"] == "stop" and healthy["steps"][-1]["p_end_of_turn"] > 0.5
    assert healthy["end_of_turn_odds"]["step"] == len(healthy["steps"]) - 1


@pytest.mark.slow
def test_check_live_names_the_weights(broken_weights):
    run = cli("check", "--live", "--format", "json", str(broken_weights.zeroed_hf))
    assert run.code == 1, run.stderr
    model = run.json()["models"][0]
    by_code = {f["code"]: f for f in model["findings"]}
    assert "SD801" in by_code
    assert by_code["SD501"]["fix"].startswith("the weights, not the files")
    assert "chat template" not in by_code["SD501"]["fix"]
    assert model["live"]["stop_evidence"]["never_stops"] is True
