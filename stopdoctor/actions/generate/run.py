"""The runtime: generate text with a model and stop exactly as a chosen runtime would.

Two engines behind one small interface (`generate(prompt, stops, budget, sampling) -> Generation`):
`LocalEngine` runs the model with transformers + torch in its own decoding loop (forward with the
KV cache, greedy argmax or sampling), stopping per step on stop ids and on stop strings matched in
the decoded text with hold-back, and tracing every step; `ServerEngine` asks any OpenAI-compatible
endpoint (vLLM, TGI, llama.cpp server, Ollama, `transformers serve`) through urllib and keeps what
the server returned. `run_generate` builds the prompt and the stop set from the model's facts,
runs an engine and diagnoses the result (`stopdoctor.analysis.diagnose`).

The only module that imports torch and transformers models, and only inside functions: importing
it stays cheap and works without the `runtime` extra (the server engine needs neither).
Imports: model, errors, facts, analysis, runtimes, template, stopmatch, diagnose.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stopdoctor.analysis.core import Analysis, analyze
from stopdoctor.analysis.diagnose import FINISH_LENGTH, FINISH_STOP, Diagnosis, Generation, Step, StopCause, TurnEnder, diagnose, turn_enders, turn_headers
from stopdoctor.core.errors import InputError, MissingDependencyError
from stopdoctor.facts.model_facts import ModelFacts, load_facts
from stopdoctor.core.types import Location, ModelSource
from stopdoctor.runtimes.stops import RUNTIMES, StopId, dedupe, primary_runtime
from stopdoctor.facts.resolve import resolve
from stopdoctor.actions.generate.stopmatch import IncrementalDetokenizer, StopStringMatcher
from stopdoctor.template.sandbox import render_chat, render_deadline

INSTALL_HINT = "pip install 'stopdoctor[runtime]'  (torch and accelerate)"
USER_STOP = Location("--stop-id")


# --------------------------------------------------------------------------------------------
# Settings: prompt, stops, sampling
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """Greedy when temperature is 0 (the default), as every runtime's temperature=0 is."""

    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class Prompt:
    text: str
    ids: tuple[int, ...]
    templated: bool
    messages: tuple[dict, ...] = ()


@dataclass(frozen=True)
class StopSet:
    """What generation stops on. `source` names whose set the ids are ("transformers", "vllm",
    "llama.cpp", "--stop-id", ...), `rule` how that set was chosen."""

    ids: tuple[StopId, ...]
    strings: tuple[str, ...]
    source: str
    rule: str

    @property
    def id_list(self) -> list[int]:
        return sorted({s.id for s in self.ids})


def resolve_stops(analysis: Analysis, stops: str | None, stop_ids: list[int], stop_strings: list[str]) -> StopSet:
    """`stops` is "model" (the model's own runtime), "runtime:NAME", "none", or None (model,
    unless --stop-id gives the ids). --stop-id ids are added to an explicit --stops set."""
    facts = analysis.facts
    if any(not s for s in stop_strings):
        raise InputError("--stop must not be empty", hint="an empty stop string would match before the first character")
    chosen: list[StopId] = []
    sources: list[str] = []
    rules: list[str] = []
    spec = stops if stops is not None else (None if stop_ids else "model")
    if spec is not None:
        name = spec.strip()
        if name == "model":
            name = primary_runtime(facts)
        elif name.startswith("runtime:"):
            name = name.split(":", 1)[1]
        elif name != "none":
            raise InputError(f"--stops {spec!r}: not understood",
                             hint=f"use model, none, or runtime:NAME with NAME one of {', '.join(RUNTIMES)}")
        if name != "none":
            if name not in RUNTIMES:
                raise InputError(f"--stops: unknown runtime {name!r}", hint=f"one of {', '.join(RUNTIMES)}")
            runtime = analysis.runtime(name)
            chosen.extend(runtime.stops)
            sources.append(name)
            rules.append(runtime.rule)
    size = facts.vocab.size
    for token_id in stop_ids:
        if token_id < 0 or (size is not None and facts.vocab.complete and token_id >= size):
            raise InputError(f"--stop-id {token_id}: not an id of this vocabulary (size {size})")
        chosen.append(StopId(token_id, facts.vocab.text_of(token_id), USER_STOP))
    if stop_ids:
        sources.append("--stop-id")
        rules.append("ids given with --stop-id")
    return StopSet(tuple(dedupe(chosen)), tuple(dict.fromkeys(stop_strings)), " + ".join(sources) or "none",
                   "; ".join(rules) or "no stop ids")


