"""Cold command timing shared by the benchmarks: each contender a fresh process, the contenders
interleaved round by round (a shared, busy machine slows them alike), wall time and CPU time
(user + system of the child, from rusage) both kept. CPU time is the steadier figure on a loaded
machine; wall time is what a user waits on a quiet one.

`--baseline TREE` in the scripts runs the same stopdoctor commands from another checkout (e.g. a
`git worktree` of main) in the same rounds: before and after in one window.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Contender:
    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = (0, 1)
    cwd: str | None = None  # `python -m` puts the working folder first on sys.path: a checkout runs from its own
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def run(self) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env={**os.environ, **self.env}, cwd=self.cwd or self.env.get("PYTHONPATH"))
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode not in self.ok:
            raise SystemExit(f"{self.name}: {' '.join(self.command)} exited {done.returncode}: "
                             f"{done.stderr.decode(errors='replace')[-400:]}")
        self.walls.append(wall)
        self.cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)

    def line(self) -> str:
        return (f"{self.name:<58} wall median {statistics.median(self.walls) * 1000:6.0f} ms "
                f"(range {min(self.walls) * 1000:.0f}-{max(self.walls) * 1000:.0f})   CPU median "
                f"{statistics.median(self.cpus) * 1000:6.0f} ms (range {min(self.cpus) * 1000:.0f}-{max(self.cpus) * 1000:.0f})")


def stopdoctor(tree: Path | None, *args: str) -> tuple[list[str], dict[str, str]]:
    """`python -m stopdoctor ARGS` from `tree` (this checkout when None), bytecode compiled as in any install."""
    tree = tree or Path(__file__).resolve().parent.parent
    return [sys.executable, "-m", "stopdoctor", *args], {"PYTHONPATH": str(tree)}


def compile_tree(tree: Path | None) -> None:
    tree = tree or Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "stopdoctor")], stdout=subprocess.DEVNULL, check=True)


def run_rounds(contenders: list[Contender], runs: int) -> None:
    for contender in contenders:  # warm-up: page cache, bytecode
        contender.run()
        contender.walls.clear()
        contender.cpus.clear()
    for _ in range(runs):
        for contender in contenders:
            contender.run()
    for contender in contenders:
        print(contender.line())


def ratio(name: str, slow: Contender, fast: Contender, goal: float | None = None) -> None:
    wall = statistics.median(slow.walls) / statistics.median(fast.walls)
    cpu = statistics.median(slow.cpus) / statistics.median(fast.cpus)
    verdict = "" if goal is None else f"  (goal >= {goal:g}x: wall {'met' if wall >= goal else 'missed'}, CPU {'met' if cpu >= goal else 'missed'})"
    print(f"# {name}: {wall:.1f}x by median wall, {cpu:.1f}x by median CPU{verdict}")


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"
