"""`probe-server`: a black-box battery of short deterministic requests against a live server.

- `http.py`: the one place that talks HTTP (a small `Transport` interface and a bounded
  implementation: whole-transfer time, bytes, line length, JSON depth, no redirects).
- `client.py`: OpenAI-compatible and native requests on top of a transport (whole and streamed).
- `identify.py`: the `server` probe's reading of what is serving.
- `stop_probes.py`, `server_probes.py`: the probes; `battery.py` runs them in order, each bounded.

Imports: core, analysis (turn finding), runtimes (what an engine is expected to do). No torch.
"""
