"""Random hostile inputs over the classes of issue #17 (round 2), through the real CLI with the
runner of tests/fuzz.py (a forked child a case, its exit code, time and peak memory): generate on
hostile safetensors, configs and --messages files (each refused before torch), template builtins
that run unbounded in one call, GGUF tensor tables that do not add up, logs with glob names, bytes
that are not UTF-8, long lines and compression bombs, labels rows without end, probe-stop with many
strings, out-of-range options, -o and fix --write on pipes and folders, tokenizer.json padding and
special token texts with colons, and generate --server against stand-in servers that never answer,
drip, send endless bodies, lines or streams, deep JSON or escapes (issue #32). Every run must end
in exit 0, 1 or 2 within the runner's time and memory limits, with no traceback, and fix --write must change both files or neither.

    python tests/fuzz_hostile.py [--cases 300] [--seed 1] [--jobs 2]

tests/test_fuzz.py runs a share of it (marked `fuzz`).

Imports: the standard library, tests.fuzz, tests.test_hostile_inputs' file builders.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests import fuzz  # noqa: E402
from tests.fuzz import Case, Generator, Report  # noqa: E402

KINDS = ("generate", "sandbox", "gguf-table", "logs", "labels", "args", "writes", "tokenizer", "server")
# tests/hostile_server.py's modes, each served by one stand-in server for the whole run (issue #32)
SERVER_MODES = ("silent", "drip-headers", "drip-body", "endless-body", "endless-500", "endless-line", "endless-stream",
                "flood-stream", "nested", "usage-list", "usage-string", "bad-utf8", "hostile-text", "loop-500", "ok")

SANDBOX = [
    "{{ ([[0] * A] * B)|sum(start=[]) }}", "{{ (['x' * A] * B)|sum(start='') }}", "{{ range(B)|sum }}",
    "{{ '%(a).Wf' % {'a': 1.5} }}", "{{ '%(a)Ws' % {'a': 'x'} }}", "{{ '{0:{1}}'.format('x', 'W') }}",
    "{{ '{a:>{b}}'.format_map({'a': 'x', 'b': W}) }}", "{{ '%Ws'|format('x') }}", "{{ '%*s'|format(W, 'x') }}",
    "{{ strftime_now('%AY' * B) }}", "{{ ('%As' * B) % ((1,) * B) }}", "{{ ('{:A}' * B).format(*((1,) * B)) }}",
    "{{ '{0:.W}'.format(1.5) }}", "{{ '%(a)-W.Wd' % {'a': 3} }}",
]


class HostileGenerator(Generator):
    """tests/fuzz.py's generator (synthetic model folders in `work`), with round-2 makers."""

    def __init__(self, seed: int, work: Path) -> None:
        super().__init__(seed, work)
        self.clean = self.base / "clean-chatml"
        # fix --write cases whose second edit cannot be written: model folder -> (its
        # generation_config.json, the serving file, the serving file's bytes) before the run
        self.watched: dict[str, tuple[bytes, Path, bytes]] = {}
        self.servers: dict[str, object] = {}  # mode -> a running tests.hostile_server.HostileServer

    def server_case(self) -> Case:
        from tests.hostile_server import HostileServer

        rng = self.rng
        mode = rng.choice(SERVER_MODES)
        if mode not in self.servers:
            self.servers[mode] = HostileServer(mode)
        args = ["generate", str(self.clean), "-m", "user", "hi", "--server", self.servers[mode].url,
                "--server-timeout", str(rng.choice([1, 3]))]
        args += ["--stream"] if rng.random() < 0.5 else []
        args += ["--server-model", "m"] if rng.random() < 0.7 else []
        args += ["--json"] if rng.random() < 0.3 else []
        return Case("server", args, f"{mode} {' '.join(a for a in args if a.startswith('--'))}")

    def stop_servers(self) -> None:
        for server in self.servers.values():
            server.stop()

    def _copy(self) -> Path:
        self.count += 1
        folder = self.work / f"case{self.count}"
        shutil.copytree(self.clean, folder)
        return folder

    def generate_case(self) -> Case:
        from tests.test_hostile_inputs import EMBEDDING, NESTED_HEADER, safetensors_bytes

        rng = self.rng
        folder = self._copy()
        how = rng.choice(["cut", "length", "nested", "shape", "empty", "dtype", "config", "messages", "context"])
        weights = safetensors_bytes(EMBEDDING)
        args = ["generate", str(folder), "-m", "user", "hi", "--device", "cpu"]
        if how == "cut":
            weights = weights[: rng.choice([0, 3, 8, 100, 4096])]
        elif how == "length":
            weights = safetensors_bytes(header=b"{}", length=rng.choice([2**63, 2**64 - 1, 10**9, 5000]))
        elif how == "nested":
            weights = safetensors_bytes(header=NESTED_HEADER)
        elif how == "shape":
            shape = rng.choice([[2**40, 2**40], [-1], [1.5], ["2"], [1] * 9, [2**64]])
            weights = safetensors_bytes(header=json.dumps({"w": {"dtype": "F32", "shape": shape, "data_offsets": [0, 8]}}).encode(),
                                        data=b"\0" * 8)
        elif how == "empty":
            weights = safetensors_bytes({})
        elif how == "dtype":
            weights = safetensors_bytes(header=json.dumps({"w": {"dtype": rng.choice(["Q9", 3, None]), "shape": [1],
                                                                 "data_offsets": [0, 1]}}).encode(), data=b"\0")
        elif how == "config":
            config = json.loads((folder / "config.json").read_text())
            key = rng.choice(["hidden_size", "num_hidden_layers", "vocab_size", "max_position_embeddings"])
            config[key] = rng.choice([2**31, 10**6, 0, -1, 2**63, "x", None, True])
            (folder / "config.json").write_text(json.dumps(config))
        elif how == "messages":
            path = folder / "messages.json"
            path.write_bytes(rng.choice([b"[" * 100_000 + b"]" * 100_000, b'[{"role": "user", "content": "\xff"}]',
                                         b'[{"role": "user", "content": 1' + b"0" * 5000 + b"}]", b"{}", b"[]", b"",
                                         b'[{"role": 3}]']))
            args = ["generate", str(folder), "--messages", str(path)]
            if rng.random() < 0.3:
                os.unlink(path)
                os.mkfifo(path)
        else:
            config = json.loads((folder / "config.json").read_text())
            config["max_position_embeddings"] = rng.choice([1, 16, 64])
            (folder / "config.json").write_text(json.dumps(config))
            args = ["generate", str(folder), "-m", "user", "word " * rng.choice([10, 100, 1000]), "--device", "cpu"]
        (folder / "model.safetensors").write_bytes(weights)
        return Case("generate", args, how)

    def sandbox_case(self) -> Case:
        rng = self.rng
        folder = self._copy()
        snippet = rng.choice(SANDBOX)
        snippet = (snippet.replace("W", str(rng.choice([1, 99, 999_999, 1_999_999, 1_999_999_999, 10**12])))
                   .replace("A", str(rng.choice([1, 10, 1000, 100_000]))).replace("B", str(rng.choice([1, 100, 2000, 20_000]))))
        (folder / "chat_template.jinja").write_text(snippet + "{% for m in messages %}{{ m.content }}<|im_end|>{% endfor %}")
        command = rng.choice(["inspect", "render"])
        return Case("sandbox", [command, str(folder)] + (["-m", "user", "hi"] if command == "render" else []), snippet[:120])

    def gguf_table_case(self) -> Case:
        from tests.test_hostile_inputs import F32, gguf_with_tensors

        rng = self.rng
        tensors = [("a", F32, [4], 0), ("b", F32, [8], 32), ("c", F32, [16], 64)]
        how = rng.choice(["count", "type", "offset", "short", "ok", "huge"])
        count, data = None, 128
        if how == "count":
            count = rng.choice([0, 1, 2, 4, 2**20])
        elif how == "type":
            tensors[1] = ("b", rng.choice([4, 5, 31, 36, 99, 2**31]), [8], 32)
        elif how == "offset":
            tensors[2] = ("c", F32, [16], rng.choice([0, 40, 63, 65, 2**62]))
        elif how == "short":
            data = rng.choice([0, 50, 100, 127])
        elif how == "huge":
            tensors[2] = ("c", F32, [rng.choice([2**40, 2**62])], 64)
        path = self._file("model.gguf", gguf_with_tensors(tensors, count=count, data=data))
        return Case("gguf-table", [rng.choice(["inspect", "check"]), str(path)], how)

    def logs_case(self) -> Case:
        from tests.test_hostile_inputs import LOG_LINE

        rng = self.rng
        how = rng.choice(["glob", "latin1", "long", "nul", "bomb", "folder", "ok"])
        self.count += 1
        folder = self.work / f"case{self.count}"
        folder.mkdir()
        line = (LOG_LINE + "\n").encode()
        name, data = "log.jsonl", line * 3
        if how == "glob":
            for other in ("x1.jsonl", "xa.jsonl"):
                (folder / other).write_bytes(line)
            name = rng.choice(["x[1].jsonl", "x*.jsonl", "x?.jsonl", "x{a,1}.jsonl"])
        elif how == "latin1":
            data = line + b'{"choices": [{"finish_reason": "stop", "text": "caf\xe9"}]}\n' + line
            if rng.random() < 0.5:
                name, data = "log.jsonl.gz", _gzip(data)
        elif how == "long":
            data = line + b'{"x": "' + b"y" * rng.choice([8 << 20, 9 << 20, 40 << 20]) + b'"}\n'
        elif how == "nul":
            data = b"\0" * rng.choice([1 << 20, 50 << 20])
        elif how == "bomb":
            name, data = "log.jsonl.gz", _gzip_bomb(rng.choice([300, 600]))
        path = folder / name
        if how == "folder":
            path.mkdir()
        elif how != "glob" or "[" in name:
            path.write_bytes(data)
        return Case("logs", ["logs", str(path)] + (["--json"] if rng.random() < 0.3 else []), f"{how} {name}")

    def labels_case(self) -> Case:
        rng = self.rng
        how = rng.choice(["sparse", "long", "arrays", "ok"])
        self.count += 1
        path = self.work / f"case{self.count}" / "data.jsonl"
        path.parent.mkdir()
        row = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}]}\n'
        if how == "sparse":
            with open(path, "wb") as handle:
                handle.truncate(rng.choice([1 << 30, 4 << 30]))
        elif how == "long":
            path.write_text(row + '{"messages": [{"role": "user", "content": "' + "x" * rng.choice([(16 << 20) - 200, 17 << 20]) + '"}]}\n')
        elif how == "arrays":
            path.write_text('{"messages": [], "x": [' + ",".join(["[]"] * rng.choice([10, 1_100_000])) + "]}\n")
        else:
            path.write_text(row * 3)
        args = ["labels", str(self.clean), "--data", str(path)] + (["--limit", "1"] if rng.random() < 0.5 else [])
        return Case("labels", args, how)

    def args_case(self) -> Case:
        rng = self.rng
        how = rng.choice(["seed", "server", "stops"])
        if how == "seed":
            value = str(rng.choice([2**64, 2**64 - 1, -1, 10**30]))
            return Case("args", ["generate", str(self.clean), "-m", "user", "hi", "--temperature", "1", "--seed", value], f"seed {value}")
        if how == "server":
            url = rng.choice(["http://[::1", "http://host:99999", "http://", "http://[::1]:80", "https://a b", "http://%zz"])
            return Case("args", ["generate", str(self.clean), "-m", "user", "hi", "--server", url], f"server {url}")
        if how == "stops":
            count = rng.choice([10, 256, 257, 10_000])
        return Case("args", ["probe-stop", *[f"s{i}" for i in range(count)], "--model", str(self.clean)], f"{count} stops")

    def writes_case(self) -> Case:
        rng = self.rng
        how = rng.choice(["fifo-o", "folder-o", "fifo-fix", "folder-fix", "long-name-fix"])
        self.count += 1
        folder = self.work / f"case{self.count}"
        model = folder / "model"
        shutil.copytree(self.base / "llama3-eot-missing", model)
        if how.endswith("-o"):
            target = folder / "report.txt"
            os.mkfifo(target) if how == "fifo-o" else target.mkdir()
            return Case("writes", ["inspect", str(model), "-o", str(target)], how)
        if how == "long-name-fix":
            stale = folder / "stale"
            stale.mkdir()
            (stale / "generation_config.json").write_text('{"eos_token_id": 609}')
            serve = folder / ("s" * 243 + ".sh")
            serve.write_text(f"vllm serve {model} \\\n  --generation-config {stale} \\\n  --port 8000\n")
            self.watched[str(model)] = ((model / "generation_config.json").read_bytes(), serve, serve.read_bytes())
            return Case("writes", ["fix", str(model), "--serving", str(serve), "--write"], how)
        target = model / "generation_config.json"
        target.unlink()
        os.mkfifo(target) if how == "fifo-fix" else target.mkdir()
        return Case("writes", ["fix", str(model), "--write"], how)

    def tokenizer_case(self) -> Case:
        from tests.test_hostile_inputs import colon_gguf

        rng = self.rng
        how = rng.choice(["padding", "truncation", "regex", "colon"])
        if how == "colon":
            self.count += 1
            (self.work / f"case{self.count}").mkdir()
            path = colon_gguf(self.work / f"case{self.count}" / "colon.gguf")
            args = ["render", str(path), "-m", "user", "hi"] if rng.random() < 0.7 else ["inspect", str(path)]
            return Case("tokenizer", args, how)
        folder = self._copy()
        document = json.loads((folder / "tokenizer.json").read_text())
        if how == "padding":
            document["padding"] = {"strategy": {"Fixed": rng.choice([30_000_000, 2**31])}, "direction": "Right",
                                   "pad_to_multiple_of": None, "pad_id": 0, "pad_type_id": 0, "pad_token": "<|endoftext|>"}
        elif how == "truncation":
            document["truncation"] = {"direction": "Right", "max_length": 1, "strategy": "LongestFirst", "stride": 0}
        else:
            document["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": rng.choice(["(a+)+$", "(a|aa)+$", "(.*)*b"])},
                                         "behavior": "Isolated", "invert": False}
        (folder / "tokenizer.json").write_text(json.dumps(document))
        command = rng.choice(["render", "probe-stop", "inspect"])
        args = {"render": ["render", str(folder), "-m", "user", "a" * 40],
                "probe-stop": ["probe-stop", "<|im_end|>", "--model", str(folder)],
                "inspect": ["inspect", str(folder)]}[command]
        return Case("tokenizer", args, f"{how} {command}")

    def cases(self, count: int) -> list[Case]:
        makers = [self.generate_case, self.sandbox_case, self.gguf_table_case, self.logs_case, self.labels_case,
                  self.args_case, self.writes_case, self.tokenizer_case, self.server_case]
        # Every kind at least once, then at random.
        return [maker() for maker in makers][:count] + [self.rng.choice(makers)() for _ in range(count - len(makers))]


