"""SD8xx: the weights — will the model ever emit the token that ends its turn?

These rules check a `WeightsInput`: the rows of the embedding and output matrices that matter
for stopping, read by `inspect --weights` (`stopdoctor.analysis.weights`).
Imports: core, rules.inputs, rules.registry.
"""

from __future__ import annotations

from stopdoctor.core.findings import Severity
from stopdoctor.core.types import Location
from stopdoctor.rules.inputs import WeightsInput
from stopdoctor.rules.registry import Rule, rule


@rule("SD801", "end-of-turn-untrained", Severity.ERROR, input=WeightsInput)
def end_of_turn_untrained(subject: WeightsInput, self: Rule):
    """The end-of-turn token's row in the weights was never trained: the model cannot emit it.

    What it checks:
    The embedding and output (lm_head) rows of every token that ends an assistant turn (the
    template's end-of-turn token; for a model without one, its eos), read from the safetensors
    or GGUF file without loading the model. A row is untrained when its maximum is <= 1e-16
    (Unsloth's `fix_untrained_tokens` test), when its norm is far below the ordinary rows'
    (under a quarter of their median and 8 robust deviations below it), or when it is a copy of
    another row (cosine >= 0.9995, same norm: trained tokens never share a vector; untrained
    reserved rows do).

    Why it matters:
    The configuration can be perfect and the model still never stops: a token whose output row
    is zero (or a copy of an untrained one) gets no probability, so generation runs to the
    budget. A chat template added to a base model, a tokenizer resized for a new end-of-turn
    token, or a fine-tune whose loss masked the end-of-turn all leave such a row.

    Example:
    `<|im_end|> (id 2), which ends assistant turns, has an untrained row: its embedding row is all zeros`

    Fix:
    Fine-tune with the end-of-turn token in the labels (`stopdoctor labels` checks a dataset), or
    initialise the row from a trained one (Unsloth `fix_untrained_tokens`) before training;
    `stopdoctor stop-odds MODEL` measures the probability the model gives it.
    """
    weights = subject.weights
    for row in weights.untrained_targets:
        what = "ends assistant turns" if "end-of-turn" in row.roles else "is the eos this model ends text with"
        matrix = weights.rows.output or weights.rows.embedding
        tied = " (tied embeddings: the same row scores the output)" if weights.rows.tied else ""
        yield self.finding(
            f"{row.text or '?'} (id {row.id}), which {what}, has an untrained row: {'; '.join(row.reasons)}{tied}",
            "train the end-of-turn token (keep it in the labels: `stopdoctor labels`), or initialise its row from "
            "trained ones before fine-tuning (Unsloth fix_untrained_tokens); `stopdoctor stop-odds` measures P(end-of-turn)",
            Location(matrix.file, matrix.tensor),
            id=row.id, text=row.text, reasons=list(row.reasons), unsloth_untrained=row.unsloth_untrained,
            copy_of=row.copy_of)