def build_prompt(facts: ModelFacts, *, messages: list[dict] | None = None, prompt: str | None = None,
                 raw: bool = False) -> Prompt:
    """Templated (the default): messages through the model's chat template with the generation
    prompt, encoded without adding special tokens (the template writes them), as
    apply_chat_template does. Raw: the text as a completion endpoint takes it, with BOS added when
    the model's files ask for it."""
    tokenizer = facts.vocab.tokenizer()
    if raw:
        if prompt is None:
            raise InputError("--raw needs --prompt TEXT", hint="messages always go through the chat template")
        ids = list(tokenizer.encode(prompt, add_special_tokens=True).ids)
        bos = next((d.id for d in facts.declared_for("bos") if d.id is not None), None)
        if facts.add_bos is not None and facts.add_bos.value and bos is not None and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        return Prompt(prompt, tuple(ids), False)
    if messages is None:
        if prompt is None:
            raise InputError("nothing to generate from", hint='give -m user "text", --messages FILE, or --prompt TEXT')
        messages = [{"role": "user", "content": prompt}]
    template = facts.template
    if template is None:
        raise InputError("this model has no chat template, so messages cannot be rendered",
                         hint="use --prompt TEXT --raw for a plain completion")
    text = render_chat(template.source, messages, add_generation_prompt=True, special_tokens=facts.special_token_texts())
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return Prompt(text, tuple(ids), True, tuple(messages))


def read_messages(path: Path) -> list[dict]:
    """A JSON list of {role, content} messages (or {"messages": [...]})."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"{path}: cannot be read: {error.strerror}") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not valid JSON: {error.msg} at line {error.lineno}") from None
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list) or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in data):
        raise InputError(f"{path}: expected a JSON list of messages with a role", hint='[{"role": "user", "content": "Hi"}]')
    return data


def _cause_for_id(stop: StopId, facts: ModelFacts, step: int) -> StopCause:
    eos_ids = {d.id for d in facts.declared_for("eos")}
    kind = "eos" if stop.location != USER_STOP and stop.id in eos_ids else "stop_id"
    return StopCause(kind, stop.id, stop.text if stop.text is not None else facts.vocab.text_of(stop.id),
                     stop.location, step=step)


# --------------------------------------------------------------------------------------------
# Local engine: transformers + torch, our own decoding loop
# --------------------------------------------------------------------------------------------


Progress = Callable[[str], None]


def cpu_threads(environ: Mapping[str, str] | None = None) -> int:
    """Threads for CPU decoding: the cores this process may use that are not already busy.
    Decoding one sequence is many small steps; threads that wait for a busy core make each step
    slower, not faster (on 2 busy cores one thread was 3.6x faster than torch's default of 2).
    STOPDOCTOR_THREADS overrides."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("STOPDOCTOR_THREADS", "").strip()
    if explicit:
        try:
            return max(1, int(explicit))
        except ValueError:
            raise InputError(f"STOPDOCTOR_THREADS={explicit!r}: not a whole number") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        others = max(0.0, os.getloadavg()[0] - 1.0)  # the load besides this process
    except OSError:
        others = 0.0
    return max(1, min(cores, int(cores - others + 0.5)))


def converted_gguf_folder(gguf: Path) -> Path:
    """Where the transformers copy of `gguf` is cached: keyed by the file's identity (path, size,
    modification time) and the transformers version that converted it."""
    import hashlib

    import transformers

    from stopdoctor.facts.vocab import cache_dir

    stat = gguf.stat()
    key = f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}:{transformers.__version__}"
    return cache_dir() / "gguf-models" / hashlib.sha256(key.encode()).hexdigest()[:32]