def _gzip(data: bytes) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, 31)
    return compressor.compress(data) + compressor.flush()


def _gzip_bomb(megabytes_of_lines: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"{}\n" * (1 << 20)
    return b"".join(compressor.compress(block) for _ in range(megabytes_of_lines // 3)) + compressor.flush()


def partial_writes(watched: dict[str, tuple[bytes, Path, bytes]]) -> list[str]:
    """The fix --write cases that changed one file of the two (both or neither may change)."""
    partial = []
    for model, (config, serve, serving) in watched.items():
        changed = ((Path(model) / "generation_config.json").read_bytes() != config, serve.read_bytes() != serving)
        if changed[0] != changed[1]:
            partial.append(model)
    return partial


def fuzz_hostile(count: int, seed: int, jobs: int = 2, keep: Path | None = None, progress: bool = False) -> Report:
    # Imported before forking, so that each child starts with them loaded.
    import tokenizers  # noqa: F401

    import stopdoctor.logs.query  # noqa: F401
    import stopdoctor.api  # noqa: F401
    import stopdoctor.cli  # noqa: F401

    work = Path(tempfile.mkdtemp(prefix="stopdoctor-fuzz2-", dir=keep))
    threads = os.environ.get("STOPDOCTOR_THREADS")
    os.environ["STOPDOCTOR_THREADS"] = "1000000000"  # an OpenMP thread count that would abort, if ever used
    try:
        generator = HostileGenerator(seed, work)
        try:
            cases = generator.cases(count)
            report = fuzz.run_cases(cases, work, jobs, progress)
        finally:
            generator.stop_servers()
        report.partial_writes = partial_writes(generator.watched)
        return report
    finally:
        if threads is None:
            os.environ.pop("STOPDOCTOR_THREADS", None)
        else:
            os.environ["STOPDOCTOR_THREADS"] = threads
        if keep is None:
            shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--keep", type=Path, help="keep the generated inputs under this folder")
    options = parser.parse_args()
    report = fuzz_hostile(options.cases, options.seed, options.jobs, options.keep, progress=True)
    print(report.summary())
    print(f"  partial writes: {len(report.partial_writes)}")
    return 1 if report.failures or report.partial_writes else 0


if __name__ == "__main__":
    sys.exit(main())
