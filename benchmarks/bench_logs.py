"""`stopdoctor logs` at scale: records/s for the whole report against `jq` counting finish_reason
over the same file, in the same run.

Writes N synthetic response lines (default 1,000,000; a mix of OpenAI chat/completions pairs with
vLLM `stop_reason`, Ollama, TGI and llama.cpp shapes, 8% cut by the budget, 1% running on into a
fake user turn, a few bad lines) to a temp file, then times:
  - analyze_logs (the whole report, in-process, as `stopdoctor logs` computes it)
  - DuckDB's own minimal finish-reason count: the same five paths, one parse a line, GROUP BY
  - jq -c '.response.choices[0].finish_reason // .done_reason // …' | sort | uniq -c
    (skipped, saying so, when jq is not installed: apt-get install -y jq)

Also prints the peak resident memory of the process (ru_maxrss: DuckDB and Python together).

Run: python benchmarks/bench_logs.py [N] [--keep PATH] [--input PATH (an existing file: not written, not deleted)]
       [--no-jq]

Measured (2 shared CPU cores, 24 GB, DuckDB 2.0.1, memory_limit 512 MB; see the README's `logs` section):
  1,000,000 lines (389 MB):  see benchmarks/RESULTS.md
  10,000,000 lines (2.7 GB): see benchmarks/RESULTS.md
"""

from __future__ import annotations

import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ANSWERS = [
    "The capital of France is Paris.",
    "Here is a short summary of the article. It covers three points: cost, speed and safety.",
    "Sure! To reverse a list in Python use `items[::-1]` or `items.reverse()`.\n\n```python\nitems = [1, 2, 3]\nitems.reverse()\n```",
    "A transcript example:\n\nUser: My order hasn't arrived.\nAgent: Sorry to hear that, let me check.",
    "1. Preheat the oven.\n2. Mix the flour and the eggs.\n3. Bake for 20 minutes.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
]
CUT = [
    "The history of the Roman Empire spans more than a thousand years, beginning with the founding of",
    "Here are ten ideas for your product launch: first, partner with local influencers who",
]
RUNAWAY = "The capital of France is Paris.\nsystem\n\nuser\nI'm planning to launch product {} in the market and"
MODELS = ["llama-3-8b-instruct", "qwen2.5-7b-instruct", "smollm2-135m"]