def _save_converted(model: Any, folder: Path, gguf: Path) -> None:
    """Write the converted model into the cache atomically (a folder renamed into place), and drop
    older conversions of the same file. A full or read-only disk only costs the next run time."""
    import shutil

    partial = folder.with_name(f"{folder.name}.{os.getpid()}.partial")
    quantizer = getattr(model, "hf_quantizer", None)
    if not all(p.is_floating_point() for p in (*model.parameters(), *model.buffers()) if p.numel()):
        return  # weights kept in GGUF blocks (a GPU kernel): not a plain checkpoint to cache
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # "Writing model shards" would mix with our stderr
    quantization = model.config.__dict__.pop("quantization_config", None)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        # De-quantised weights are plain float tensors; transformers only refuses to save a
        # model it still marks as quantised.
        model.hf_quantizer = None
        try:
            model.save_pretrained(str(partial))
        finally:
            model.hf_quantizer = quantizer
            if quantization is not None:
                model.config.quantization_config = quantization
            if bars:
                hf_logging.enable_progress_bar()
        (partial / "stopdoctor-source.json").write_text(json.dumps({"gguf": str(gguf.resolve())}))
        for other in folder.parent.iterdir():
            marker = other / "stopdoctor-source.json"
            if other not in (folder, partial) and marker.is_file():
                try:
                    if json.loads(marker.read_text()).get("gguf") == str(gguf.resolve()):
                        shutil.rmtree(other, ignore_errors=True)
                except (OSError, ValueError):
                    pass
        partial.rename(folder)
    except (OSError, ValueError, RuntimeError):
        pass  # best effort: the next run converts again
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _load_quietly(source: ModelSource, auto: Any, target: str, kwargs: dict[str, Any], progress: Progress,
                  gguf_name: str | None) -> Any:
    """from_pretrained with transformers' own notes and bars silenced (they would mix with our
    stderr); a GGUF's de-quantisation reports its tensors through `progress` instead."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    patched = None
    if gguf_name is not None:
        # The de-quantisation loop draws a plain tqdm bar, which the switch above does not reach.
        import transformers.modeling_gguf_pytorch_utils as gguf_utils

        patched = (gguf_utils, gguf_utils.tqdm)
        gguf_utils.tqdm = _tensor_progress(progress, gguf_name)
        progress(f"reading {gguf_name} (first run: converting it for transformers)…")
    try:
        return auto.from_pretrained(target, **kwargs)
    except (OSError, ValueError) as error:
        raise InputError(f"{source.spec}: transformers cannot load the model: {str(error).strip().splitlines()[0]}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
        if patched is not None:
            patched[0].tqdm = patched[1]


def _tensor_progress(progress: Progress, name: str) -> Callable[..., Any]:
    def tensors(iterable: Any, *args: Any, **kwargs: Any) -> Any:
        items = list(iterable)
        step = max(1, len(items) // 10)
        for done, item in enumerate(items):
            if done % step == 0:
                progress(f"converting {name}: {done}/{len(items)} tensors de-quantised (once; cached after)…")
            yield item
        progress(f"converting {name}: {len(items)}/{len(items)} tensors de-quantised…")
    return tensors


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingDependencyError("stopdoctor generate runs the model locally with torch, which is not installed",
                                     hint=f"{INSTALL_HINT}; or point --server at an OpenAI-compatible endpoint") from None
    return torch


def _weights_format(source: ModelSource, allow_pickle: bool) -> bool | None:
    """use_safetensors for from_pretrained. Pickled .bin weights can run code when loaded, so a
    folder that only has those is refused unless the user says it trusts them."""
    if source.kind != "folder":
        return None if allow_pickle else True
    names = [p.name for p in source.root.iterdir()]
    if any(n.endswith(".safetensors") for n in names):
        return True
    if any(n.endswith(".bin") for n in names):
        if not allow_pickle:
            raise InputError(
                f"{source.root}: only pickled .bin weights, no .safetensors",
                hint="loading a pickle can run arbitrary code; convert to safetensors, or pass --allow-pickle if you trust the files",
            )
        return False
    raise InputError(f"{source.root}: no model weights (.safetensors or .bin)",
                     hint="stopdoctor inspect needs only the config files; generate needs the weights")


@dataclass
class LocalEngine:
    """A loaded model and the vocabulary it is decoded with."""

    model: Any
    facts: ModelFacts
    device: str
    name: str = "transformers"
    _torch: Any = field(default=None, repr=False)
    watch: tuple[int, ...] = ()  # ids whose summed probability each step records (the end-of-turn)

    @classmethod
    def load(cls, facts: ModelFacts, device: str = "auto", allow_pickle: bool = False,
             progress: Progress | None = None) -> LocalEngine:
        """`progress(message)` hears what the load is doing (a GGUF's first conversion takes a while)."""
        progress = progress or (lambda message: None)
        torch = require_torch()
        from transformers import AutoModelForCausalLM

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        elif device == "cuda" and not torch.cuda.is_available():
            raise InputError("--device cuda: no CUDA device is available", hint="use --device cpu or auto")
        elif device not in ("cpu", "cuda"):
            raise InputError(f"--device {device!r}: use auto, cpu or cuda")
        torch.set_num_threads(cpu_threads())
        # float32 on CPU (half precision is slow there); the checkpoint's own dtype on a GPU.
        dtype = torch.float32 if device == "cpu" else "auto"
        source = facts.source
        kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": False}
        model = None
        if source.kind == "gguf":
            gguf = next(iter(source.files.values()))
            converted = converted_gguf_folder(gguf)
            if (converted / "config.json").is_file():
                progress(f"loading {gguf.name} (converted once, cached in {converted.parent})…")
                try:
                    model = _load_quietly(source, AutoModelForCausalLM, str(converted),
                                          dict(kwargs, use_safetensors=True), progress, None)
                except Exception:  # noqa: BLE001 - our own cache entry is damaged (a full disk): convert again
                    import shutil

                    shutil.rmtree(converted, ignore_errors=True)
            if model is None:
                # transformers de-quantises every tensor into float32 (exact); that copy is kept
                # so the next run loads it in seconds instead of converting again.
                model = _load_quietly(source, AutoModelForCausalLM, str(gguf.parent),
                                      dict(kwargs, dtype=torch.float32, gguf_file=gguf.name), progress, gguf.name)
                progress(f"saving the converted {gguf.name} to {converted.parent} for the next run…")
                _save_converted(model, converted, gguf)
        else:
            target = str(source.root) if source.kind == "folder" else source.spec
            kwargs["use_safetensors"] = _weights_format(source, allow_pickle)
            if source.revision:
                kwargs["revision"] = source.revision
            model = _load_quietly(source, AutoModelForCausalLM, target, kwargs, progress, None)
        model.to(device)
        model.eval()
        return cls(model, facts, device, _torch=torch)

    def generate(self, prompt: Prompt, stops: StopSet, max_new_tokens: int, sampling: Sampling = Sampling()) -> Generation:
        torch = self._torch
        vocab = self.facts.vocab
        special = vocab.special_ids
        by_id = {s.id: s for s in stops.ids}
        detok = IncrementalDetokenizer(vocab.tokenizer(), skip_special_tokens=False)
        matcher = StopStringMatcher(stops.strings) if stops.strings else None
        generator = None
        if not sampling.greedy and sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        steps: list[Step] = []
        out: list[str] = []
        cause: StopCause | None = None
        if not prompt.ids:
            raise InputError("the prompt encodes to no tokens")
        with torch.inference_mode():
            input_ids = torch.tensor([prompt.ids], device=self.device)
            # An all-ones mask, as generate passes: without one some models build a full causal
            # mask every step, which costs more as the sequence grows.
            mask = torch.ones((1, len(prompt.ids) + max_new_tokens), dtype=torch.long, device=self.device)
            length = len(prompt.ids)
            result = self.model(input_ids=input_ids, attention_mask=mask[:, :length], use_cache=True, logits_to_keep=1)
            cache_kw = "cache" if hasattr(result, "cache") else "past_key_values"  # renamed in transformers 5.x
            for step in range(max_new_tokens):
                next_id = self._pick(result.logits[:, -1, :], sampling, generator)
                token_id = int(next_id)
                piece = detok.push(token_id)
                steps.append(Step(step, token_id, piece, token_id in special, self._p_watched(result.logits[:, -1, :])))
                stop = by_id.get(token_id)
                if stop is not None:
                    # Runtimes never show the stop token: its text stays out of the reported text.
                    cause = _cause_for_id(stop, self.facts, step)
                    break
                if matcher is not None:
                    piece, hit = matcher.feed(piece, step)
                    out.append(piece)
                    if hit is not None:
                        cause = StopCause("stop_string", text=hit.stop, stop_string=hit.stop, step=hit.step)
                        break
                else:
                    out.append(piece)
                if step + 1 == max_new_tokens:
                    break  # no forward pass for a token that will not be emitted
                length += 1
                result = self.model(input_ids=next_id.view(1, 1), attention_mask=mask[:, :length], use_cache=True,
                                    **{cache_kw: result[cache_kw]})
        if cause is None:
            rest = detok.flush()
            if matcher is not None:
                rest, _ = matcher.feed(rest, len(steps) - 1) if rest else ("", None)
                rest += matcher.flush()
            out.append(rest)
            cause = StopCause("length", step=len(steps) - 1 if steps else None)
        return Generation(cause.finish_reason, cause, "".join(out), tuple(steps), prompt.text, len(prompt.ids))

    def _p_watched(self, logits: Any) -> float | None:
        if not self.watch:
            return None
        ids = [i for i in self.watch if 0 <= i < logits.shape[-1]]
        return float(self._torch.softmax(logits.float(), dim=-1)[0, ids].sum()) if ids else None

    def _pick(self, logits: Any, sampling: Sampling, generator: Any) -> Any:
        torch = self._torch
        if sampling.greedy:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits.float() / sampling.temperature, dim=-1)
        if sampling.top_p < 1.0:
            # Keep the smallest set of tokens whose probability reaches top_p (always the top one).
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            drop = sorted_probs.cumsum(dim=-1) - sorted_probs > sampling.top_p
            sorted_probs[drop] = 0.0
            probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        return torch.multinomial(probs, 1, generator=generator).view(-1)


