"""Resolve a MODEL spec (local folder, hub id, .gguf file) into local files: a `ModelSource`.

The only module that knows hub ids. It downloads config-, tokenizer- and template-sized files
only, never weights, and honours HF_HUB_OFFLINE, HF_ENDPOINT and the HF cache. For `inspect
--weights` on a hub id, `hub_weight_file` gives a weight file as a `ByteSource`: the HF cache's copy
when it holds one, else a `RangeReader` (`stopdoctor.facts.remote`) that reads only the byte
ranges asked for; `hub_small_file` fetches one config-sized file (a shard index) into the cache.
Imports: core (errors, types), facts.remote (huggingface_hub lazily, for hub ids only).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from stopdoctor.core.errors import InputError, shorten
from stopdoctor.core.types import ModelSource

if TYPE_CHECKING:
    from stopdoctor.facts.remote import RangeReader

# Files whose content describes stopping behaviour; all small except tokenizer.json.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.json",
    "chat_template.jinja",
    "chat_template.json",
    "README.md",
)
# transformers >= 4.54 saves extra named templates here, one file each.
NAMED_TEMPLATE_DIR = "additional_chat_templates"

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def resolve(spec: str, revision: str | None = None) -> ModelSource:
    try:
        return _resolve(spec, revision)
    except OSError as exc:  # a name too long for the file system, a loop of links, …
        raise InputError(f"{shorten(spec, 80)}: cannot be read: {exc.strerror or exc}") from None


def _resolve(spec: str, revision: str | None) -> ModelSource:
    if not spec.strip():
        # Path("") is the current folder: an empty argument (an unset shell variable) must not
        # inspect whatever folder the command runs in.
        raise InputError("empty model argument", hint="pass a local model folder, a .gguf file, or a hub id org/name")
    path = Path(spec).expanduser()
    if path.is_dir():
        return _folder(spec, path, "folder")
    if path.is_file():
        if path.suffix.lower() == ".gguf" or _has_gguf_magic(path):
            return ModelSource(spec=spec, kind="gguf", root=path.parent, files={path.name: path})
        raise InputError(
            f"{shorten(spec, 80)}: is a file but not a .gguf model",
            hint="pass the model folder (the one holding config.json), a hub id org/name, or a .gguf file",
        )
    if path.exists():
        raise InputError(f"{shorten(spec, 80)}: is neither a folder nor a file")
    if HUB_ID.match(spec) and not spec.startswith((".", "/")):
        if path.parent.is_dir():
            # "models/my-finetun": its folder is here, so this is a path with a typo, not a hub id.
            raise InputError(f"{shorten(spec, 80)}: no such folder or file in {shorten(str(path.parent), 80)}/", hint=_near(path))
        return _hub(spec, revision)
    raise InputError(f"{shorten(spec, 80)}: no such folder or file, and not a hub id of the form org/name", hint=_near(path))


def _near(path: Path) -> str:
    import difflib

    names = sorted(p.name for p in path.parent.iterdir()) if path.parent.is_dir() else []
    close = difflib.get_close_matches(path.name, names, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(str(path.parent / name) for name in close) + "?"
    return "pass a local model folder, a .gguf file, or a Hugging Face hub id"


def _has_gguf_magic(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == b"GGUF"
    except OSError:
        return False


def _folder(spec: str, root: Path, kind: str, revision: str | None = None) -> ModelSource:
    files = {name: root / name for name in MODEL_FILES if (root / name).is_file()}
    named = root / NAMED_TEMPLATE_DIR
    if named.is_dir():
        for template in sorted(named.glob("*.jinja")):
            files[f"{NAMED_TEMPLATE_DIR}/{template.name}"] = template
    ggufs = sorted(p for p in root.glob("*.gguf") if p.is_file())  # a named pipe would block the read
    if not (files.keys() - {"README.md"}):
        if len(ggufs) == 1:
            return ModelSource(spec=spec, kind="gguf", root=root, files={ggufs[0].name: ggufs[0]})
        hint = "name one .gguf file" if ggufs else "a model folder holds config.json, tokenizer_config.json, …"
        raise InputError(f"{spec}: no model files found (config.json, tokenizer files, templates)", hint=hint)
    return ModelSource(spec=spec, kind=kind, root=root, files=files, revision=revision)


def _hub(repo_id: str, revision: str | None) -> ModelSource:
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import (
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a dependency
        raise InputError("huggingface_hub is needed to resolve hub ids") from exc
    patterns = [*MODEL_FILES, f"{NAMED_TEMPLATE_DIR}/*.jinja"]
    try:
        local = snapshot_download(repo_id, revision=revision, allow_patterns=patterns)
    except LocalEntryNotFoundError as exc:
        raise InputError(
            f"{repo_id}: no such local folder, and not in the local Hugging Face cache; the hub cannot be reached"
            f"{' (HF_HUB_OFFLINE is set)' if _offline() else ''}",
            hint="check the path for a typo; or download the hub model once with network access",
        ) from exc
    except GatedRepoError as exc:
        raise InputError(f"{repo_id}: gated repository; log in with `hf auth login` and accept its terms") from exc
    except RevisionNotFoundError as exc:
        raise InputError(f"{repo_id}: revision {revision!r} not found") from exc
    except RepositoryNotFoundError as exc:
        raise InputError(f"{repo_id}: no such local folder, and no such model on the hub (or it is private)") from exc
    except OSError as exc:
        raise InputError(f"{repo_id}: could not be fetched: {exc}") from exc
    return _folder(repo_id, Path(local), "hub", revision)


def _offline() -> bool:
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}


# --- weights of hub models (inspect --weights) ----------------------------------------------

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _hub_revision(source: ModelSource) -> str:
    """The commit the config files came from (the cache's snapshot folder is named by it), so
    the weights read are the same revision's."""
    return source.root.name if _COMMIT.match(source.root.name) else (source.revision or "main")


def hub_small_file(source: ModelSource, filename: str) -> Path | None:
    """A config-sized file of a hub model (a shard index), from the HF cache or downloaded into
    it; None when the repository has no such file (or, offline, the cache does not hold it)."""
    local = source.root / filename
    if local.is_file():
        return local
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(source.spec, filename, revision=_hub_revision(source)))
    except (EntryNotFoundError, LocalEntryNotFoundError):
        return None  # not in the repository; offline, the weight file's own check says why
    except OSError as exc:
        raise InputError(f"{source.spec}: could not fetch {filename}: {shorten(str(exc), 200)}") from None


def hub_weight_file(source: ModelSource, filename: str) -> Path | RangeReader:
    """One weight file of a hub model: the cached copy's path when the HF cache holds it, else a
    reader of byte ranges of the file at HF_ENDPOINT (never a download of the whole file)."""
    cached = source.root / filename
    if cached.is_file():
        return cached
    if _offline():
        raise InputError(f"{source.spec}: {filename} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set",
                         hint="unset HF_HUB_OFFLINE: --weights then reads only the header and the rows it needs over HTTP")
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    from stopdoctor.facts.remote import RangeReader

    url = hf_hub_url(source.spec, filename, revision=_hub_revision(source))
    return RangeReader(url, f"{source.spec}/{filename}", build_hf_headers())
