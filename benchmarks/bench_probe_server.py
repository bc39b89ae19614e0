"""Wall time of `stopdoctor probe-server` on the real llama-server (the tests' b10434 build, CPU only,
2 threads, one slot, 2048 context) serving SmolLM2-135M-Instruct Q4_1: the whole battery, in-process
(`api.probe_server`), RUNS times; per probe the median seconds and the requests it sent. The goal
(issue #31): the whole battery under 60 s.

Run: python benchmarks/bench_probe_server.py [GGUF]
GGUF defaults to $STOPDOCTOR_TEST_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

RUNS = 3
GOAL_S = 60.0
SERVER_ARGS = ("--ctx-size", "2048", "--parallel", "1", "--threads", "2", "--device", "none", "--no-warmup",
               "--no-webui", "--seed", "0")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fixtures.llamaserver import ensure_server
    from stopdoctor import api

    models = Path(os.environ.get("STOPDOCTOR_TEST_MODELS", Path.home() / ".cache" / "stopdoctor" / "test-models"))
    gguf = sys.argv[1] if len(sys.argv) > 1 else str(models / "SmolLM2-135M-Instruct.Q4_1.gguf")
    server = ensure_server()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    process = subprocess.Popen([str(server.binary), "--model", gguf, "--host", "127.0.0.1", "--port", str(port),
                                *SERVER_ARGS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=server.environment())
    try:
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                if process.poll() is not None:
                    raise SystemExit("llama-server exited before it was ready")
                time.sleep(0.2)
        totals, per_probe = [], {}
        for _ in range(RUNS):
            started = time.perf_counter()
            result = api.probe_server(url)
            totals.append(time.perf_counter() - started)
            for probe in result.probes:
                per_probe.setdefault(probe.name, []).append((probe.seconds, probe.requests, probe.status))
        print(f"model: {gguf}\nllama-server: {server.binary}")
        print(f"{'probe':<16} {'status':<6} {'requests':>8} {'median s':>9}")
        for name, rows in per_probe.items():
            print(f"{name:<16} {rows[0][2]:<6} {rows[0][1]:>8} {statistics.median(r[0] for r in rows):>9.2f}")
        median = statistics.median(totals)
        print(f"whole battery: median {median:.1f} s, min {min(totals):.1f} s, max {max(totals):.1f} s over {RUNS} runs, "
              f"{result.requests} requests (goal < {GOAL_S:.0f} s: {'met' if median < GOAL_S else 'MISSED'})")
    finally:
        process.terminate()
        process.wait(timeout=15)


if __name__ == "__main__":
    main()