def synthetic_line(i: int, rng: random.Random) -> str:
    roll = rng.random()
    model = MODELS[i % len(MODELS)]
    max_tokens = rng.choice([64, 256, 1024])
    if roll < 0.01:
        return "{not json" if i % 2 else ""
    if roll < 0.02:
        text, finish = RUNAWAY.format(i), "length"  # every runaway distinct: no answer diagnosed twice
    elif roll < 0.10:
        text, finish = rng.choice(CUT), "length"
    else:
        text, finish = rng.choice(ANSWERS), "stop"
    shape = i % 10
    if shape < 6:  # OpenAI chat pair (vLLM, with stop_reason)
        record = {"request": {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "Hi"}]},
                  "response": {"id": f"chatcmpl-{i}", "object": "chat.completion", "created": 1700000000 + i, "model": model,
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                            "finish_reason": finish, "stop_reason": None if finish == "length" else 128009}],
                               "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52}}}
    elif shape < 7:  # bare completions response
        record = {"id": f"cmpl-{i}", "object": "text_completion", "model": model,
                  "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    elif shape < 8:  # Ollama /api/chat
        record = {"model": model, "created_at": "2026-01-01T00:00:00Z", "message": {"role": "assistant", "content": text},
                  "done": True, "done_reason": finish, "eval_count": 40}
    elif shape < 9:  # TGI /generate
        record = {"generated_text": text, "details": {"finish_reason": "length" if finish == "length" else "eos_token",
                                                      "generated_tokens": 40}}
    else:  # llama.cpp /completion
        record = {"content": text, "model": model, "stop_type": "limit" if finish == "length" else "eos",
                  "tokens_predicted": 40}
    return json.dumps(record)


def write_synthetic(path: Path, lines: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w") as handle:
        chunk = []
        for i in range(lines):
            chunk.append(synthetic_line(i, rng))
            if len(chunk) == 10000:
                handle.write("\n".join(chunk) + "\n")
                chunk = []
        if chunk:
            handle.write("\n".join(chunk) + "\n")


JQ_FILTER = ('(.response.choices[0].finish_reason // .choices[0].finish_reason // .done_reason '
             '// .details.finish_reason // .stop_type // "none")')


def _cpu(who: int = resource.RUSAGE_SELF) -> float:
    """CPU seconds (user + system) of this process (every DuckDB thread) or of its finished children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def time_jq(path: Path) -> tuple[float, str, float] | None:
    """jq's wall seconds, its counts, and the CPU seconds of jq, sort and uniq together."""
    jq = shutil.which("jq")
    if jq is None:
        return None
    cpu = _cpu(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    # -R + fromjson? so bad lines are skipped as stopdoctor does, instead of aborting jq.
    out = subprocess.run(f"{jq} -R -r 'fromjson? | {JQ_FILTER}' {path} | sort | uniq -c", shell=True,
                         capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - start, " ".join(out.split()), _cpu(resource.RUSAGE_CHILDREN) - cpu


# The same five paths as JQ_FILTER, read in one parse a line (yyjson), counted by DuckDB: the
# least a finish-reason count over these shapes costs in DuckDB (no shapes, flags or texts).
DUCKDB_PATHS = ["$.response.choices[0].finish_reason", "$.choices[0].finish_reason", "$.done_reason",
                "$.details.finish_reason", "$.stop_type"]


def time_duckdb_minimal(path: Path) -> tuple[float, str, float]:
    """DuckDB's own minimal finish-reason count over the file, read as stopdoctor reads lines."""
    import duckdb

    from stopdoctor.logs.sql import source_sql

    con = duckdb.connect()
    con.execute("SET memory_limit = '512MB'")
    paths = ", ".join("'" + p + "'" for p in DUCKDB_PATHS)
    query = (f"SELECT coalesce(v[1], v[2], v[3], v[4], v[5], 'none') AS finish, count(*) FROM ("
             f"SELECT json_extract_string(line, [{paths}]) AS v FROM {source_sql(str(path))} WHERE json_valid(line)) "
             "GROUP BY 1 ORDER BY 2 DESC")
    cpu, start = _cpu(), time.perf_counter()
    rows = con.execute(query).fetchall()
    return time.perf_counter() - start, " ".join(f"{n} {f}" for f, n in rows), _cpu() - cpu


def main() -> None:
    args = sys.argv[1:]
    keep = None
    if "--keep" in args:
        keep = Path(args[args.index("--keep") + 1])
        del args[args.index("--keep"):args.index("--keep") + 2]
    existing = None
    if "--input" in args:
        existing = Path(args[args.index("--input") + 1])
        del args[args.index("--input"):args.index("--input") + 2]
    skip_jq = "--no-jq" in args
    args = [a for a in args if a != "--no-jq"]
    lines = int(args[0]) if args else 1_000_000
    from stopdoctor.logs.query import analyze_logs

    folder = Path(tempfile.mkdtemp(prefix="stopdoctor-bench-logs-"))
    path = existing or keep or folder / "responses.jsonl"
    try:
        if existing is None:
            start = time.perf_counter()
            write_synthetic(path, lines)
            print(f"wrote {lines:,} lines ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - start:.1f} s")
        cpu, start = _cpu(), time.perf_counter()
        report = analyze_logs([str(path)])
        ours, ours_cpu = time.perf_counter() - start, _cpu() - cpu
        problems = ", ".join(f"{k} {p.count:,}" for k, p in report.problems.items())
        lines = report.lines
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(f"stopdoctor logs (whole report): {ours:.2f} s ({ours_cpu:.2f} s CPU), {lines / ours:,.0f} lines/s, "
              f"peak RSS {peak:,.0f} MiB")
        print(f"  responses {report.responses:,}, bad {report.bad_lines:,}, blank {report.blank:,}; "
              f"finish {report.finish}; {problems}")
        minimal, counts, minimal_cpu = time_duckdb_minimal(path)
        print(f"DuckDB minimal finish-reason count (one parse a line): {minimal:.2f} s ({minimal_cpu:.2f} s CPU), "
              f"{lines / minimal:,.0f} lines/s  [{counts}]")
        print(f"stopdoctor's whole report / DuckDB minimal: {ours / minimal:.2f}x wall, {ours_cpu / minimal_cpu:.2f}x CPU "
              "(goal <= 1.2x)")
        jq = None if skip_jq else time_jq(path)
        if jq is None:
            print("jq: skipped (--no-jq, or not installed: apt-get install -y jq)")
        else:
            seconds, counts, jq_cpu = jq
            print(f"jq (finish_reason counts only): {seconds:.2f} s ({jq_cpu:.2f} s CPU), {lines / seconds:,.0f} records/s  [{counts}]")
            print(f"speed-up over jq: {seconds / ours:.1f}x wall, {jq_cpu / ours_cpu:.1f}x CPU (goal >= 2x)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
