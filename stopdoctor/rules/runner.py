"""The one runner: every registered rule over its input, a crash becoming SD000.

Imports every rule family (they register themselves on import) and the registry.
"""

from __future__ import annotations

from stopdoctor.analysis.core import Analysis
from stopdoctor.core.errors import StopdoctorError
from stopdoctor.core.findings import Finding
from stopdoctor.rules import expect, kind, labels, logs, serving, stops, template  # noqa: F401  (registers the rules)
from stopdoctor.rules.registry import REGISTRY, Check, crashed


def run_checks(analysis: Analysis, prefix: str = "SD") -> list[Finding]:
    """Run every registered check whose code starts with `prefix` (serving checks run as "SD4")."""
    findings: list[Finding] = []
    for code in sorted(REGISTRY):
        if not code.startswith(prefix):
            continue
        registered = REGISTRY[code]
        try:
            findings.extend(registered.function(analysis, registered))
        except StopdoctorError:
            # Bad input, not a broken check: a template over the sandbox's limits (the command's
            # render deadline can pass during a check's own render) stops the run with exit 2.
            raise
        except Exception as error:  # noqa: BLE001 - one broken check must not hide the others
            findings.append(crashed(registered, error))
    return sorted(findings, key=lambda f: (-f.severity, f.code))


def find(code_or_name: str) -> Check | None:
    key = code_or_name.strip()
    if key.upper() in REGISTRY:
        return REGISTRY[key.upper()]
    return next((c for c in REGISTRY.values() if c.name == key.lower()), None)


