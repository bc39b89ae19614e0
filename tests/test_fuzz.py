"""A share of tests/fuzz.py in CI: random hostile model files, GGUF headers, templates, serving
files, training datasets (labels), response logs and arguments through the CLI; none may exit 3,
print a traceback, hang or pass the memory limit. `python tests/fuzz.py --cases 1000 --seed N` runs more of them."""

from __future__ import annotations

import os
import sys
import time

import pytest

from . import fuzz

# slow as well: out of the quick loop (`pytest -m "not slow"`), in the full suite; the runner's own
# test goes with the fuzzers it guards (it waits out a 3 s hang on purpose)
pytestmark = [pytest.mark.fuzz, pytest.mark.slow]

CI_CASES = int(os.environ.get("STOPDOCTOR_FUZZ_CASES", "160"))  # about 40-60 s on 2 cores


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="the runner forks a child per case")
def test_random_hostile_inputs_never_crash_hang_or_blow_up(tmp_path):
    report = fuzz.fuzz(CI_CASES, seed=int(os.environ.get("STOPDOCTOR_FUZZ_SEED", "20261201")), jobs=2, keep=tmp_path)
    print(report.summary())
    assert len(report.outcomes) == CI_CASES
    assert not report.failures, report.summary()
    kinds = {o.case.kind for o in report.outcomes}
    assert kinds == {"json", "template", "gguf", "serving", "args", "labels", "logs"}, kinds


def test_the_runner_sees_exit_3_hangs_and_memory(tmp_path, monkeypatch):
    """The fuzz would pass vacuously if the runner missed failures: show it catches each kind."""
    import stopdoctor.api


    def crash(*args, **kwargs):
        raise RuntimeError("boom")

    def hang(*args, **kwargs):
        time.sleep(60)

    def hog(*args, **kwargs):
        from stopdoctor.core.errors import InputError

        block = bytearray(b"x") * (700 * 1024 * 1024)  # written, so resident
        raise InputError(f"held {len(block)} bytes")

    cases = [fuzz.Case("probe", ["inspect", str(tmp_path)], name) for name in ("crash", "hang", "hog")]
    outcomes = {}
    for case, behaviour in zip(cases, (crash, hang, hog)):
        monkeypatch.setattr(stopdoctor.api, "inspect_model", behaviour)
        # a short limit only where the hang is the point: on a busy machine writing 700 MB can
        # take seconds, and the hog must be caught by its memory, not by the clock
        monkeypatch.setattr(fuzz, "MAX_SECONDS", 3.0 if behaviour is hang else 120.0)
        outcomes[case.note] = fuzz.run_cases([case], tmp_path, jobs=1).outcomes[0]
    assert outcomes["crash"].failed == "exit 3"
    assert outcomes["hang"].failed.startswith("ran past")
    assert outcomes["hog"].failed is not None and "memory" in outcomes["hog"].failed


ROUND2_CASES = int(os.environ.get("STOPDOCTOR_FUZZ2_CASES", "64"))  # about 20-30 s on 2 cores


@pytest.mark.fuzz
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform == "darwin", reason="the runner forks a child per case")
def test_round2_hostile_classes_never_crash_hang_blow_up_or_half_write(tmp_path):
    """Issue #17's classes at random (tests/fuzz_hostile.py): no exit 3, traceback, hang, run over the
    memory limit, or fix --write that changed one file of two."""
    from . import fuzz_hostile

    report = fuzz_hostile.fuzz_hostile(ROUND2_CASES, seed=int(os.environ.get("STOPDOCTOR_FUZZ_SEED", "20261217")),
                                       jobs=2, keep=tmp_path)
    print(report.summary())
    assert len(report.outcomes) == ROUND2_CASES
    assert not report.failures, report.summary()
    assert not report.partial_writes, report.partial_writes
    assert {o.case.kind for o in report.outcomes} == set(fuzz_hostile.KINDS)
