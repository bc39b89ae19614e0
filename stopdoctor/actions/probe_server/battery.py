"""The probe battery: the probes in order with their bounds, the runner, and its report.

Each probe is a function of a `ProbeContext` (`probe.py`) that returns (status, summary, figures)
and records its evidence in the context. The runner meters every probe's requests (a probe past its own
declared count is a bug), stops the battery at its time bound, and turns a broken server into one
line on the probe that met it; after `BROKEN_LIMIT` probes in a row meet it, the rest are skipped.
`run_probes` runs any subset by name, so `check --live` and `generate --server` can ask for the
probes they share.

Imports: core, facts.http_client, runtimes.expected, actions.probe_server.*.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from stopdoctor.actions.probe_server import server_probes as s
from stopdoctor.actions.probe_server import stop_probes as t
from stopdoctor.actions.probe_server.client import ServerClient
from stopdoctor.actions.probe_server.probe import FAIL, SKIP, Outcome, ProbeContext, ProbeResult
from stopdoctor.actions.probe_server.http import Bounds, BoundedHttp, Transport
from stopdoctor.actions.probe_server.identify import ServerIdentity, identify
from stopdoctor.core.errors import InputError
from stopdoctor.core.records import record
from stopdoctor.facts.http_client import Reply, ServerBroken
from stopdoctor.runtimes.expected import EngineExpectation, expected_of

BROKEN_LIMIT = 2


@record
class ServerProbeReport:
    url: str
    identity: ServerIdentity
    expectation: EngineExpectation
    probes: tuple[ProbeResult, ...]
    requests: int
    seconds: float

    @property
    def failed(self) -> list[ProbeResult]:
        return [p for p in self.probes if p.status == FAIL]

    def probe(self, name: str) -> ProbeResult:
        return next(p for p in self.probes if p.name == name)


@record
class Settings:
    """How hard to probe: the bounds of one request and of the whole battery."""

    bounds: Bounds = Bounds()
    battery_s: float = 180.0


class Metered:
    """A `Transport` that counts one probe's requests and refuses any past its declared number."""

    def __init__(self, inner: Transport, probe: str, limit: int) -> None:
        self.inner, self.probe, self.limit, self.used = inner, probe, limit, 0
        self.bounds = getattr(inner, "bounds", Bounds())

    def _tick(self) -> None:
        self.used += 1
        if self.used > self.limit:
            raise RuntimeError(f"probe {self.probe} sent more than its {self.limit} requests")

    def get(self, path: str) -> Reply:
        self._tick()
        return self.inner.get(path)

    def post(self, path: str, body: dict[str, Any]) -> Reply:
        self._tick()
        return self.inner.post(path, body)

    def stream(self, path: str, body: dict[str, Any]) -> Iterator[str]:
        self._tick()
        return self.inner.stream(path, body)


@record
class Probe:
    name: str
    run: Callable[[ProbeContext], Outcome]
    max_requests: int


def all_probes() -> tuple[Probe, ...]:
    return (Probe("server", s.server_probe, 0), Probe("end-of-turn", t.end_of_turn, 2),
            Probe("stop-string", t.stop_string, 7), Probe("stop-held-back", t.stop_held_back, 4),
            Probe("finish-reason", t.finish_reason, 4), Probe("default-budget", s.default_budget, 2),
            Probe("context", s.context, 3), Probe("stream-whole", s.stream_whole, 4),
            Probe("reasoning-split", s.reasoning_split, 4))


PROBE_NAMES = ("server", "end-of-turn", "stop-string", "stop-held-back", "finish-reason", "default-budget", "context",
               "stream-whole", "reasoning-split")


def probe_server(url: str, model: str | None = None, api_key: str | None = None, settings: Settings = Settings(),
                 only: Iterable[str] | None = None, transport: Transport | None = None) -> ServerProbeReport:
    """Run the battery (or the probes named in `only`) against `url`."""
    transport = transport or BoundedHttp(url, settings.bounds, api_key)
    return run_probes(url, transport, model, settings, only)


def run_probes(url: str, transport: Transport, model: str | None, settings: Settings,
               only: Iterable[str] | None = None) -> ServerProbeReport:
    wanted = set(PROBE_NAMES if only is None else only)
    unknown = wanted - set(PROBE_NAMES)
    if unknown:
        raise InputError(f"no probe {sorted(unknown)[0]!r}", hint=f"the probes: {', '.join(PROBE_NAMES)}")
    started = time.monotonic()
    try:
        identity = identify(transport, model)  # an unreachable server stops here: exit 2
    except ServerBroken as error:
        # The first request already meets a broken server (a redirect, an endless answer): no probe can run.
        raise InputError(f"{url}: cannot probe the server: {error}") from None
    expectation = expected_of(identity.engine, identity.version)
    shared: dict[str, Any] = {}
    results: list[ProbeResult] = []
    broken: list[str] = []
    for probe in all_probes():
        if probe.name not in wanted:
            continue
        if time.monotonic() - started > settings.battery_s:
            results.append(ProbeResult(probe.name, SKIP, f"the battery's time bound ({settings.battery_s:g} s) was reached"))
            continue
        if len(broken) >= BROKEN_LIMIT:
            results.append(ProbeResult(probe.name, SKIP, f"not run: the server is broken ({broken[-1]})"))
            continue
        results.append(_run_one(probe, transport, identity, expectation, shared, broken))
    return ServerProbeReport(url, identity, expectation, tuple(results), getattr(transport, "requests", 0),
                             time.monotonic() - started)


def _run_one(probe: Probe, transport: Transport, identity: ServerIdentity, expectation: EngineExpectation,
             shared: dict[str, Any], broken: list[str]) -> ProbeResult:
    metered = Metered(transport, probe.name, probe.max_requests)
    context = ProbeContext(ServerClient(metered, identity.model), identity, expectation, shared)
    began = time.monotonic()
    try:
        status, summary, figures = probe.run(context)
        broken.clear()
    except ServerBroken as error:
        status, summary, figures = FAIL, f"the server is broken: {error}", {}
        broken.append(str(error))
    return ProbeResult(probe.name, status, summary, tuple(context.evidence), figures, metered.used,
                       round(time.monotonic() - began, 3))
