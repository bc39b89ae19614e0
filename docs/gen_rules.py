"""Write the manual's rule pages, docs/rules/index.md and docs/rules/SDxxx.md, from the rule registry
(each rule's code, name, severity, input and docstring) and its fixtures under tests/rules/.

    python docs/gen_rules.py          # write the pages (commit them)
    python docs/gen_rules.py --check  # exit 1, naming them, when the pages on disk are stale

tests/test_docs.py runs the same comparison, so a rule added or changed without its page fails CI.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from stopdoctor.reporters.rule_docs import PAGE_NAME, FixtureCase, rule_pages

ROOT = Path(__file__).resolve().parents[1]
PAGES = ROOT / "docs" / "rules"


def fixture_cases() -> dict[str, tuple[FixtureCase, ...]]:
    """Each rule's fixture cases (tests/rules/<CODE>/{positive,negative}/case.toml), positive first."""
    out = {}
    for folder in sorted((ROOT / "tests" / "rules").glob("SD*")):
        cases = []
        for which in ("positive", "negative"):
            case = folder / which / "case.toml"
            if case.is_file():
                data = tomllib.loads(case.read_text(encoding="utf-8"))
                cases.append(FixtureCase(which, data.get("about", ""), tuple(data.get("args", ()))))
        out[folder.name] = tuple(cases)
    return out


def expected() -> dict[Path, str]:
    return {PAGES / name: text for name, text in rule_pages(fixture_cases()).items()}


def stale() -> list[str]:
    """The pages that differ from what the registry gives, and rule pages no rule has any more."""
    want = expected()
    wrong = [path.name for path, text in want.items() if not path.is_file() or path.read_text(encoding="utf-8") != text]
    wrong += [path.name for path in PAGES.glob("*.md") if PAGE_NAME.match(path.name) and path not in want]
    return sorted(wrong)


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        wrong = stale()
        if wrong:
            print(f"stale rule pages: {', '.join(wrong)}; regenerate with: python docs/gen_rules.py", file=sys.stderr)
        return 1 if wrong else 0
    if argv:
        print("usage: python docs/gen_rules.py [--check]", file=sys.stderr)
        return 2
    PAGES.mkdir(parents=True, exist_ok=True)
    want = expected()
    for path in PAGES.glob("*.md"):
        if PAGE_NAME.match(path.name) and path not in want:
            path.unlink()
    for path, text in want.items():
        path.write_text(text, encoding="utf-8")
    print(f"wrote {len(want)} pages under {PAGES.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
