"""Check that `inspect --json` and `inspect --weights --json` give the same document, exit code and
error as another checkout (main), on the test models and the real-world folders:

    python benchmarks/check_inspect_same.py --baseline TREE [--models DIR] [--realworld DIR] [--jobs N]

The documents are compared whole, but for the `seconds` fields (time taken). Exit 1 on any difference.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(tree: Path, args: list[str]) -> tuple[int, object, str]:
    done = subprocess.run([sys.executable, "-m", "stopdoctor", *args], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    try:
        document = _untimed(json.loads(done.stdout)) if done.stdout.strip() else None
    except ValueError:
        document = done.stdout
    return done.returncode, document, done.stderr


def _untimed(value: object) -> object:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "seconds"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--models", type=Path, default=Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache/stopdoctor/test-models")))
    parser.add_argument("--realworld", type=Path, default=ROOT.parent / "shared" / "realworld")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    subjects = sorted(p for p in args.models.iterdir() if p.name != "wheels" and (p.is_dir() or p.suffix == ".gguf"))
    subjects += sorted(p for p in args.realworld.iterdir() if p.is_dir())
    cases = [[*flags, "--json", str(subject)] for subject in subjects for flags in (["inspect"], ["inspect", "--weights"])]

    def compare(case: list[str]) -> tuple[list[str], bool, str]:
        mine, theirs = run(ROOT, case), run(args.baseline, case)
        same = mine == theirs
        return case, same, "" if same else f"exit {theirs[0]} -> {mine[0]}; stderr {theirs[2][-200:]!r} -> {mine[2][-200:]!r}"

    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for case, same, why in pool.map(compare, cases):
            failed += not same
            print(f"{'same' if same else 'DIFFERENT':9} {' '.join(case[:-1]):24} {Path(case[-1]).name} {why}")
    print(f"{len(cases)} runs, {failed} different")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
