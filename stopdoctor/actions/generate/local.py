"""The local engine: transformers + torch, in stopdoctor's own decoding loop (forward with the KV
cache, greedy argmax or sampling), stopping per step on stop ids and on stop strings matched in
the decoded text with hold-back, and tracing every step. A GGUF is converted once by
transformers and the converted copy cached.

The only module that imports torch and transformers models, and only inside functions: importing
it stays cheap and works without the `runtime` extra.
Imports: core, facts, runtimes (the stop set), analysis (the generation data classes), actions.generate (request, stopmatch).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stopdoctor.analysis.diagnose import Generation, Step, StopCause
from stopdoctor.core.errors import InputError, MissingDependencyError
from stopdoctor.core.types import ModelSource
from stopdoctor.facts.model_facts import ModelFacts
from stopdoctor.runtimes.stops import RuntimeStops
from stopdoctor.actions.generate.request import Prompt, Sampling, stop_cause
from stopdoctor.actions.generate.stopmatch import IncrementalDetokenizer, StopStringMatcher

# The README's install line: torch's CPU build from PyTorch's own index first (a bare `torch` from
# PyPI pulls the multi-GB CUDA build), then the `runtime` extra from the clone.
TORCH_CPU_INSTALL = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && pip install '.[runtime]'"
INSTALL_HINT = (f"in your stopdoctor clone: {TORCH_CPU_INSTALL}  (with a GPU, the CUDA wheel instead: "
                "--index-url https://download.pytorch.org/whl/cu126)")


Progress = Callable[[str], None]


def cpu_threads(environ: Mapping[str, str] | None = None) -> int:
    """Threads for CPU decoding: the cores this process may use that are not already busy.
    Decoding one sequence is many small steps; threads that wait for a busy core make each step
    slower, not faster (on 2 busy cores one thread was 3.6x faster than torch's default of 2).
    STOPDOCTOR_THREADS overrides."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("STOPDOCTOR_THREADS", "").strip()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    if explicit:
        try:
            threads = int(explicit) if len(explicit) < 10 else -1
        except ValueError:
            raise InputError(f"STOPDOCTOR_THREADS={explicit[:20]!r}: not a whole number") from None
        if not 1 <= threads <= cores:
            # OpenMP allocates per thread: a billion threads is an out-of-memory abort, not a setting.
            raise InputError(f"STOPDOCTOR_THREADS={explicit[:20]}: must be between 1 and the {cores} cores this process may use")
        return threads
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
            gguf_utils.tqdm = patched[1]  # put back what was patched above


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


# What a GPU torch could use leaves device files on Linux: the NVIDIA driver's, ROCm's (torch.cuda
# is HIP there), WSL's GPU paravirtualisation. With none of them torch.cuda.is_available() is False.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia/version", "/dev/kfd", "/dev/dxg")


def check_device(device: str) -> None:
    """Refuse a device that cannot be used before anything loads (torch takes seconds to import, a
    GGUF's tokenizer to convert). "cuda" is refused here only on Linux with no GPU device file;
    otherwise torch decides, when the model loads."""
    import sys

    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"--device {device!r}: use auto, cpu or cuda")
    if device == "cuda" and sys.platform.startswith("linux") and not any(os.path.exists(f) for f in GPU_DEVICE_FILES):
        raise InputError("--device cuda: no CUDA device is available", hint="use --device cpu or auto")


def require_torch(command: str = "generate") -> Any:
    """torch, or one line naming the `command` that needs it and the README's install line."""
    try:
        import torch
    except ImportError:
        server = "; or point --server at an OpenAI-compatible endpoint" if command == "generate" else ""
        raise MissingDependencyError(f"stopdoctor {command} runs the model locally with torch, which is not installed",
                                     hint=f"{INSTALL_HINT}{server}") from None
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


# More parameters than this is not a model anyone runs on one machine (the largest open ones have ~2T).
MAX_PARAMETERS = 10**13


