"""`stopdoctor logs` peak memory on a large log against the obvious alternatives, each in its own
process (peak RSS from the kernel's rusage of that process: ru_maxrss of os.wait4).

Contenders (choose with --only NAME[,NAME]):
  stopdoctor   analyze_logs, the whole report (DuckDB engine, memory_limit 512 MB, spills to disk)
  json-list    the obvious script: every line json.loads'ed into a list, then finish reasons counted
               (run under an address-space cap, --cap-gb, default 4: past it, MemoryError, and the
               lines it had read are reported, so it cannot take the machine's memory)
  json-stream  the same counting one line at a time (bounded memory, but counts only: no examples,
               no problems, no shapes beyond the five of bench_logs.py)

Input: a file bench_logs.py writes (`python benchmarks/bench_logs.py 10000000 --keep FILE --no-jq`)
or --lines N to write one here (deleted after).

Run: python benchmarks/bench_logs_memory.py FILE [--only stopdoctor,json-list] [--cap-gb 4]
     python benchmarks/bench_logs_memory.py --lines 1000000
Figures: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STOPDOCTOR = """
import sys
from stopdoctor.logs.query import analyze_logs
report = analyze_logs([sys.argv[1]])
print(f"lines {report.lines:,}, responses {report.responses:,}, finish {report.finish}, "
      f"hallucinated-turn {report.problems['hallucinated-turn'].count:,}")
"""

FINISH = """
def finish(record):
    if not isinstance(record, dict):
        return None
    response = record.get("response", record)
    choices = response.get("choices") if isinstance(response, dict) else None
    if choices:
        return choices[0].get("finish_reason")
    return (record.get("done_reason") or (record.get("details") or {}).get("finish_reason")
            or record.get("stop_type"))
"""

JSON_LIST = FINISH + """
import json, sys
from collections import Counter
records = []
try:
    with open(sys.argv[1]) as handle:
        for line in handle:
            try:
                records.append(json.loads(line))
            except ValueError:
                records.append(None)
except MemoryError:
    n = len(records)
    records = None
    print(f"MemoryError after {n:,} lines")
    sys.exit(9)
print(f"lines {len(records):,}, finish {dict(Counter(finish(r) for r in records))}")
"""

JSON_STREAM = FINISH + """
import json, sys
from collections import Counter
counts, lines = Counter(), 0
with open(sys.argv[1]) as handle:
    for line in handle:
        lines += 1
        try:
            counts[finish(json.loads(line))] += 1
        except ValueError:
            counts["(bad)"] += 1
print(f"lines {lines:,}, finish {dict(counts)}")
"""

CONTENDERS = {"stopdoctor": STOPDOCTOR, "json-list": JSON_LIST, "json-stream": JSON_STREAM}


def run(name: str, path: Path, cap_gb: float) -> dict:
    capped = name == "json-list"

    def limit() -> None:
        if capped:
            cap = int(cap_gb * 2**30)
            resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CONTENDERS[name], str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=limit, env=env)
    out, err = child.communicate()
    seconds = time.perf_counter() - start
    # communicate() reaped the child; its rusage is in RUSAGE_CHILDREN only as a maximum over all
    # children, so each contender runs alone and the maximum is read right after it.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"name": name, "seconds": round(seconds, 1), "peak_rss_mib": round(peak), "exit": child.returncode,
            "capped_gb": cap_gb if capped else None, "says": (out.strip().splitlines() or [err.strip()[-300:]])[-1]}


def main() -> None:
    args = sys.argv[1:]

    def option(flag: str, default=None):
        if flag in args:
            value = args[args.index(flag) + 1]
            del args[args.index(flag):args.index(flag) + 2]
            return value
        return default

    only = option("--only", ",".join(CONTENDERS)).split(",")
    cap_gb = float(option("--cap-gb", "4"))
    lines = option("--lines")
    folder = None
    if lines:
        sys.path.insert(0, str(Path(__file__).parent))
        from bench_logs import write_synthetic

        folder = tempfile.TemporaryDirectory(prefix="stopdoctor-bench-memory-")
        path = Path(folder.name) / "responses.jsonl"
        write_synthetic(path, int(lines))
    else:
        path = Path(args[0])
    print(f"{path}: {path.stat().st_size / 1e9:.2f} GB")
    # One process per contender: RUSAGE_CHILDREN's maximum is per parent, so each runs from a
    # fresh parent (this script re-run with --only) when more than one is asked.
    if len(only) > 1:
        for name in only:
            subprocess.run([sys.executable, __file__, str(path), "--only", name, "--cap-gb", str(cap_gb)], check=False)
    else:
        result = run(only[0], path, cap_gb)
        print(json.dumps(result))
    if folder:
        folder.cleanup()


if __name__ == "__main__":
    main()
