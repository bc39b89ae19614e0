"""The pre-commit hook definition, run by pre-commit itself: a throwaway commit of this working tree
is the hook repository (pre-commit clones `rev`, so uncommitted files must be committed somewhere),
and a throwaway consumer repository uses it on a broken and on a fixed model. No network: the
`stopdoctor-check` hook runs the installed `stopdoctor` (language: system)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1"}
    done = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def snapshot_of_this_tree(dest: Path) -> str:
    """Commit the project's tracked and not-ignored files into a new repo; return the commit."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "snapshot")
    return git(dest, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory) -> tuple[Path, str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of stopdoctor")
    if shutil.which("stopdoctor", path=str(BIN)) is None:
        pytest.skip("the stopdoctor console script is not installed next to this Python")
    pytest.importorskip("pre_commit")
    dest = tmp_path_factory.mktemp("hook-repo")
    return dest, snapshot_of_this_tree(dest)


def pre_commit(consumer: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           "PRE_COMMIT_COLOR": "never"}
    return subprocess.run([sys.executable, "-m", "pre_commit", *args], cwd=consumer, env=env,
                          capture_output=True, text=True, timeout=300)


def test_manifest_is_valid(hook_repo):
    repo, _ = hook_repo
    done = pre_commit(repo, repo.parent / "pc-home-validate", "validate-manifest", ".pre-commit-hooks.yaml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_hook_fails_on_a_runaway_model_and_passes_once_fixed(hook_repo, synth_root, tmp_path):
    repo, rev = hook_repo
    consumer = tmp_path / "consumer"
    shutil.copytree(synth_root / "llama3-eot-missing", consumer / "models" / "chat")
    (consumer / "stopdoctor.toml").write_text("models = ['models/chat']\n")
    (consumer / ".pre-commit-config.yaml").write_text(
        f"repos:\n- repo: {repo}\n  rev: {rev}\n  hooks:\n  - id: stopdoctor-check\n    args: [--format, github]\n")
    git(consumer, "init", "-q")
    git(consumer, "add", "-A")
    home = tmp_path / "pre-commit-home"

    broken = pre_commit(consumer, home, "run", "--all-files")
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "title=SD101 end-of-turn-not-a-stop-id" in broken.stdout
    assert "Failed" in broken.stdout

    shutil.rmtree(consumer / "models" / "chat")
    shutil.copytree(synth_root / "clean-llama3", consumer / "models" / "chat")
    git(consumer, "add", "-A")
    fixed = pre_commit(consumer, home, "run", "--all-files")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Passed" in fixed.stdout

    # the files pattern: a commit touching none of the model or config files skips the check
    (consumer / "notes.txt").write_text("unrelated\n")
    git(consumer, "add", "notes.txt")
    skipped = pre_commit(consumer, home, "run", "--files", "notes.txt")
    assert skipped.returncode == 0 and "Skipped" in skipped.stdout, skipped.stdout
