"""Text Generation Inference (TGI).

Imports: runtimes.engines.engine.
"""

from stopdoctor.runtimes.engines.engine import Engine

ENGINE = Engine(
    name="tgi", listed=2, hf_core=True,
    stop_rule="generation_config eos_token_id when it is a list, else the tokenizer's eos",
    stop_rule_source="runtimes/stops.py (TGI's eos reading)",
    spellings=("text-generation-inference",),
)
