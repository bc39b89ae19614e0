"""Random hostile inputs through the real CLI: mutated model JSON files, GGUF headers, chat templates,
serving files, labels datasets, response logs and command-line arguments. Every run must end in
exit 0, 1 or 2 (never 3, never a traceback), within its time limit and memory limit.

    python tests/fuzz.py [--cases 400] [--seed 1] [--jobs 2] [--keep DIR]

prints the figures (cases, outcomes per kind, slowest case, peak memory) and exits 1 when a case
failed; tests/test_fuzz.py runs a smaller share of it in CI. Each case runs in a child forked from
this process, with the stopdoctor modules already imported (a fresh interpreter per case would
spend ~0.5 s starting), its stdout/stderr in files, and its peak RSS read from wait4(); the time
and memory limits are the issue's: no run over MAX_SECONDS, no run over MAX_RSS_MB.

Imports: the standard library, stopdoctor, fixtures.synth.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MAX_SECONDS = 25.0  # a case still running then is a hang (template renders stop at 10 s in all)
MAX_RSS_MB = 500  # peak resident memory of a run, as a fresh `stopdoctor` process would have it
# A child starts with this process's resident pages; a fresh `stopdoctor` process has about this many
# MB resident after its imports. A parent grown beyond (pytest after other tests) raises the limit.
FRESH_PROCESS_MB = 80
HARD_MEMORY_GB = 4  # address-space limit of a child, so that a blow-up cannot take the machine down

BIG_INTS = [0, 1, -1, 7, 255, 2**31 - 1, 2**31, 2**32, 2**32 + 5, 2**63, 2**64 + 1, -(2**63), 10**30]
HOSTILE_VALUES = [
    None, True, False, 0, -1, 2**32, 2**64, "__BIGINT__", 1.5, float("1e308"), "", "\ud800", "a\udc80b", "<|im_end|>",
    "\ud83d\ude00", "x" * 100_000, [], [None], [1, "2"], list(range(3000)), {}, {"content": 3}, {"content": "\udfff"},
    json.loads("[" * 30 + "]" * 30), "{{ raise_exception('x') }}", "{% for %}",
]
TEMPLATE_SNIPPETS = [
    "{{ 'x' * N }}", "{{ lipsum(N) }}", "{% for i in range(N) %}{{ i }}{% endfor %}", "{{ ('a\\n' * N) | indent(M) }}",
    "{{ ('ab' * N) | replace('a', 'x' * M) }}", "{{ ('\\t' * N).expandtabs(M) }}", "{{ messages | tojson(indent=N) }}",
    "{{ (range(N) | list) | tojson(indent=M) }}", "{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}",
    "{{ '\\ud800' }}", "{{ N ** M }}", "{{ '%*d' % (N, 1) }}", "{{ ('{:>' ~ N ~ '}').format(1) }}",
    "{{ ([('x' * N)] * M) | join }}", "{{ messages[0].content * N }}", "{{ [messages] * N }}",
    "{% set ns = namespace(a='') %}{% for i in range(N) %}{% set ns.a = ns.a ~ 'xyz' %}{% endfor %}{{ ns.a }}",
    "{{ raise_exception('no') }}", "{{ x.y.z }}", "{{ ''.__class__.__mro__ }}", "{{ cycler(*range(N)).next() }}",
    "{{ ('x' * N) | center(M) }}", "{{ ('a ' * N) | wordwrap(M) }}", "{{ dict(a=range(N) | list) }}",
    "{% for m in messages * N %}{{ m.content }}{% endfor %}", "{{ ('%s' * N) | format(*(['y'] * M)) }}",
    "{{ ((range(N) | list) * M) | sort | length }}", "{{ ('x' * N).split('x') | length }}",
    "{{ ('x' * N) | list | unique | list | length }}", "{% if messages[N] %}x{% endif %}", "{{ messages | pprint }}",
    "{{ ('ab' * N).translate({97: 'x' * M}) }}", "{{ (('x' * N) ~ ('y' * M)) | length }}", "{{ N | string * M }}",
    "{% set x = 'a' * N %}{{ ([x] * M) }}", "{% filter upper %}{{ 'x' * N }}{% endfilter %}",
    "{{ '%s%s' % ('x' * N, 'y' * M) }}", "{{ (range(N) | batch(M) | list) | length }}",
]
SIZES = [0, 1, 3, 100, 1000, 4096, 65_536, 100_000, 1_000_000, 2_000_000, 10**9, -5]


@dataclass
class Case:
    kind: str
    args: list[str]
    note: str


@dataclass
class Outcome:
    case: Case
    code: int | str  # exit code, or "hang" / "signal N"
    seconds: float
    rss_mb: float
    stderr: str
    limit_mb: float = MAX_RSS_MB

    @property
    def failed(self) -> str | None:
        if self.code == "hang":
            return f"ran past {MAX_SECONDS:g} s"
        if self.code not in (0, 1, 2):
            return f"exit {self.code}"
        if self.rss_mb > self.limit_mb:
            return f"peak memory {self.rss_mb:.0f} MB (limit {self.limit_mb:.0f} MB)"
        if "Traceback" in self.stderr or "internal error" in self.stderr:
            return "traceback"
        return None


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    parent_mb: float = 0.0

    @property
    def failures(self) -> list[tuple[Outcome, str]]:
        return [(o, why) for o in self.outcomes if (why := o.failed)]

    def summary(self) -> str:
        by_kind: dict[str, Counter] = {}
        for outcome in self.outcomes:
            by_kind.setdefault(outcome.case.kind, Counter())[str(outcome.code)] += 1
        lines = [f"{len(self.outcomes)} cases in {self.seconds:.1f} s, {len(self.failures)} failed"]
        for kind, counts in sorted(by_kind.items()):
            shown = ", ".join(f"exit {code}: {n}" for code, n in sorted(counts.items()))
            lines.append(f"  {kind:10s} {sum(counts.values()):4d}  {shown}")
        if self.outcomes:
            slowest = max(self.outcomes, key=lambda o: o.seconds)
            biggest = max(self.outcomes, key=lambda o: o.rss_mb)
            lines.append(f"  slowest {slowest.seconds:.1f} s ({slowest.case.kind}: {slowest.case.note})")
            lines.append(f"  peak memory {biggest.rss_mb:.0f} MB ({biggest.case.kind}: {biggest.case.note}); "
                         f"the forking parent had {self.parent_mb:.0f} MB resident")
        for outcome, why in self.failures[:20]:
            last = outcome.stderr.strip().splitlines()[-1:] or [""]
            lines.append(f"  FAILED {why}: {outcome.case.kind}: {outcome.case.note}: {' '.join(outcome.case.args)[:200]}: {last[0][:200]}")
        return "\n".join(lines)


# --- inputs -------------------------------------------------------------------------------------


class Generator:
    def __init__(self, seed: int, work: Path) -> None:
        from fixtures.synth import build_all

        self.rng = random.Random(seed)
        self.work = work
        self.base = work / "synth"
        build_all(self.base)
        self.families = sorted(p.name for p in self.base.iterdir() if (p / "tokenizer.json").is_file())
        self.count = 0

    def _folder(self, family: str | None = None) -> Path:
        self.count += 1
        folder = self.work / f"case{self.count}"
        shutil.copytree(self.base / (family or self.rng.choice(self.families)), folder)
        return folder

    def _file(self, name: str, data: str | bytes) -> Path:
        self.count += 1
        path = self.work / f"case{self.count}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        path.write_bytes(data)
        return path

    def _size(self) -> int:
        return self.rng.choice(SIZES)

    # model JSON files ----------------------------------------------------------------------
    def json_case(self) -> Case:
        rng = self.rng
        folder = self._folder()
        files = [p for p in folder.iterdir() if p.suffix == ".json" and p.name != "tokenizer.json"]
        target = rng.choice(files)
        text = target.read_text()
        how = rng.choice(["value", "value", "value", "bytes", "truncate", "nest", "big"])
        if how == "value":
            document = json.loads(text)
            key = rng.choice([*document.keys(), "eos_token_id", "pad_token_id", "bos_token", "eos_token",
                              "chat_template", "added_tokens_decoder", "additional_special_tokens", "vocab_size"])
            value = rng.choice(HOSTILE_VALUES + BIG_INTS)
            document[key] = value
            text = json.dumps(document, ensure_ascii=rng.random() < 0.5).replace('"__BIGINT__"', "1" + "0" * 4400)
            note = f"{target.name} {key}={_short(value)}"
        elif how == "bytes":
            raw = bytearray(text.encode())
            for _ in range(rng.randint(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            target.write_bytes(bytes(raw))
            return Case("json", ["inspect", str(folder)], f"{target.name} with random bytes")
        elif how == "truncate":
            text = text[: rng.randrange(len(text))]
            note = f"{target.name} truncated"
        elif how == "nest":
            depth = rng.choice([100, 1000, 50_000])
            text = text.rstrip()[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
            note = f"{target.name} nested {depth}"
        else:
            count = rng.choice([10_000, 1_000_000, 5_000_000])
            text = text.rstrip()[:-1] + ', "big": [' + ",".join(["[]"] * count) + "]}"
            note = f"{target.name} with {count} arrays"
        target.write_text(text, encoding="utf-8", errors="surrogatepass")
        return Case("json", [rng.choice(["inspect", "inspect", "check", "render"]), str(folder)], note)

    # chat templates --------------------------------------------------------------------------
    def template_case(self) -> Case:
        rng = self.rng
        folder = self._folder()
        config = json.loads((folder / "tokenizer_config.json").read_text())
        source = config.get("chat_template")
        if not isinstance(source, str):
            source = "{% for m in messages %}{{ m.content }}{% endfor %}"
        pieces = []
        for _ in range(rng.randint(1, 3)):
            pieces.append(rng.choice(TEMPLATE_SNIPPETS).replace("N", str(self._size())).replace("M", str(self._size())))
        at = rng.randrange(len(source) + 1)
        if rng.random() < 0.3:  # inside a tag, or cut: syntax errors
            source = source[:at] + rng.choice(pieces) + source[at + rng.randint(0, 20):]
        else:
            source = "".join(pieces) + source if rng.random() < 0.5 else source + "".join(pieces)
        (folder / "chat_template.jinja").write_text(source, encoding="utf-8", errors="surrogatepass")
        command = rng.choice(["inspect", "inspect", "render", "check"])
        args = [command, str(folder)] + (["-m", "user", "hi"] if command == "render" else [])
        return Case("template", args, " + ".join(pieces)[:160])

    # GGUF headers ----------------------------------------------------------------------------
    def gguf_case(self) -> Case:
        rng = self.rng
        n = rng.choice([3, 50, 300])
        tokens = [f"t{i}" for i in range(n)]
        tokens[:3] = ["<s>", "</s>", "<|im_end|>"]
        kv: dict[str, tuple[int, bytes]] = {
            "general.architecture": (8, _gs("llama")),
            "general.name": (8, _gs("fuzz-chat-instruct")),
            "tokenizer.ggml.model": (8, _gs(rng.choice(["gpt2", "llama", "bert", "nonsense"]))),
            "tokenizer.ggml.tokens": (9, _gstrings(tokens)),
            "tokenizer.ggml.token_type": (9, _gints([3, 3, 3] + [1] * (n - 3))),
            "tokenizer.ggml.bos_token_id": (4, struct.pack("<I", 0)),
            "tokenizer.ggml.eos_token_id": (4, struct.pack("<I", 1)),
            "tokenizer.chat_template": (8, _gs("{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}")),
        }
        how = rng.choice(["value", "value", "bytes", "truncate", "length"])
        note = how
        if how == "value":
            key = rng.choice([*kv, "tokenizer.ggml.eos_token_ids", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.merges",
                              "tokenizer.ggml.add_bos_token", "tokenizer.chat_template.tool_use", "tokenizer.chat_templates"])
            kv[key] = self._gguf_value()
            note = f"{key} = type {kv[key][0]}, {len(kv[key][1])} bytes"
        blob = bytearray(_gguf(kv))
        if how == "bytes":
            for _ in range(rng.randint(1, 6)):
                blob[rng.randrange(24, len(blob))] = rng.randrange(256)
        elif how == "truncate":
            blob = blob[: rng.randrange(len(blob))]
        elif how == "length":  # a length or count field set to something huge
            at = rng.randrange(24, len(blob) - 8)
            blob[at : at + 8] = struct.pack("<Q", rng.choice([2**62, 2**32, 10**9, 2**20]))
        path = self._file("model.gguf", bytes(blob))
        return Case("gguf", ["inspect", str(path)], note)

    def _gguf_value(self) -> tuple[int, bytes]:
        rng = self.rng
        choice = rng.randrange(9)
        if choice == 0:
            return 4, struct.pack("<I", rng.choice([0, 1, 2, 2**32 - 1]))
        if choice == 1:
            return 5, struct.pack("<i", rng.choice([-1, -(2**31), 5]))
        if choice == 2:
            return 10, struct.pack("<Q", rng.choice([2**64 - 1, 2**40]))
        if choice == 3:
            return 8, _gs(rng.choice(["", "x" * 70_000, "{{ 'x' * 10**9 }}", "{% for m in messages %}"]))
        if choice == 4:
            return 8, struct.pack("<Q", 3) + bytes([0xFF, 0xFE, 0xC0])
        if choice == 5:
            return 9, _gints([rng.choice(BIG_INTS[:8]) % 2**31 for _ in range(rng.choice([0, 5, 5000]))])
        if choice == 6:
            return 9, struct.pack("<IQ", 9, 2) + _gints([1]) + _gstrings(["a"])
        if choice == 7:
            return 9, _gstrings([rng.choice(["x y", "a", "", "\u00e9 \u00e9"]) for _ in range(rng.choice([1, 300]))])
        return 7, bytes([rng.randrange(256)])

    # serving files ---------------------------------------------------------------------------
    def serving_case(self) -> Case:
        rng = self.rng
        folder = self._folder()
        kind = rng.choice(["request", "yaml", "modelfile", "llamacpp"])
        if kind == "request":
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": ["\nUser:"], "max_tokens": 256}
            key = rng.choice(["stop", "stop_token_ids", "max_tokens", "max_completion_tokens", "ignore_eos", "model"])
            body[key] = rng.choice(HOSTILE_VALUES + BIG_INTS + [[f"s{i}" for i in range(rng.choice([10, 2000]))]])
            text = json.dumps(body, ensure_ascii=False).replace('"__BIGINT__"', "1" + "0" * 4400)
            path = self._file("request.json", text if rng.random() < 0.9 else text[:-3])
            note = f"request {key}={_short(body[key])}"
        elif kind == "yaml":
            value = rng.choice(["[" * 5000 + "]" * 5000, "&a [1, *a]", "{a: 1}", "'x'", "!!python/object:os.system ls",
                                "[" + ", ".join(["*b"] * 9) + "]", "-1", "1" + "0" * 5000])
            path = self._file("vllm.yaml", f"b: &b [1, 2, 3, 4, 5, 6, 7, 8, 9]\nmodel: m\n{rng.choice(['chat-template', 'override-generation-config', 'generation-config', 'max-model-len'])}: {value}\n")
            note = f"yaml {value[:40]}"
        elif kind == "modelfile":
            lines = ["FROM ./m.gguf", rng.choice(['TEMPLATE """{{ .Prompt }}', "PARAMETER num_predict 1" + "0" * 5000,
                                                 "PARAMETER stop \"\\ud800\"", "PARAMETER stop " + "x" * 100_000, "BOGUS"])]
            lines += ["PARAMETER stop s"] * rng.choice([1, 2000])
            path = self._file("Modelfile", "\n".join(lines) + "\n")
            note = f"Modelfile {lines[1][:40]}"
        else:
            extra = rng.choice(["-n 1" + "0" * 5000, "--override-kv tokenizer.ggml.eos_token_id=int:1" + "0" * 5000,
                                "--chat-template '{{ x'", "-r " * 3000 + "x", "'unterminated", "--chat-template-file /dev/zero"])
            path = self._file("llama-server.sh", f"llama-server -m m.gguf {extra}\n")
            note = f"llama.cpp {extra[:40]}"
        fmt = rng.choice(["human", "json", "sarif", "junit", "github"])
        return Case("serving", ["check", str(folder), "--serving", str(path), "--format", fmt], note)

    # labels datasets (training data is as untrusted as model files) ------------------------------
    def labels_case(self) -> Case:
        rng = self.rng
        rows: list = []
        notes = []
        for _ in range(rng.randint(1, 4)):
            row: object = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
            how = rng.choice(["good", "good", "good", "value", "value", "shape", "text", "prompt-completion", "tools"])
            value = rng.choice(HOSTILE_VALUES)
            if how == "good":  # most rows of a real dataset are fine: the bad one may come late
                row = rng.choice([row, {"text": "plain text"}, {"prompt": "q", "completion": " a"},
                                  {"prompt": [{"role": "user", "content": "q"}],
                                   "completion": [{"role": "assistant", "content": "a"}]}])
            elif how == "value":
                message = rng.choice(row["messages"])
                key = rng.choice(["content", "content", "role", "tool_calls", "thinking", "reasoning_content"])
                message[key] = value
                how = f"{key}={_short(value)}"
            elif how == "shape":
                row = rng.choice([{"messages": []}, {"messages": "x"}, {"messages": [1]}, [], 5, {"conversations": []},
                                  {"prompt": [], "completion": "x"}, {"messages": [{"role": "assistant"}]},
                                  {"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant"}]}])
                how = f"row {_short(row)}"
            elif how == "text":
                row = {"text": value}
                how = f"text={_short(value)}"
            elif how == "prompt-completion":
                row = {"prompt": value, "completion": rng.choice(HOSTILE_VALUES)}
                how = f"prompt={_short(value)}"
            else:
                row["tools"] = rng.choice([value, "[{", '[{"type": "function"}]', [{"type": "function", "function": value}]])
                how = f"tools={_short(row['tools'])}"
            rows.append(row)
            notes.append(how)
        text = "".join(json.dumps(row, ensure_ascii=rng.random() < 0.5) + "\n" for row in rows)
        text = text.replace('"__BIGINT__"', "1" + "0" * 4400)
        raw = text.encode("utf-8", "surrogatepass")
        mangle = rng.choice(["none", "none", "none", "bytes", "truncate", "nest", "blank"])
        if mangle == "bytes":
            raw = bytearray(raw)
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            raw = bytes(raw)
        elif mangle == "truncate":
            raw = raw[: rng.randrange(len(raw))]
        elif mangle == "nest":
            depth = rng.choice([500, 990, 50_000])
            raw += b'{"messages": [{"role": "user", "content": ' + b"[" * depth + b"]" * depth + b"}]}\n"
        elif mangle == "blank":
            raw = b"\n \n"
        data = self._file("data.jsonl", raw)
        args = ["labels", str(self.base / rng.choice(self.families)), "--data", str(data),
                "--collator", rng.choice(["auto", "assistant-only", "completion-only", "full", "pad-id", "axolotl"])]
        if rng.random() < 0.4:
            args += ["--max-length", str(rng.choice([1, 5, 2048, 10**9]))]
        if rng.random() < 0.4:
            args += ["--show", str(rng.choice([1, 3, 1000]))]
        if rng.random() < 0.3:
            args += ["--append-eos"]
        if rng.random() < 0.3:
            args += ["--json"]
        return Case("labels", args, f"{mangle}: " + "; ".join(notes)[:150])

    # response logs -----------------------------------------------------------------------------
    def logs_case(self) -> Case:
        rng = self.rng
        lines = (ROOT / "fixtures" / "logs" / "responses.jsonl").read_text().rstrip("\n").split("\n")
        how = rng.choice(["value", "value", "bytes", "truncate", "nest", "shape"])
        note = how
        if how == "value":
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(lines))
                try:
                    record = json.loads(lines[at])
                except ValueError:
                    continue  # the sample log has a cut line on purpose
                response = record.get("response", record)
                if not isinstance(response.get("choices"), list) or not response["choices"]:
                    continue
                choice = response["choices"][0]
                key = rng.choice(["finish_reason", "message", "stop_reason", "index", "matched_stop", "text"])
                value = rng.choice(HOSTILE_VALUES)
                if key == "message" and rng.random() < 0.5:
                    choice["message"]["content"] = value
                else:
                    choice[key] = value
                if rng.random() < 0.3 and isinstance(record.get("request"), dict):
                    record["request"]["max_tokens"] = rng.choice(HOSTILE_VALUES)
                lines[at] = json.dumps(record, ensure_ascii=rng.random() < 0.5).replace('"__BIGINT__"', "1" + "0" * 4400)
                note = f"{key}={_short(value)}"
        elif how == "bytes":
            raw = bytearray("\n".join(lines).encode())
            for _ in range(rng.randint(1, 8)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            path = self._file("log.jsonl", bytes(raw))
            return Case("logs", ["logs", str(path)], "random bytes")
        elif how == "truncate":
            whole = "\n".join(lines)
            lines = [whole[: rng.randrange(len(whole))]]
        elif how == "nest":
            depth = rng.choice([100, 1000, 50_000])
            lines.append('{"response": {"choices": [{"finish_reason": "stop", "message": ' + "[" * depth + "]" * depth + "}]}}")
        else:
            lines.append(rng.choice(["[]", "5", '"x"', "{}", '{"choices": 3}', '{"choices": [null]}', '{"response": []}']))
        path = self._file("log.jsonl", "\n".join(lines) + "\n")
        args = ["logs", str(path)]
        if rng.random() < 0.3:
            args += ["--json"]
        if rng.random() < 0.2:
            args += ["--model", str(self.base / rng.choice(self.families))]
        return Case("logs", args, note)

    # command-line arguments ----------------------------------------------------------------------
    def args_case(self) -> Case:
        rng = self.rng
        folder = self.base / rng.choice(self.families)
        stop = rng.choice(["User:", "\\n", "", os.fsdecode(b"\xff\xfe"), "ab " * rng.choice([10, 1300, 2000]), "<|im_end|>",
                           "\\ud800", "x" * 5000, "\u00e9" * 100])
        if rng.random() < 0.5:
            return Case("args", ["probe-stop", stop, "--model", str(folder)], f"probe-stop {_short(stop)}")
        text = rng.choice([os.fsdecode(b"a\xffb"), "x" * 100_000, "", "{{ raise_exception('x') }}", "\u202e"])
        return Case("args", ["render", str(folder), "-m", rng.choice(["user", "assistant", "system", "tool", ""]), text],
                    f"render -m {_short(text)}")

    def cases(self, count: int) -> list[Case]:
        makers = [self.json_case, self.json_case, self.template_case, self.template_case, self.template_case,
                  self.gguf_case, self.gguf_case, self.serving_case, self.serving_case, self.args_case,
                  self.labels_case, self.logs_case]
        return [self.rng.choice(makers)() for _ in range(count)]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:30]}…({len(text)} chars)"


