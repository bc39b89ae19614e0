"""The one runner: every rule registered for a subject's kind, over that subject; a rule that
raises becomes SD000 and the rest still run.

Imports every rule family (they register themselves on import) and the registry.
"""

from __future__ import annotations

from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.findings import Finding
from stopdoctor.rules import expect, kind, labels, logs, provenance, reasoning, serving, stops, template, weights  # noqa: F401  (registers the rules)
from stopdoctor.rules import configured_stops, defaults, tokenizer  # noqa: F401  (registers the rules)
from stopdoctor.rules.inputs import INPUT_KINDS
from stopdoctor.rules.registry import REGISTRY, Rule, crashed


def rules_for(kind: type) -> list[Rule]:
    """The registered rules that check subjects of `kind`, by code."""
    return [REGISTRY[code] for code in sorted(REGISTRY) if REGISTRY[code].input is kind]


def run_rules(subject: object) -> list[Finding]:
    """Run every rule registered for the subject's kind; findings most severe first."""
    if type(subject) not in INPUT_KINDS:
        raise TypeError(f"no rule checks a {type(subject).__name__}")
    findings: list[Finding] = []
    for rule in rules_for(type(subject)):
        try:
            findings.extend(rule.function(subject, rule))
        except StopdoctorError:
            # Bad input, not a broken rule: a template over the sandbox's limits (the command's
            # render deadline can pass during a rule's own render) stops the run with exit 2.
            raise
        except Exception as error:  # noqa: BLE001 - one broken rule must not hide the others
            findings.append(crashed(rule, error))
    return sorted(findings, key=lambda f: (-f.severity, f.code))


def find(code_or_name: str) -> Rule | None:
    key = code_or_name.strip()
    if key.upper() in REGISTRY:
        return REGISTRY[key.upper()]
    return next((c for c in REGISTRY.values() if c.name == key.lower()), None)
