"""The one runner: every rule registered for a subject's kind, over that subject; a rule that
raises becomes SD000 and the rest still run.

Rule families register themselves on import; a run imports the families of its subject's kind only
(`inspect` need not import the labels, logs, comparison or serving rules: ~30 ms), and `REGISTRY`,
read from here, is every rule (PEP 562: asking for it imports them all).
Imports the registry, `rules.inputs`, and the rule families (when asked).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.findings import Finding
from stopdoctor.rules import registry
from stopdoctor.rules.inputs import INPUT_KINDS
from stopdoctor.rules.registry import Rule, crashed

# The modules of stopdoctor.rules whose rules check each kind of subject (`rules.inputs.INPUT_KINDS`).
# tests/test_cold_imports.py imports every module of the package and checks this map against
# what registered: a new family, or a rule of a new kind in an old one, must be listed here.
FAMILIES: dict[str, tuple[str, ...]] = {
    "model": ("kind", "reasoning", "stops", "template", "tokenizer"),
    "serving": ("configured_stops", "defaults", "reasoning", "serving"),
    "expectation": ("expect",),
    "labels": ("labels",),
    "logs": ("logs",),
    "weights": ("weights",),
    "comparison": ("provenance",),
}


def load_families(kind: str | None = None) -> None:
    """Import the rule families of `kind` (every family when None), which registers their rules."""
    for family in sorted({f for k, families in FAMILIES.items() if kind in (None, k) for f in families}):
        __import__(f"stopdoctor.rules.{family}")  # the import statement's path: `-X importtime` shows it


if TYPE_CHECKING:  # pragma: no cover - at run time `__getattr__` answers
    REGISTRY: dict[str, Rule]


def __getattr__(name: str) -> Any:
    if name == "REGISTRY":  # `from stopdoctor.rules.runner import REGISTRY`: every rule
        load_families()
        return registry.REGISTRY
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kind_of(input: type) -> str | None:
    """The name (a key of FAMILIES) of the kind of subject `input` is; None when no rule checks it."""
    return INPUT_KINDS.get(input)


def rules_for(kind: type) -> list[Rule]:
    """The registered rules that check subjects of `kind`, by code."""
    load_families(kind_of(kind))  # a kind no rule checks: every family, and none match
    rules = registry.REGISTRY
    return [rules[code] for code in sorted(rules) if rules[code].input is kind]


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
    load_families()
    rules, key = registry.REGISTRY, code_or_name.strip()
    if key.upper() in rules:
        return rules[key.upper()]
    return next((c for c in rules.values() if c.name == key.lower()), None)
