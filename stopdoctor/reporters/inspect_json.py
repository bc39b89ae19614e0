"""The `inspect --json` document (schema_version 1). Fields are public interface: add, never rename."""

from __future__ import annotations

import json
from typing import Any

from stopdoctor.analysis.verdict import KIND_RULE
from stopdoctor.rules.results import InspectResult
from stopdoctor.reporters.document import finding, header, location, summary
from stopdoctor.reporters.reasoning_text import reasoning_document

def inspect_document(result: InspectResult) -> dict[str, Any]:
    facts, analysis = result.facts, result.analysis
    primary = analysis.runtime(result.primary_runtime)
    assert analysis.verdict is not None  # `analyze` always decides one
    return {
        **header("stopdoctor.inspect/1"),
        "model": {
            "spec": result.source.spec,
            "kind": result.source.kind,
            "path": str(result.source.root if result.source.kind != "gguf" else next(iter(result.source.files.values()))),
            "revision": result.source.revision,
            "files": sorted(result.source.files),
            "missing_files": result.missing_files,
            "architectures": facts.architectures,
            "names": [{"value": n.value, "location": location(n.location)} for n in facts.names],
            "vocab_size": facts.vocab.size,
        },
        "verdict": {
            "kind": analysis.verdict.kind,
            "evidence": [{"clue": e.clue, "weight": e.weight, "location": location(e.location)} for e in analysis.verdict.evidence],
            "score": analysis.verdict.score,
            "rule": KIND_RULE,
        },
        "end_of_turn": [
            {"text": e.text, "ids": list(e.ids), "single_special_token": e.single_special, "template": e.template,
             "evidence": e.evidence, "kind": e.kind}
            for e in analysis.end_of_turn
        ],
        # how the template ends an assistant turn (token | only-when-followed | next-header |
        # whitespace | none), and markers the safe-stop rule refused (never suggested as stops)
        "turn_style": analysis.turns.style if analysis.turns is not None else None,
        # why the turn structure was read from the template's syntax tree instead of rendered
        # (the template renders no plain conversation); null when it was rendered
        "turn_static": analysis.turns.static if analysis.turns is not None else None,
        "end_of_turn_refused": [{"text": e.text, "ids": list(e.ids), "why": why} for e, why in analysis.rejected_end_of_turn],
        "turn_headers": analysis.turn_headers,
        "reasoning": reasoning_document(analysis),
        "stop_ids": {
            "effective": primary.ids,
            "runtime": primary.runtime,
            "sources": [{"id": s.id, "text": s.text, **(location(s.location) or {})} for s in primary.stops],
            "per_runtime": {
                s.runtime: {"ids": s.ids, "rule": s.rule, "complete": s.complete, "sources": [{"id": x.id, "text": x.text, **(location(x.location) or {})} for x in s.stops]}
                for s in analysis.stops
            },
        },
        "declared": [{"role": d.role, "id": d.id, "text": d.text, **(location(d.location) or {})} for d in facts.declared],
        "templates": [{"name": t.name, **(location(t.location) or {}), "chars": len(t.source)} for t in facts.templates],
        "findings": [finding(f) for f in result.findings],
        "summary": summary(result.findings),
    }


def render_inspect_json(result: InspectResult) -> str:
    document = inspect_document(result)
    from stopdoctor.reporters.sampling_text import sampling_document

    document["sampling"] = sampling_document(result.facts)
    if result.original is not None:
        document["against"] = result.original.facts.source.spec
    if result.weights is not None:
        from stopdoctor.reporters.weights_text import weights_document

        document["weights"] = weights_document(result.weights)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