def _gs(text: str) -> bytes:
    raw = text.encode("utf-8", "surrogatepass")
    return struct.pack("<Q", len(raw)) + raw


def _gstrings(items: list[str]) -> bytes:
    return struct.pack("<IQ", 8, len(items)) + b"".join(_gs(i) for i in items)


def _gints(items: list[int]) -> bytes:
    return struct.pack("<IQ", 5, len(items)) + b"".join(struct.pack("<i", i) for i in items)


def _gguf(kv: dict[str, tuple[int, bytes]]) -> bytes:
    body = b"".join(_gs(key) + struct.pack("<I", kind) + value for key, (kind, value) in kv.items())
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kv)) + body


# --- running ------------------------------------------------------------------------------------


def _child(case: Case, out: Path, err: Path) -> None:
    """In the forked child: run the CLI as `stopdoctor ARGS` would, and leave with its exit code."""
    code = 70
    try:
        resource.setrlimit(resource.RLIMIT_AS, (HARD_MEMORY_GB << 30, HARD_MEMORY_GB << 30))
        for fd, path in ((1, out), (2, err)):
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(handle, fd)
            os.close(handle)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.argv = ["stopdoctor", *case.args]
        from stopdoctor.cli import main

        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 2
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException as error:  # noqa: BLE001 - anything escaping the CLI is the failure we look for
        try:
            os.write(2, f"\nTraceback (escaped the CLI): {type(error).__name__}: {error}\n".encode("utf-8", "replace"))
        finally:
            code = 71
    os._exit(code)


