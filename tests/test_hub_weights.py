"""`inspect HUB_ID --weights` reads the safetensors headers and the rows it needs with HTTP Range
requests (never the whole file): a local stand-in for the hub (tests/hub_server.py) serves the real
SmolLM2 folder, its zeroed copy and sharded copies; HF_ENDPOINT points the command at it. The
verdict must equal the local folder's, and the bytes the server sent must be a tiny fraction of
the files. Bad answers (no Range support, 404, truncated) are one line and exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import cli
from .hub_server import COMMIT, FakeHub

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def hub(real_models, broken_weights):
    from fixtures.broken_weights import sharded_hf
    from fixtures.derived import kept

    from .weights_fixture import derived_root

    root, hf, zeroed = derived_root(real_models), real_models.smollm2_hf, broken_weights.zeroed_hf
    sharded = kept(root, "smollm2-sharded", lambda target: sharded_hf(hf, target), hf)
    repos = {
        "test-org/smollm2": hf,
        "test-org/smollm2-zeroed": zeroed,
        "test-org/smollm2-sharded": sharded,
        "test-org/smollm2-sharded-zeroed": kept(root, "smollm2-sharded-zeroed",
                                                lambda target: sharded_hf(zeroed, target, like=sharded), zeroed, sharded),
    }
    server = FakeHub(repos)
    yield server
    server.close()


def _inspect_over_http(hub: FakeHub, repo: str, tmp_path: Path, *extra: str, **env_extra: str) -> subprocess.CompletedProcess:
    """`stopdoctor inspect --weights` on a hub id, in a fresh process (huggingface_hub reads
    HF_ENDPOINT when imported), with an empty HF cache."""
    env = dict(os.environ, HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="0", HF_HOME=str(tmp_path / "hf"),
               HF_HUB_CACHE=str(tmp_path / "hf" / "hub"), HF_HUB_DISABLE_PROGRESS_BARS="1",
               PYTHONPATH=str(ROOT), NO_COLOR="1", **env_extra)
    return subprocess.run([sys.executable, "-m", "stopdoctor", "inspect", "--weights", *extra, repo], env=env,
                          capture_output=True, text=True, timeout=120)


def _verdict(document: dict) -> dict:
    """What inspect --weights concluded, without timings and where the bytes came from."""
    weights = {k: v for k, v in document["weights"].items() if k not in ("seconds", "http")}
    findings = [(f["code"], f["message"]) for f in document["findings"]]
    return {"weights": weights, "findings": findings}


@pytest.mark.parametrize("repo", ["test-org/smollm2", "test-org/smollm2-zeroed", "test-org/smollm2-sharded",
                                  "test-org/smollm2-sharded-zeroed"])
def test_hub_weights_by_range_requests_match_the_local_folder(hub, tmp_path, repo):
    folder = hub.repos[repo]
    expected = cli("inspect", "--weights", "--json", str(folder))
    hub.sent.clear()
    hub.requests.clear()
    run = _inspect_over_http(hub, repo, tmp_path, "--json")
    assert run.returncode == expected.code, run.stderr
    document = json.loads(run.stdout)
    assert _verdict(document) == _verdict(expected.json())
    assert document["model"]["kind"] == "hub"
    assert ("SD801" in [f["code"] for f in document["findings"]]) == ("zeroed" in repo)
    # only the weight files' headers and rows travelled: a tiny fraction of the files
    weight_files = [name for name in hub.sent if name.endswith(".safetensors")]
    sent = sum(hub.sent[name] for name in weight_files)
    size = sum(path.stat().st_size for path in folder.glob("*.safetensors"))
    http = document["weights"]["http"]
    assert http["bytes"] == sent and http["host"] == hub.url.split("//")[1]
    assert 0 < sent < size / 200, (sent, size)
    if "sharded" in repo:
        # tied embeddings: the shard without the embedding is never read
        assert weight_files == ["model-00002-of-00002.safetensors"]
        assert http["file_bytes"] < size
        # and the shards hold the same rows as the single file they were split from
        single = hub.repos[repo.replace("-sharded", "")]
        assert document["weights"]["rows"] == cli("inspect", "--weights", "--json", str(single)).json()["weights"]["rows"]


def test_hub_weights_follow_the_hubs_redirect(hub, tmp_path):
    """The hub answers a weight file with a 302 to a CDN: the first range request follows it, the
    rest go straight to where it led."""
    hub.mode = "redirect"
    hub.requests.clear()
    hub.cdn_authorization.clear()
    try:
        run = _inspect_over_http(hub, "test-org/smollm2-zeroed", tmp_path, "--json", HF_TOKEN="hf_not_for_the_cdn")
    finally:
        hub.mode = "ok"
    assert hub.cdn_authorization == []  # the token never travels to the redirect's host
    assert run.returncode == 1, run.stderr
    assert "SD801" in [f["code"] for f in json.loads(run.stdout)["findings"]]
    assert hub.requests["redirect/model.safetensors"] == 1  # later requests go straight to the target
    assert hub.requests["cdn/model.safetensors"] == json.loads(run.stdout)["weights"]["http"]["requests"] > 1


def test_hub_weights_text_says_what_travelled(hub, tmp_path):
    run = _inspect_over_http(hub, "test-org/smollm2", tmp_path)
    assert run.returncode == 0, run.stderr
    line = next(line for line in run.stdout.splitlines() if "read over HTTP" in line)
    assert f"of {538_090_408:,} bytes" in line and "range requests" in line


@pytest.mark.parametrize("mode, says", [
    ("no-range", "answered HTTP 200 to a range request: it does not serve byte ranges"),
    ("404", "test-org/smollm2/model.safetensors: not found on"),
    ("truncated", "the answer was truncated"),
])
def test_bad_server_answers_are_one_line_and_exit_2(hub, tmp_path, mode, says):
    hub.mode = mode
    hub.sent.clear()
    try:
        run = _inspect_over_http(hub, "test-org/smollm2", tmp_path)
    finally:
        hub.mode = "ok"
    assert run.returncode == 2, run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("stopdoctor: error:")]
    assert len(errors) == 1 and says in errors[0], run.stderr
    assert "Traceback" not in run.stderr
    # a server that ignores Range is hung up on: the whole file is never read
    assert hub.sent["model.safetensors"] < 538_090_408 / 4


def _cache_snapshot(repo_id: str, folder: Path, with_weights: bool) -> Path:
    """`folder` as the HF cache's snapshot of `repo_id` (config files; the weights too when asked)."""
    repo = Path(os.environ["HF_HUB_CACHE"]) / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True, exist_ok=True)
    for item in folder.iterdir():
        if item.is_file() and (with_weights or not item.name.endswith(".safetensors")):
            try:  # the weights linked where they can be (the models' cache may be on another file system)
                os.link(item, snapshot / item.name) if item.suffix == ".safetensors" else shutil.copy(item, snapshot / item.name)
            except OSError:
                shutil.copy(item, snapshot / item.name)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def test_offline_hub_weights_come_from_the_hf_cache(broken_weights):
    _cache_snapshot("cached-org/smollm2-zeroed", broken_weights.zeroed_hf, with_weights=True)
    run = cli("inspect", "--weights", "--json", "cached-org/smollm2-zeroed")
    expected = cli("inspect", "--weights", "--json", str(broken_weights.zeroed_hf))
    assert run.code == expected.code == 1
    assert _verdict(run.json()) == _verdict(expected.json())
    assert run.json()["weights"]["http"] is None


def test_offline_hub_weights_not_cached_is_one_line(real_models):
    _cache_snapshot("cached-org/smollm2-no-weights", real_models.smollm2_hf, with_weights=False)
    run = cli("inspect", "--weights", "cached-org/smollm2-no-weights")
    assert run.code == 2
    assert run.stderr.splitlines()[0] == ("stopdoctor: error: cached-org/smollm2-no-weights: model.safetensors is not in "
                                          "the local Hugging Face cache and HF_HUB_OFFLINE is set")
