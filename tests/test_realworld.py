"""inspect on 27 real model repos (configuration files only, read from ../shared/realworld).

Each row restates the hand reading of ../shared/realworld/README.md: kind, end-of-turn (text,
id), and the defects listed there, as stopdoctor finding names. Deviations from the table are
commented where stopdoctor disagrees with it on purpose.
"""

from __future__ import annotations

import pytest

from stopdoctor.api import inspect_model
from stopdoctor.core.errors import InputError

from .helpers import cli

# folder: (kind, end of turn (text, id or None), findings that must be reported, findings that must not)
EXPECTED = {
    "Arp1tMoga__fast_qwen": ("instruct", ("<|im_end|>", None), set(), {"end-of-turn-not-a-stop-id", "pad-is-eos"}),
    "AtulDeshpande09__Fine-tuned-Economics-QA-using-smolLM__model": ("base", None, {"no-chat-template"}, {"pad-is-eos"}),
    "Ayush2006128__mithoon-2b": ("base", None, {"no-chat-template"}, {"pad-is-eos"}),
    "Bwin-AI__LiverGPT": ("instruct", ("<|im_end|>", 151645), {"template-ignores-generation-prompt"}, {"end-of-turn-not-a-stop-id", "pad-is-eos"}),
    "Danvin-44__FS8B-finetuned": ("base", None, {"pad-is-eos"}, set()),
    "Decentralised-AI__falcon-40b": ("base", None, {"eos-id-invalid"}, set()),
    "HakunaMatata888__gemma2-poem": ("instruct", ("<end_of_turn>", 107), {"double-bos"}, {"end-of-turn-not-a-stop-id", "pad-is-eos"}),
    "HuengchI__Atom-7B": ("base", None, {"pad-is-eos"}, set()),
    # transformers: generation_config.json exists without eos_token_id, so it stops on nothing
    # (no-stop-id); vLLM/TGI stop on the tokenizer eos </s>. The README calls this "unknown at top level".
    "InfiMM__infimm-zephyr": ("instruct", ("</s>", 2), {"pad-is-eos", "no-stop-id"}, {"end-of-turn-not-a-stop-id"}),
    "IrfanUruchi__Llama-2-13B-Computer-Engineering-": ("base", None, {"pad-is-eos"}, set()),
    "JakobJohannesson__mixtral_dolphin_v2.5": ("instruct", ("<|im_end|>", 32000), {"double-bos"}, {"end-of-turn-not-a-stop-id", "pad-is-eos"}),
    "ManiPolipogu15__Code_Llama2_Finetune": ("base", None, set(), {"pad-is-eos", "eos-id-invalid"}),
    "MonilSompura__MistralAI": ("instruct", ("</s>", 2), {"double-bos"}, {"end-of-turn-not-a-stop-id", "template-token-not-special"}),
    "PANDASANG1231__llama_3.2-3B-huggingface-shard0": ("base", None, set(), {"pad-is-eos", "stop-ids-disagree", "eos-id-invalid"}),
    # only config.json + generation_config.json: nothing says base or instruct (README: base)
    "Peterpetu__Large-Language-Model-Fine-Tuning-with-QLora__merged_model": ("unknown", None, set(), {"stop-ids-disagree"}),
    "SmartMaster35Rus__Llama3-GGuf": ("instruct", ("<|eot_id|>", 128009), {"end-of-turn-not-a-stop-id", "stop-ids-disagree"}, {"pad-is-eos"}),
    # only the template says chat: the end-of-turn is declared nowhere, the name says nothing
    "ananddhanabal__gemma": ("unknown", ("<end_of_turn>", 107), {"end-of-turn-not-a-stop-id", "double-bos"}, {"pad-is-eos"}),
    "colorfulandcjy0806__cjy_chat": ("instruct", ("<|im_end|>", 92542), {"end-of-turn-not-a-stop-id", "pad-is-eos", "double-bos"}, set()),
    "gsasouza__dolphin3-mistral": ("instruct", ("<|im_end|>", 131072), set(), {"end-of-turn-not-a-stop-id", "template-token-not-special", "pad-is-eos"}),
    # The files show a ChatML template whose end-of-turn was never made a stop id; that it is a
    # base model (README) is knowledge about who trained it, not in the files: verdict instruct.
    # a ChatML template whose <|im_end|> no file declares as a stop id: not evidence of chat tuning
    "hashvibe007__smollm2__final_model": ("unknown", ("<|im_end|>", 2), {"end-of-turn-not-a-stop-id", "pad-is-eos"}, set()),
    "junqi-jiang__oasstpythia1.5brm": ("unknown", None, {"no-chat-template"}, {"pad-is-eos"}),
    "kunalm2345__slm-aplit": ("instruct", ("<|end|>", 32007), {"pad-is-eos"}, {"end-of-turn-not-a-stop-id", "eos-id-invalid"}),
    "mohamadfayez__ain-model": ("instruct", ("<|im_end|>", 151645), {"templates-differ"}, {"end-of-turn-not-a-stop-id", "pad-is-eos"}),
    "root-hypercube__qwen3-mlx": ("instruct", ("<|im_end|>", 151645), set(), {"end-of-turn-not-a-stop-id", "pad-is-eos"}),
    # special_tokens_map.json declares eos <|eot_id|>: the model's own stop id is a turn end
    "sayksii__TAIDE-Llama3-Qlora-Finetune": ("instruct", None, set(), {"end-of-turn-not-a-stop-id", "stop-ids-disagree"}),
    "tbressers__WizardLM-2-8x22B": ("instruct", None, {"no-chat-template"}, {"pad-is-eos"}),
}


