"""What a probe is given and what it returns: the statuses, `ProbeContext` (a greedy client, what
the server said it is, what the tables expect, answers already paid for, the evidence list) and
`ProbeResult`.

Imports: core, runtimes.expected (data), actions.probe_server.client/identify.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from stopdoctor.actions.probe_server.client import Answer, ServerClient, Streamed
from stopdoctor.actions.probe_server.identify import ServerIdentity
from stopdoctor.core.records import record
from stopdoctor.runtimes.expected import EngineExpectation

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
STATUSES = (PASS, FAIL, WARN, SKIP)
Outcome = tuple[str, str, dict[str, Any]]  # (status, one-line summary, figures)


@record
class ProbeResult:
    name: str
    status: str  # pass | fail | warn | skip
    summary: str  # one line
    evidence: tuple[dict[str, Any], ...] = ()
    figures: dict[str, Any] = field(default_factory=dict)
    requests: int = 0
    seconds: float = 0.0


@dataclass
class ProbeContext:
    """What a probe may use: a greedy client (metered), what the server said it is, what the
    tables expect of it, answers earlier probes already paid for, and the evidence list."""

    client: ServerClient
    identity: ServerIdentity
    expectation: EngineExpectation
    shared: dict[str, Any]
    evidence: list[dict[str, Any]] = field(default_factory=list)

    def keep(self, answer: Answer | Streamed) -> Any:
        self.evidence.append(answer.evidence())
        return answer

    def chat(self, question: str, **params: Any) -> Answer:
        return self.keep(self.client.chat([{"role": "user", "content": question}], **params))

    def chat_stream(self, question: str, max_chunks: int | None = None, **params: Any) -> Streamed:
        return self.keep(self.client.chat_stream([{"role": "user", "content": question}], max_chunks, **params))

    def cached(self, key: str, make: Callable[[], Any]) -> Any:
        """An answer another probe may already have asked for (same request, greedy: same answer)."""
        if key not in self.shared:
            self.shared[key] = make()
        else:
            self.evidence.append({**self.shared[key].evidence(), "reused": True})
        return self.shared[key]


def verdict(failed: list[str], warned: list[str], passed: str, figures: dict[str, Any]) -> Outcome:
    """fail when anything failed (the warnings appended), else warn, else pass with `passed`."""
    if failed:
        return FAIL, "; ".join(failed + warned), figures
    if warned:
        return WARN, "; ".join(warned), figures
    return PASS, passed, figures
