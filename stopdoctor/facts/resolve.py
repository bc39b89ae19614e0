"""Resolve a MODEL spec (local folder, hub id, .gguf file) into local files: a `ModelSource`.

The only module that knows hub ids. It downloads config-, tokenizer- and template-sized files
only, never weights, and honours HF_HUB_OFFLINE, HF_ENDPOINT and the HF cache. For `inspect
--weights` on a hub id, `hub_weight_file` gives a weight file as a `ByteSource`: the HF cache's copy
when it holds one, else a `RangeReader` (`stopdoctor.facts.remote`) that reads only the byte
ranges asked for; `hub_small_file` fetches one config-sized file (a shard index) into the cache.
A hostile hub is bounded: huggingface_hub's client asks for identity encoding and refuses any
other (a gzip bomb is never expanded into the cache), stops a body past MAX_HUB_FILE_BYTES, and
the fetch of a model's files ends after HUB_FILES_S seconds in all; messages never carry the
credentials of HF_ENDPOINT nor the server's controls.
Imports: core (errors, types), facts.remote (huggingface_hub and its httpx2 lazily, for hub ids only).
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

# Config-sized files: the largest real one is a tokenizer.json (Gemma 3's: 33 MB).
MAX_HUB_FILE_BYTES = 256 * 1024 * 1024
HUB_FILES_S = 300.0

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
    _bound_hub_client()
    try:
        local = _within(HUB_FILES_S, repo_id, lambda: snapshot_download(repo_id, revision=revision, allow_patterns=patterns))
    except _HubRefused as exc:
        raise InputError(f"{repo_id}: {exc}") from None
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
        raise InputError(f"{repo_id}: could not be fetched: {_said(exc)}") from None
    except (TypeError, KeyError, ValueError, AttributeError) as exc:  # an answer no hub gives, met inside huggingface_hub
        raise InputError(f"{repo_id}: the hub's answer is not one huggingface_hub can read ({type(exc).__name__}: "
                         f"{_said(exc)})") from None
    return _folder(repo_id, Path(local), "hub", revision)


def _said(exc: BaseException) -> str:
    """An error of huggingface_hub or the server as one line: no credentials, no controls."""
    from stopdoctor.facts.remote import server_text, without_credentials

    return server_text(without_credentials(str(exc)), 300)


class _HubRefused(Exception):
    """The hub's answer was refused (an encoding, a size, a time): the message says why."""


def _within(seconds: float, what: str, call):
    """call() in a daemon thread, given `seconds` in all: a server that never answers, or drips,
    ends the command (the thread dies with the process) instead of holding it."""
    import threading

    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True, name="stopdoctor-hub")
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        from huggingface_hub import constants

        from stopdoctor.facts.remote import shown_host

        raise _HubRefused(f"the hub at {shown_host(constants.ENDPOINT)} did not answer within {seconds:g} s in all")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("value")


_BOUND = False


def _bound_hub_client() -> None:
    """huggingface_hub's HTTP client, once a process: identity encoding asked and required, each
    body cut at MAX_HUB_FILE_BYTES."""
    global _BOUND
    if _BOUND:
        return
    import httpx2
    from huggingface_hub import set_client_factory
    from huggingface_hub.utils._http import hf_request_event_hook

    from stopdoctor.facts.remote import server_text

    class Capped(httpx2.SyncByteStream):
        def __init__(self, stream, url: str) -> None:
            self.stream, self.url = stream, url

        def __iter__(self):
            seen = 0
            for chunk in self.stream:
                seen += len(chunk)
                if seen > MAX_HUB_FILE_BYTES:
                    raise _HubRefused(f"{server_text(self.url.rsplit('/', 1)[-1], 80)} is over {MAX_HUB_FILE_BYTES:,} bytes: "
                                      "no configuration or tokenizer file is that big")
                yield chunk

        def close(self) -> None:
            self.stream.close()

    class Bounded(httpx2.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx2.HTTPTransport()

        def handle_request(self, request):
            request.headers["Accept-Encoding"] = "identity"
            response = self.inner.handle_request(request)
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            name = server_text(request.url.path.rsplit("/", 1)[-1], 80)
            if encoding not in ("", "identity"):
                response.close()
                raise _HubRefused(f"the hub answered {name} with Content-Encoding {server_text(encoding, 40)!r} when asked "
                                  "for none: a compressed answer is not expanded into the cache")
            length = response.headers.get("content-length", "")
            if length.isdigit() and int(length) > MAX_HUB_FILE_BYTES and request.method != "HEAD":
                response.close()
                raise _HubRefused(f"{name} is {int(length):,} bytes, over {MAX_HUB_FILE_BYTES:,}: no configuration or "
                                  "tokenizer file is that big")
            return httpx2.Response(response.status_code, headers=response.headers, stream=Capped(response.stream, str(request.url)),
                                   extensions=response.extensions, request=request)

        def close(self) -> None:
            self.inner.close()

    set_client_factory(lambda: httpx2.Client(event_hooks={"request": [hf_request_event_hook]}, follow_redirects=True,
                                             timeout=None, transport=Bounded()))
    _BOUND = True


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

    _bound_hub_client()
    try:
        return Path(_within(HUB_FILES_S, source.spec,
                            lambda: hf_hub_download(source.spec, filename, revision=_hub_revision(source))))
    except (EntryNotFoundError, LocalEntryNotFoundError):
        return None  # not in the repository; offline, the weight file's own check says why
    except _HubRefused as exc:
        raise InputError(f"{source.spec}: could not fetch {filename}: {exc}") from None
    except OSError as exc:
        raise InputError(f"{source.spec}: could not fetch {filename}: {_said(exc)}") from None


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