def check_weights(facts: ModelFacts) -> None:
    """Before torch is imported: the weights must be sound safetensors files (their headers read by
    the guarded reader) holding at least the parameters config.json describes. transformers
    initialises whatever the weights lack at random and runs that silently, so weights with no
    tensors, or a config.json that describes a bigger model (hidden_size 2^31, a million layers),
    would be reported as the model's behaviour; and a huge config allocates for minutes first."""
    from stopdoctor.facts.safetensors import read_file_header

    source = facts.source
    described = _described_parameters(facts.documents.get("config.json", {}))
    if described is not None and described[0] > MAX_PARAMETERS:
        raise InputError(f"config.json describes a model of at least {described[0]:.3g} parameters ({described[1]})",
                         hint="no model that size runs on one machine; the config.json is corrupt")
    if source.kind != "folder":
        return
    files = sorted(source.root.glob("*.safetensors"))
    if not files:
        return  # pickled .bin weights (--allow-pickle): not read before they are loaded
    elements = sum(read_file_header(path).elements for path in files)
    if elements == 0:
        raise InputError(f"{source.root}: the .safetensors weights hold no tensors",
                         hint="transformers would run a randomly initialised model; download the weights again")
    # Packed 4-bit weights hold an eighth of their linear layers' elements; the embedding alone
    # is most of this lower bound and is never packed, so half of it is a safe floor.
    if described is not None and elements * 2 < described[0]:
        raise InputError(f"config.json describes at least {described[0]:,} parameters ({described[1]}), but the "
                         f".safetensors weights hold {elements:,}",
                         hint="transformers would initialise the rest at random; the weights and config.json do not belong together")


def _described_parameters(config: Any) -> tuple[int, str] | None:
    """A lower bound on the parameters config.json describes: the embedding (vocab x hidden) and one
    hidden x hidden matrix a layer (every decoder layer has an attention output at least that big)."""
    if not isinstance(config, dict):
        return None
    text = next((config[k] for k in ("text_config", "language_config", "llm_config")
                 if isinstance(config.get(k), dict) and "hidden_size" in config[k]), config)
    values = {}
    for key in ("vocab_size", "hidden_size", "num_hidden_layers"):
        value = text.get(key, config.get(key))
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return None
        values[key] = value
    vocab, hidden, layers = values["vocab_size"], values["hidden_size"], values["num_hidden_layers"]
    return vocab * hidden + layers * hidden * hidden, f"vocab_size {vocab}, hidden_size {hidden}, num_hidden_layers {layers}"


def check_prompt_fits(prompt: Prompt, rows: int, vocab: Any) -> None:
    """A prompt id past the embedding's rows (a token added to the tokenizer without
    resize_token_embeddings) is an input the model cannot read: say which, rather than let torch
    raise IndexError (or a CUDA device-side assert)."""
    past = sorted({i for i in prompt.ids if i >= rows})
    if past:
        shown = ", ".join(f"{vocab.text_of(i) or '?'} (id {i})" for i in past[:5])
        raise InputError(f"the prompt holds token ids past the model's {rows:,} embedding rows: {shown}; they were added "
                         "to the tokenizer without resize_token_embeddings (SD274)",
                         hint="stopdoctor inspect MODEL names every such token; resize the embeddings and train the "
                              "new rows, or leave those tokens out of the prompt")


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
        check_device(device)
        if facts.source.kind == "folder":
            _weights_format(facts.source, allow_pickle)  # no weights, or only pickles: said before the checks
        check_weights(facts)
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
            model, info = _load_quietly(source, AutoModelForCausalLM, target, dict(kwargs, output_loading_info=True),
                                        progress, None)
            missing = list(info.get("missing_keys") or [])
            if missing:
                # transformers initialises these at random and runs anyway: the output would not be the model's.
                raise InputError(f"{source.spec}: the weights lack {len(missing)} of the model's tensors "
                                 f"(e.g. {sorted(missing)[0][:80]}), which transformers would initialise at random",
                                 hint="download the weights again; they do not match config.json")
        model.to(device)
        model.eval()
        return cls(model, facts, device, _torch=torch)

    def generate(self, prompt: Prompt, stops: RuntimeStops, max_new_tokens: int, sampling: Sampling = Sampling()) -> Generation:
        torch = self._torch
        vocab = self.facts.vocab
        special = vocab.special_ids
        by_id = {s.id: s for s in stops.stops}
        detok = IncrementalDetokenizer(vocab.tokenizer(), skip_special_tokens=False)
        matcher = StopStringMatcher(stops.texts) if stops.texts else None
        generator = None
        if not sampling.greedy and sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(sampling.seed)
        steps: list[Step] = []
        out: list[str] = []
        cause: StopCause | None = None
        if not prompt.ids:
            raise InputError("the prompt encodes to no tokens")
        check_prompt_fits(prompt, self.model.get_input_embeddings().num_embeddings, vocab)
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
                    cause = stop_cause(stop, self.facts, step)
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
