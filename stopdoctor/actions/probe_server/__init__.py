"""`probe-server`: a black-box battery of short deterministic requests against a live server.

- `http.py`: the `Transport` interface and its implementation over the one bounded server client
  (`facts.http_client`: whole-transfer time, bytes, line length, JSON depth, no redirects).
- `client.py`: OpenAI-compatible and native requests on top of a transport (whole and streamed).
- `identify.py`: the `server` probe's reading of what is serving.
- `stop_probes.py`, `server_probes.py`: the probes; `battery.py` runs them in order, each bounded.

Imports: core, analysis (turn finding), runtimes (what an engine is expected to do). No torch.
"""
