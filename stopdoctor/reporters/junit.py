"""JUnit XML for `stopdoctor check --format junit`: one testsuite per subject (model), one testcase per
check that ran on it. A finding at or above fail-on is a <failure>; findings below it are kept in
the testcase's <system-out> (the case passes); a model or serving file that could not be read is a
testcase with an <error>, so a CI dashboard shows it rather than a green suite.
Any command's `Report` (check, inspect, labels, logs).
Imports: core, rules (the registry), reporters.sarif (locations), reporters.plain. Never prints.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from stopdoctor.rules.runner import REGISTRY
from stopdoctor.core.findings import Finding, Report, Subject
from stopdoctor.reporters.plain import printable
from stopdoctor.reporters.sarif import locate, relative_uri

# What XML 1.0 allows (its `Char` production); everything else makes the document unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(text: str) -> str:
    """Untrusted text for an XML document: controls, escape sequences and bidi overrides shown as
    escapes (`\\x1b`), and what XML 1.0 forbids (lone surrogates, U+FFFE/U+FFFF) dropped."""
    return _NOT_XML.sub("", printable(text))


def _where(model: Subject, finding: Finding, base: Path) -> str:
    place = locate(model, finding)
    if place is None:
        return str(finding.location) if finding.location else model.name
    uri = relative_uri(place.path, base)[0]
    return f"{uri}:{place.line}" if place.line else uri


def _describe(model: Subject, finding: Finding, base: Path) -> str:
    key = f" ({finding.location.key})" if finding.location and finding.location.key else ""
    return (f"{finding.severity.label} {finding.code} {finding.name} at {_where(model, finding, base)}{key}\n"
            f"{finding.message}\nfix: {finding.fix}")


def _suite(model: Subject, report: Report, base: Path) -> ET.Element:
    suite = ET.Element("testsuite", name=model.name)
    tests = failures = errors = 0
    by_code: dict[str, list[Finding]] = {}
    for finding in model.findings:
        by_code.setdefault(finding.code, []).append(finding)
    codes = list(model.checks) + [c for c in by_code if c not in model.checks]  # SD000 and strays too
    for code in codes:
        check = REGISTRY.get(code)
        name = f"{code} {check.name}" if check else code
        case = ET.SubElement(suite, "testcase", name=name, classname=f"stopdoctor.{model.name}")
        tests += 1
        found = by_code.get(code, [])
        failing = [f for f in found if f.severity >= report.fail_on]
        if failing:
            failures += 1
            failure = ET.SubElement(case, "failure", type=code,
                                    message="; ".join(f.message for f in failing))
            failure.text = "\n\n".join(_describe(model, f, base) for f in failing)
        passing = [f for f in found if f.severity < report.fail_on]
        if passing:
            ET.SubElement(case, "system-out").text = "\n\n".join(_describe(model, f, base) for f in passing)
    if model.error is not None:
        tests += 1
        errors += 1
        case = ET.SubElement(suite, "testcase", name=f"load {model.failed_target}", classname=f"stopdoctor.{model.name}")
        error = ET.SubElement(case, "error", type=type(model.error).__name__, message=model.error.message)
        error.text = model.error.message + (f"\nhint: {model.error.hint}" if model.error.hint else "")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", "0")
    return suite


def render_junit(report: Report, base: Path) -> str:
    root = ET.Element("testsuites", name="stopdoctor")
    suites = [_suite(model, report, base) for model in report.subjects]
    root.extend(suites)
    for attribute in ("tests", "failures", "errors"):
        root.set(attribute, str(sum(int(s.get(attribute, 0)) for s in suites)))
    for element in root.iter():  # every text and attribute: XML 1.0 forbids most controls
        element.text = xml_text(element.text) if element.text is not None else None
        for key, value in element.attrib.items():
            element.set(key, xml_text(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
