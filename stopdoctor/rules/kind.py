"""SD3xx: base vs instruct — is the model the kind its files set it up as."""

from __future__ import annotations

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.findings import Severity
from stopdoctor.rules.registry import Rule, rule


@rule("SD301", "base-model-with-chat-template", Severity.INFO)
def base_model_with_chat_template(analysis: Analysis, self: Rule):
    """A base model ships a chat template it was never trained on.

    What it checks:
    The base/instruct verdict (names, template, end-of-turn tokens, sampling defaults, model card)
    against the presence of a chat template.

    Why it matters:
    Serving frameworks apply the template, the base model never learned to emit its end-of-turn
    token, and every chat answer runs to the token limit.

    Example:
    A `-base` checkpoint whose tokenizer_config.json kept the instruct sibling's ChatML template.

    Fix:
    Serve the model as a completion model, remove the template, or fine-tune it on the template first.
    """
    facts = analysis.facts
    if facts.templates and analysis.verdict and analysis.verdict.kind == "base":
        yield self.finding("a base model with a chat template: it was likely never trained to end a turn",
                           "serve it for completion, or fine-tune it on this template before chat use",
                           facts.templates[0].location)
