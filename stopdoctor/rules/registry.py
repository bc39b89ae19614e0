"""The rule registry: every rule with its permanent code, kebab-case name, default severity
and documentation (what it checks / why it matters / example / fix) beside its code. A rule is
the one word for it (`Rule`, `@rule`); "check" is the command and the gate.

A rule declares the kind of input it checks (`stopdoctor.rules.inputs`: a model's `Analysis`, a
serving config, an expectation, training labels, response logs), takes one such subject and returns
findings; it never prints. `stopdoctor.rules.runner` runs them; a rule that raises becomes an
`SD000 check-crashed` finding and the rest still run.
Imports: core, analysis. Family modules register themselves on import (the runner imports them).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.records import record
from stopdoctor.core.types import Location
from stopdoctor.core.findings import Finding, Severity

# Any, not object: each rule takes the one input kind it declares (`input`), which the runner matches
RuleFunction = Callable[[Any, "Rule"], Iterable[Finding]]


@record
class Rule:
    code: str
    name: str
    severity: Severity
    summary: str
    doc: str
    function: RuleFunction
    input: type = Analysis  # the kind of input it checks (`stopdoctor.rules.inputs`)

    def finding(self, message: str, fix: str, location: Location | None = None,
                severity: Severity | None = None, **evidence) -> Finding:
        return Finding(self.code, self.name, severity or self.severity, message, fix, location, evidence)

    @property
    def sections(self) -> dict[str, str]:
        """The doc split at its headings: What it checks / Why it matters / Example / Fix."""
        parts = re.split(r"^(What it checks|Why it matters|Example|Fix|How the runtimes decide \(source\)):\s*$", self.doc, flags=re.MULTILINE)
        return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


REGISTRY: dict[str, Rule] = {}
CODE = re.compile(r"^SD\d{3}$")
NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def rule(code: str, name: str, severity: Severity, input: type = Analysis) -> Callable[[RuleFunction], RuleFunction]:
    """Register a rule; `input` is the kind of subject it checks (a model's `Analysis` unless said)."""
    def register(function: RuleFunction) -> RuleFunction:
        assert CODE.match(code) and NAME.match(name), (code, name)
        assert code not in REGISTRY and all(c.name != name for c in REGISTRY.values()), code
        doc = inspect.cleandoc(function.__doc__ or "")
        # The summary is the whole first paragraph, however it wraps (SD273's runs over two lines).
        summary, _, rest = doc.partition("\n\n")
        REGISTRY[code] = Rule(code, name, severity, " ".join(summary.split()), rest.strip(), function, input)
        return function

    return register


def crashed(rule: Rule, error: BaseException) -> Finding:
    return Finding(
        "SD000",
        "check-crashed",
        Severity.ERROR,
        f"check {rule.code} {rule.name} crashed: {type(error).__name__}: {error}",  # the finding's public text
        "this is a stopdoctor bug; please report it with the model files",
        None,
        {"check": rule.code},  # public evidence key
    )


# The crash pseudo-rule is documented like the others.
REGISTRY["SD000"] = Rule(
    "SD000", "check-crashed", Severity.ERROR, "A check raised an exception.",
    "What it checks:\nNothing: it reports a check that crashed, so the others still run.\n\n"
    "Why it matters:\nA crashed check leaves its defect unexamined.\n\n"
    "Example:\nSD000 check crashed: KeyError\n\nFix:\nReport the bug with the model files.",
    lambda subject, rule: (),
    type(None),  # checks nothing: it stands for a crash
)
