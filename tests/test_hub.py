"""Hub ids resolve through the HF cache (tests build the cache layout; no network)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .helpers import cli

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache_repo(synth_root: Path, repo_id: str, case: str, revision: str = "main") -> Path:
    cache = Path(os.environ["HF_HUB_CACHE"])
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True, exist_ok=True)
    for file in (synth_root / case).iterdir():
        shutil.copy(file, snapshot / file.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(COMMIT)
    return snapshot


def test_hub_id_resolves_from_cache_offline(synth_root):
    _cache_repo(synth_root, "synth-org/llama3-broken", "llama3-eot-missing")
    run = cli("inspect", "--json", "synth-org/llama3-broken")
    assert run.code == 1
    doc = run.json()
    assert doc["model"]["kind"] == "hub"
    assert doc["model"]["spec"] == "synth-org/llama3-broken"
    assert [f["name"] for f in doc["findings"]] == ["end-of-turn-not-a-stop-id"]


def test_hub_revision_from_cache(synth_root):
    _cache_repo(synth_root, "synth-org/chatml", "clean-chatml", revision="v1")
    run = cli("inspect", "--json", "--revision", "v1", "synth-org/chatml")
    assert run.code == 0
    assert run.json()["model"]["revision"] == "v1"


def test_hub_id_not_cached_offline_is_one_line_exit_2():
    run = cli("inspect", "nobody-here/not-cached")
    assert run.code == 2
    first = run.stderr.splitlines()[0]
    assert first == ("stopdoctor: error: nobody-here/not-cached: no such local folder, and not in the local "
                     "Hugging Face cache; the hub cannot be reached (HF_HUB_OFFLINE is set)")


def test_never_downloads_weights_patterns():
    from stopdoctor.facts.resolve import MODEL_FILES

    assert not any(name.endswith((".safetensors", ".bin", ".pt", ".gguf")) for name in MODEL_FILES)


def test_fix_of_a_hub_model_is_decided_by_the_plan_not_the_cli(synth_root):
    """A hub model's files live in the shared cache: the fix plan (what `api` users get too) offers
    no edit there, only a note; the CLI shows that note and writes nothing."""
    from stopdoctor.api import inspect_model
    from stopdoctor.fix import plan_fixes

    snapshot = _cache_repo(synth_root, "synth-org/llama3-fixme", "llama3-eot-missing")
    before = {p.name: p.read_bytes() for p in snapshot.iterdir()}
    plan = plan_fixes(inspect_model("synth-org/llama3-fixme").analysis)
    assert plan.edits == () and any("is a hub model" in note for note in plan.notes)
    run = cli("fix", "synth-org/llama3-fixme", "--write", "--json")
    # nothing is written, and the exit code is check's: the defect remains, to be fixed by hand
    assert "is a hub model" in run.stderr and "remains" in run.stderr
    assert run.code == cli("check", "synth-org/llama3-fixme").code == 1
    assert {p.name: p.read_bytes() for p in snapshot.iterdir()} == before