def test_table_covers_every_folder(realworld):
    folders = {p.name for p in realworld.iterdir() if p.is_dir()}
    assert folders == set(EXPECTED) | {"DracoUnion__Qwen1.5-moe-8x0.5B-Chat"}


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_realworld_folder(realworld, folder):
    kind, end_of_turn, present, absent = EXPECTED[folder]
    result = inspect_model(str(realworld / folder))
    names = {f.name for f in result.findings}
    assert result.analysis.verdict.kind == kind
    assert present <= names, f"missing {present - names}; got {names}"
    assert not (absent & names), f"unexpected {absent & names}"
    assert "check-crashed" not in names
    markers = [(e.text, e.ids[0] if e.single_special else None) for e in result.analysis.end_of_turn]
    assert markers == ([end_of_turn] if end_of_turn else [])


def test_eot_missing_findings_name_the_id_and_file(realworld):
    expected = {"SmartMaster35Rus__Llama3-GGuf": (128009, ["transformers"]),
                "ananddhanabal__gemma": (107, ["transformers", "vllm", "tgi"]),
                "colorfulandcjy0806__cjy_chat": (92542, ["transformers", "vllm", "tgi"]),
                "hashvibe007__smollm2__final_model": (2, ["transformers", "vllm", "tgi"])}
    for folder, (token_id, runtimes) in expected.items():
        (finding,) = [f for f in inspect_model(str(realworld / folder)).findings if f.code == "SD101"]
        assert finding.evidence["id"] == token_id
        assert finding.evidence["runtimes_missing"] == runtimes
        assert finding.location.file == "generation_config.json"


def test_falcon_stop_id_points_at_the_wrong_token(realworld):
    result = inspect_model(str(realworld / "Decentralised-AI__falcon-40b"))
    invalid = [f for f in result.findings if f.name == "eos-id-invalid"]
    assert {f.location.file for f in invalid} == {"generation_config.json", "config.json"}
    assert all(">>INTRODUCTION<<" in f.message and "[11]" in f.message for f in invalid)


def test_invalid_generation_config_is_one_line_exit_2(realworld):
    with pytest.raises(InputError, match=r"generation_config.json: invalid JSON at line \d+ column \d+"):
        inspect_model(str(realworld / "DracoUnion__Qwen1.5-moe-8x0.5B-Chat"))
    run = cli("inspect", str(realworld / "DracoUnion__Qwen1.5-moe-8x0.5B-Chat"))
    assert run.code == 2 and run.stdout == ""
    assert run.stderr.splitlines()[0].startswith("stopdoctor: error: generation_config.json: invalid JSON")


def test_infimm_stop_id_only_in_nested_config(realworld):
    result = inspect_model(str(realworld / "InfiMM__infimm-zephyr"))
    nested = [d for d in result.facts.declared_for("eos", "config.json")]
    assert [(d.id, d.location.key) for d in nested] == [(2, "language.eos_token_id")]
    assert result.analysis.runtime("transformers").ids == []
    assert result.analysis.runtime("vllm").ids == [2]