# --------------------------------------------------------------------------------------------
# Server engine: any OpenAI-compatible endpoint
# --------------------------------------------------------------------------------------------


def _first_choice(reply: Any) -> dict:
    """choices[0] of an OpenAI-style reply, or a one-line error naming what is missing."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise InputError("the server's reply has no choices[0] object (not an OpenAI-compatible answer)")
    return choices[0]


@dataclass
class ServerEngine:
    url: str
    route: str | None = None  # chat | completions; None: chat for templated prompts
    model_name: str | None = None
    timeout: float = 300.0
    facts: ModelFacts | None = None
    name: str = "server"
    device: str = "server"

    def _base(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/v1") else base + "/v1"

    def _request(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self._base() + path, data=data,
                                         headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as error:
            detail = error.read().decode("utf-8", "replace")[:500]
            raise ServerRejected(error.code, detail) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise InputError(f"{self.url}: cannot reach the server: {reason}",
                             hint="check --server (e.g. http://127.0.0.1:8000) and that the server is up") from None
        except json.JSONDecodeError:
            raise InputError(f"{self.url}{path}: the server did not answer with JSON") from None
        except ValueError as error:  # urllib: a URL it cannot use
            raise InputError(f"{self.url}: {error}") from None

    def pick_model(self, spec: str, root: Path | None) -> str:
        """The model name to send: --server-model, else the served model matching MODEL, else the only one."""
        if self.model_name:
            return self.model_name
        try:
            served = [m.get("id") for m in self._request("/models").get("data", []) if isinstance(m, dict)]
        except (ServerRejected, InputError):
            served = []
        wanted = {spec, str(root) if root else spec, Path(spec).name}
        match = next((m for m in served if m in wanted), None)
        self.model_name = match or (served[0] if len(served) == 1 else spec)
        return self.model_name

    def generate(self, prompt: Prompt, stops: StopSet, max_new_tokens: int, sampling: Sampling = Sampling()) -> Generation:
        route = self.route or ("chat" if prompt.templated else "completions")
        body: dict[str, Any] = {"model": self.model_name, "max_tokens": max_new_tokens,
                                "temperature": sampling.temperature}
        if sampling.top_p < 1.0:
            body["top_p"] = sampling.top_p
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if stops.strings:
            body["stop"] = list(stops.strings)
        if stops.ids:
            body["stop_token_ids"] = stops.id_list  # a vLLM extension; others may reject it
        if route == "chat":
            body["messages"] = list(prompt.messages) or [{"role": "user", "content": prompt.text}]
            path = "/chat/completions"
        elif route == "completions":
            body["prompt"] = prompt.text  # already templated when it came from messages
            path = "/completions"
        else:
            raise InputError(f"--route {route!r}: use chat or completions")
        rejected: list[str] = []
        try:
            reply = self._request(path, body)
        except ServerRejected as error:
            if "stop_token_ids" not in body or "stop_token_ids" not in error.detail:
                raise InputError(f"the server refused the request (HTTP {error.code}): {error.detail}") from None
            # Servers other than vLLM reject unknown fields; say so rather than fail.
            del body["stop_token_ids"]
            rejected.append("stop_token_ids")
            try:
                reply = self._request(path, body)
            except ServerRejected as again:
                raise InputError(f"the server refused the request (HTTP {again.code}): {again.detail}") from None
        choice = _first_choice(reply)
        if route == "chat":
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
        else:
            text = choice.get("text")
        if text is not None and not isinstance(text, str):
            raise InputError(f"{self.url}{path}: the server's reply has no text in choices[0]")
        text = text or ""
        finish = choice.get("finish_reason")
        stop_reason = choice.get("stop_reason", choice.get("matched_stop"))
        cause = _server_cause(finish, stop_reason, stops, self.facts)
        server = {
            "url": self.url, "route": route, "model": self.model_name,
            "finish_reason": finish, "stop_reason": stop_reason, "usage": reply.get("usage"),
            "sent": {k: body[k] for k in ("stop", "stop_token_ids") if k in body},
            "rejected_fields": rejected,
        }
        usage = reply.get("usage") or {}
        return Generation(finish if finish in (FINISH_STOP, FINISH_LENGTH) else cause.finish_reason, cause, text, (),
                          prompt.text, usage.get("prompt_tokens"), server)


class ServerRejected(Exception):
    def __init__(self, code: int, detail: str) -> None:
        super().__init__(f"HTTP {code}: {detail}")
        self.code = code
        self.detail = detail


def _server_cause(finish: Any, stop_reason: Any, stops: StopSet, facts: ModelFacts | None) -> StopCause:
    if finish == FINISH_LENGTH:
        return StopCause("length")
    if isinstance(stop_reason, str):
        return StopCause("stop_string", text=stop_reason, stop_string=stop_reason)
    if isinstance(stop_reason, int):
        stop = next((s for s in stops.ids if s.id == stop_reason), None)
        if stop is not None and facts is not None:
            return _cause_for_id(stop, facts, step=-1)
        return StopCause("stop_id", id=stop_reason, text=facts.vocab.text_of(stop_reason) if facts else None)
    # No reason given (vLLM for the eos; TGI, llama.cpp and transformers serve always): name the
    # cause only when one candidate could have ended it. A stop string is never called "eos".
    if not stops.strings and len(stops.ids) == 1 and facts is not None:
        return _cause_for_id(stops.ids[0], facts, step=-1)
    if not stops.strings and not stops.ids:
        return StopCause("eos")  # only the server's own eos could have ended it
    candidates = [f"{s.text or s.id} (id {s.id})" for s in stops.ids] + [json.dumps(t, ensure_ascii=False) for t in stops.strings]
    return StopCause("unreported", text=", ".join(candidates))


# --------------------------------------------------------------------------------------------
# The pipeline
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GenerateResult:
    model: str
    engine: str
    device: str
    prompt: Prompt
    stops: StopSet
    generation: Generation
    diagnosis: Diagnosis
    enders: dict[int, TurnEnder]


@dataclass(frozen=True)
class ModelContext:
    facts: ModelFacts
    analysis: Analysis


def load_context(spec: str, revision: str | None = None) -> ModelContext:
    facts = load_facts(resolve(spec, revision))
    return ModelContext(facts, analyze(facts))


def watch_end_of_turn(engine: LocalEngine | ServerEngine, analysis: Analysis) -> None:
    """Have a local engine record P(end-of-turn) at every step (a server gives no probabilities)."""
    if isinstance(engine, LocalEngine):
        from stopdoctor.analysis.weights import stop_targets

        engine.watch = stop_targets(analysis)


def run_generate(context: ModelContext, engine: LocalEngine | ServerEngine, prompt: Prompt, stops: StopSet,
                 max_new_tokens: int, sampling: Sampling = Sampling()) -> GenerateResult:
    if max_new_tokens < 1:
        raise InputError("--max-new-tokens must be at least 1")
    watch_end_of_turn(engine, context.analysis)
    generation = engine.generate(prompt, stops, max_new_tokens, sampling)
    enders = turn_enders(context.analysis)
    diagnosis = diagnose(generation, enders, stops.id_list, turn_headers(context.analysis),
                         context.facts.vocab.special_tokens)
    return GenerateResult(context.facts.source.spec, engine.name, engine.device, prompt, stops, generation, diagnosis, enders)


# --------------------------------------------------------------------------------------------
# Fragment test: base or instruct, by behaviour
# --------------------------------------------------------------------------------------------

FRAGMENT = "The old lighthouse keeper climbed the stairs and"
QUESTION = "What is the capital of France?"


@dataclass(frozen=True)
class FragmentProbe:
    name: str  # "raw fragment" | "chat question"
    prompt: str
    generation: Generation
    ended_turn: bool  # it emitted a turn-ending token within the budget


@dataclass(frozen=True)
class FragmentVerdict:
    verdict: str  # instruct | base | unclear
    reason: str
    probes: tuple[FragmentProbe, ...]
    evidence: Any = None  # stopdoctor.actions.stop_odds.StopEvidence, when measured (check --live)


def fragment_test(context: ModelContext, engine: LocalEngine | ServerEngine, max_new_tokens: int = 48) -> FragmentVerdict:
    """An instruct model answers a question and ends its turn; a base model just continues the
    text. Every probe stops on any turn-ending id (template end-of-turn, eos, any runtime's stops)."""
    facts, analysis = context.facts, context.analysis
    enders = turn_enders(analysis)
    watch_end_of_turn(engine, analysis)
    stops = StopSet(tuple(StopId(i, e.text, Location("(any turn-ending token)")) for i, e in enders.items()), (),
                    "turn enders", "template end-of-turn, tokenizer eos and every runtime's stop ids")
    probes = []
    raw = build_prompt(facts, prompt=FRAGMENT, raw=True)
    generation = engine.generate(raw, stops, max_new_tokens)
    probes.append(FragmentProbe("raw fragment", FRAGMENT, generation, generation.finish_reason == FINISH_STOP))
    chat = None
    if facts.template is not None:
        with render_deadline(own=True):  # a render of its own: the command's deadline may be spent on the run above
            prompt = build_prompt(facts, messages=[{"role": "user", "content": QUESTION}])
        generation = engine.generate(prompt, stops, max_new_tokens)
        chat = FragmentProbe("chat question", QUESTION, generation, generation.finish_reason == FINISH_STOP)
        probes.append(chat)
    if chat is not None:
        headers = turn_headers(analysis)
        turns = diagnose(chat.generation, enders, stops.id_list, headers, facts.vocab.special_tokens).turns
        if chat.ended_turn and not turns:
            verdict, reason = "instruct", (f"answered the question and ended its turn after {len(chat.generation.steps)} "
                                           f"tokens ({chat.generation.cause.text})")
        elif chat.ended_turn:
            verdict, reason = "unclear", "ended its turn, but only after writing another turn itself"
        else:
            verdict, reason = "base", (f"given a question through the chat template it never ended its turn in "
                                       f"{max_new_tokens} tokens: it continues text rather than answering")
    elif probes[0].ended_turn:
        verdict, reason = "unclear", "no chat template; it ended the fragment by itself"
    else:
        verdict, reason = "base", f"no chat template, and it continued the fragment for {max_new_tokens} tokens"
    return FragmentVerdict(verdict, reason, tuple(probes))


__all__ = [
    "FragmentVerdict", "GenerateResult", "LocalEngine", "ModelContext", "Prompt", "Sampling", "ServerEngine",
    "StopSet", "build_prompt", "fragment_test", "load_context",
    "read_messages", "require_torch", "resolve_stops", "run_generate",
]
