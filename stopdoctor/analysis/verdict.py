"""Base vs instruct: a verdict with the evidence that led to it.

Each clue adds or removes weight; a model is called instruct only when a strong clue (its name,
or a chat template) says so, and base when the clues lean clearly the other way.
Imports: model, facts.
"""

from __future__ import annotations

import re

from stopdoctor.core.records import record
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.core.types import Location

INSTRUCT_NAME = re.compile(
    r"instruct|chat|(^|[-_./\s])it($|[-_./\s])|sft|dpo|orpo|rlhf|assistant|dolphin|zephyr|wizardlm|hermes|openchat|vicuna",
    re.IGNORECASE,
)
BASE_NAME = re.compile(r"(^|[-_./\s])(base|pretrain(ed)?|pt)($|[-_./\s])", re.IGNORECASE)
NON_CHAT_ARCH = re.compile(r"RewardModel|ForSequenceClassification|ForTokenClassification|ForMaskedLM|Embedding", re.IGNORECASE)
# Texts that only chat-tuned tokenizers declare as their eos.
TURN_END_EOS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|eom_id|>")


@record
class Evidence:
    clue: str
    weight: int
    location: Location | None = None


@record
class Verdict:
    kind: str  # base | instruct | unknown
    evidence: tuple[Evidence, ...]

    @property
    def score(self) -> int:
        return sum(e.weight for e in self.evidence)


# How `decide` turns the clues' weights into a kind, in words for the reports.
KIND_RULE = ("each clue's weight adds up: + points to instruct, - to base; instruct at +1 or more with a strong clue "
             "(a declared end-of-turn stop id or a turn-end eos), base at -2 or less (or a name saying base), else unknown")


def decide(facts: ModelFacts, end_of_turn_ids: set[int], unsafe_ids: frozenset[int] = frozenset()) -> Verdict:
    """Only the model's own files count: its names, its declared stop ids (not what a runtime
    adds, such as llama.cpp's end-of-generation text list), GGUF general.finetune, its model card.
    A chat template alone is weak evidence: anyone can add one to a base model. `unsafe_ids` are
    ids the safe-stop rule refuses (gpt-oss `<|end|>` also ends the analysis message): an eos
    among them is no turn-end token, whatever its text."""
    evidence: list[Evidence] = []
    strong = False
    for arch in facts.architectures:
        if NON_CHAT_ARCH.search(arch):
            evidence.append(Evidence(f"architecture {arch} is not a text generator", 0, Location("config.json", "architectures")))
            return Verdict("unknown", tuple(evidence))
    named = base_named = False
    for name in facts.names:
        if not named and INSTRUCT_NAME.search(name.value):
            evidence.append(Evidence(f"name {name.value!r} says instruct/chat", +3, name.location))
            named = strong = True
        elif BASE_NAME.search(name.value):
            evidence.append(Evidence(f"name {name.value!r} says base", -3, name.location))
            base_named = True
            break
    template_known = facts.is_gguf or "tokenizer_config.json" in facts.documents or bool(facts.templates)
    if facts.templates:
        evidence.append(Evidence("ships a chat template", +1, facts.templates[0].location))
        declared = [d for d in facts.declared if d.role in ("eos", "eot", "eom") and d.id in end_of_turn_ids]
        if declared:
            evidence.append(Evidence("the model declares the template's end-of-turn token as a stop id", +2, declared[0].location))
            strong = True
        elif end_of_turn_ids:
            evidence.append(Evidence("the model's files declare the template's end-of-turn token nowhere as a stop id", -1))
        if facts.sampling.get("do_sample") and facts.sampling["do_sample"].value is True:
            evidence.append(Evidence("generation_config.json sets sampling defaults", +1, facts.sampling["do_sample"].location))
    elif template_known:
        evidence.append(Evidence("no chat template", -2))
    for eos in facts.declared_for("eos"):
        if eos.text in TURN_END_EOS and eos.id not in unsafe_ids:
            evidence.append(Evidence(f"eos is the turn-end token {eos.text}", +2, eos.location))
            strong = True
            break
    if facts.base_model is not None:
        evidence.append(Evidence(f"model card names base_model {facts.base_model.value}", 0, facts.base_model.location))
    score = sum(e.weight for e in evidence)
    if base_named and not named:
        kind = "base"  # an explicit "base" in the name outweighs a template it inherited
    elif score >= 1 and strong:
        kind = "instruct"
    elif score <= -2:
        kind = "base"
    else:
        kind = "unknown"
    return Verdict(kind, tuple(evidence))