def run_cases(cases: list[Case], work: Path, jobs: int = 2, progress: bool = False) -> Report:
    env_before = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # no Rust thread pool across fork()
    report = Report(parent_mb=_resident_mb())
    limit = MAX_RSS_MB + max(0.0, report.parent_mb - FRESH_PROCESS_MB)
    started = time.monotonic()
    pending = list(enumerate(cases))
    running: dict[int, tuple[int, Case, float, Path, Path]] = {}
    results: dict[int, Outcome] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                index, case = pending.pop(0)
                out, err = work / f"out{index}.txt", work / f"err{index}.txt"
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(case, out, err)
                running[pid] = (index, case, time.monotonic(), out, err)
            time.sleep(0.005)
            for pid, (index, case, begun, out, err) in list(running.items()):
                done, status, usage = os.wait4(pid, os.WNOHANG)
                elapsed = time.monotonic() - begun
                if not done and elapsed > MAX_SECONDS:
                    os.kill(pid, signal.SIGKILL)
                    done, status, usage = os.wait4(pid, 0)
                    code: int | str = "hang"
                elif not done:
                    continue
                else:
                    code = os.waitstatus_to_exitcode(status)
                    if code < 0:
                        code = f"signal {-code}"
                del running[pid]
                stderr = err.read_text(encoding="utf-8", errors="replace") if err.exists() else ""
                results[index] = Outcome(case, code, elapsed, usage.ru_maxrss / 1024, stderr, limit)
                if progress and len(results) % 50 == 0:
                    print(f"  {len(results)}/{len(cases)} …", file=sys.stderr, flush=True)
                for path in (out, err):
                    path.unlink(missing_ok=True)
    finally:
        for pid in running:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        if env_before is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = env_before
    report.outcomes = [results[i] for i in sorted(results)]
    report.seconds = time.monotonic() - started
    return report


def _resident_mb() -> float:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fuzz(count: int, seed: int, jobs: int = 2, keep: Path | None = None, progress: bool = False) -> Report:
    # Imported before forking, so that each child starts with them loaded.
    import jinja2  # noqa: F401
    import tokenizers  # noqa: F401
    import yaml  # noqa: F401

    import stopdoctor.api  # noqa: F401
    import stopdoctor.cli  # noqa: F401
    import stopdoctor.config  # noqa: F401
    import stopdoctor.actions.probe  # noqa: F401
    import stopdoctor.actions.render  # noqa: F401
    import stopdoctor.template.render  # noqa: F401
    import stopdoctor.facts.serving  # noqa: F401

    work = Path(tempfile.mkdtemp(prefix="stopdoctor-fuzz-", dir=keep))
    try:
        cases = Generator(seed, work).cases(count)
        return run_cases(cases, work, jobs, progress)
    finally:
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the generated inputs under this folder")
    options = parser.parse_args()
    report = fuzz(options.cases, options.seed, options.jobs, options.keep, progress=True)
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
