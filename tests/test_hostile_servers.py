"""Hostile servers (issue #32 "Servers", #26 §3): `generate --server` (and its `--stream`) against a
stand-in server on 127.0.0.1 (tests/hostile_server.py) that never answers, drips, sends endless
bodies, endless event lines or endless streams, JSON nested 100,000 deep, `usage` of the wrong
type, bytes that are not UTF-8, a 500 on every request, or escapes and workflow commands in what
it says. Each is one line and exit 2 (or an ordinary report), within the bounds of the one
server client (`stopdoctor.facts.http_client`). The time bound is given (`--server-timeout 2`), so
a test passes on a slow machine too; what is checked is the line that names the bound (and where a
byte or count bound is tested, the time bound is far).
"""

from __future__ import annotations

import json

import pytest

from stopdoctor.actions.generate import stream as stream_module
from stopdoctor.actions.generate.stream import StreamCapture, stream_issues
from stopdoctor.facts.http_client import Limits, parse_answer
from tests.helpers import cli
from tests.hostile_server import HostileServer
from tests.test_hardening import one_line_exit_2


def generate(synth_root, server: HostileServer, *extra: str, timeout: str = "600"):
    """generate against `server`. The time bound is 2 s only where time is what is tested; elsewhere
    it is far, so that a byte or count bound decides however slow the machine."""
    return cli("generate", str(synth_root / "clean-chatml"), "-m", "user", "hi", "--server", server.url,
               "--server-timeout", timeout, *extra)


@pytest.mark.parametrize(("mode", "stream", "expected"), [
    ("silent", False, "did not finish answering within 2 s"),  # accepted, never answered
    ("drip-headers", False, "did not finish answering within 2 s"),  # each byte well inside a read timeout
    ("drip-body", False, "did not finish answering within 2 s"),
    ("endless-stream", True, "did not finish answering within 2 s"),
    ("endless-body", False, "the answer is longer than 16 MiB"),
    ("endless-line", True, "one line of the stream is longer than 1 MiB"),
    ("nested", False, "nested more than 64 deep"),
    ("nested", True, "nested more than 64 deep"),
    ("bad-utf8", False, "is not valid UTF-8"),
])
def test_a_hostile_server_is_one_line_and_exit_2(synth_root, mode, stream, expected):
    with HostileServer(mode) as server:
        run = generate(synth_root, server, "--server-model", "m", *(["--stream"] if stream else []),
                       timeout="2" if "within 2 s" in expected else "600")
    one_line_exit_2(run, expected)


def test_a_flood_of_stream_events_is_bounded_by_count(synth_root):
    # 100,000 short events come before 16 MiB; the time bound is far (600 s) so the count decides.
    with HostileServer("flood-stream") as server:
        run = generate(synth_root, server, "--server-model", "m", "--stream")
    one_line_exit_2(run, "more than 100000 chunks")


def test_a_500_with_an_endless_body_is_one_short_line(synth_root):
    with HostileServer("endless-500") as server:
        run = generate(synth_root, server, "--server-model", "m")
    line = one_line_exit_2(run, "HTTP 500")
    assert len(line) < 600


def test_a_500_on_every_request_is_asked_twice_at_most(synth_root):
    # The first 500 names stop_token_ids, so the request is sent once more without them; never a loop.
    with HostileServer("loop-500") as server:
        run = generate(synth_root, server, "--server-model", "m")
        asked = len(server.requests)
    line = one_line_exit_2(run, "HTTP 500", "unknown field stop_token_ids")
    assert asked == 2 and "\n" not in line


def test_an_endless_models_list_is_bounded(synth_root):
    # No --server-model: the model name comes from /v1/models, which never ends here.
    with HostileServer("endless-body") as server:
        run = generate(synth_root, server)
    one_line_exit_2(run, "/v1/models", "longer than 16 MiB")


@pytest.mark.parametrize("mode", ["usage-list", "usage-string"])
def test_usage_of_the_wrong_type_is_dropped_not_a_crash(synth_root, mode):
    with HostileServer(mode) as server:
        run = generate(synth_root, server, "--server-model", "m", "--json")
    assert run.code == 0, run.stderr
    document = run.json()
    assert document["server"]["usage"] is None and document["text"] == "Hello."


def _unsafe_lines(text: str) -> list[str]:
    """Lines a CI runner would read as a workflow command, or that carry raw escapes or bidi controls."""
    raw = ("\x1b", "\x9b", "\x07", "\x00", "\u202e", "\u2066")
    return [line for line in text.splitlines()
            if line.strip().startswith(("::", "##[")) or any(char in line for char in raw)]


@pytest.mark.parametrize("stream", [False, True])
def test_escapes_and_workflow_commands_from_a_server_are_neutralised(synth_root, stream):
    with HostileServer("hostile-text") as server:
        human = generate(synth_root, server, *(["--stream"] if stream else []))
        document = generate(synth_root, server, "--json", *(["--stream"] if stream else []))
    assert human.code == 0 and document.code == 0, (human.stderr, document.stderr)
    assert "forged" in human.stdout  # shown, as text
    assert _unsafe_lines(human.stdout + human.stderr) == []
    assert _unsafe_lines(document.stdout) == []
    server_part = document.json()["server"]
    assert server_part["finish_reason"].startswith("\x1b[2J")  # the data itself is kept, escaped as JSON
    assert len(server_part["finish_reason"]) <= 200


def test_the_stream_comparison_is_not_quadratic(monkeypatch):
    # A 60 KB stream that differs from a 60 KB answer all through: difflib (quadratic) only ever
    # sees a short middle part; before, it compared the whole texts (47 KB took 157 s).
    sizes: list[int] = []
    real = stream_module.difflib.SequenceMatcher

    def counting(junk, a, b, **kwargs):
        sizes.append(len(a) * len(b))
        return real(junk, a, b, **kwargs)

    monkeypatch.setattr(stream_module.difflib, "SequenceMatcher", counting)
    answer = "".join(chr(0x41 + (i * 7) % 26) for i in range(60_000))
    streamed = "".join(chr(0x61 + (i * 11) % 26) for i in range(60_000)) + "im_end|>"
    issues = stream_issues(StreamCapture([streamed], "stop", 0, "", True), answer, (), ("<|im_end|>",))
    assert all(size <= 2000 * 2000 for size in sizes), sizes
    assert "special-token-tail" in {i.kind for i in issues}
    # a small difference is still diffed exactly: the tail of <|im_end|> in a stream that equals the answer
    issues = stream_issues(StreamCapture(["Paris.", "im_end|>"], "stop", 1, "", True), "Paris.", (), ("<|im_end|>",))
    assert [i.kind for i in issues] == ["special-token-tail"]


def test_json_nested_deep_is_refused_in_bounded_depth():
    with pytest.raises(Exception, match="nested more than 64 deep"):
        parse_answer(b"[" * 100_000 + b"]" * 100_000, "server")
    with pytest.raises(Exception, match="nested more than 8 deep"):
        parse_answer(json.dumps({"a": [[[[[[[[[1]]]]]]]]]}).encode(), "server", Limits(max_depth=8))
    with pytest.raises(Exception, match="lone surrogate"):
        parse_answer(b'{"text": "\\ud800"}', "server")
    assert parse_answer(b'{"text": "\\ud83d\\ude00"}', "server") == {"text": "\U0001f600"}


def test_a_stream_line_that_trickles_meets_the_deadline():
    # One byte every 0.2 s, each read well inside any read timeout: the whole stream is what is bounded.
    from stopdoctor.facts.http_client import stream_events

    with HostileServer("drip-body", drip=0.2) as server:
        with pytest.raises(Exception, match="did not finish answering within 1.5 s"):
            for _ in stream_events(server.url + "/v1/chat/completions", {"stream": True}, Limits(seconds=1.5)):
                pass


def test_generate_reports_a_redirect_and_never_follows_it(synth_root):
    # Following it would send the request (and any key) where the user did not point; one line instead.
    with HostileServer("redirect") as server:
        run = generate(synth_root, server, "--server-model", "m")
        asked = len(server.requests)
    one_line_exit_2(run, "redirected (HTTP 302", "does not follow redirects")
    assert asked == 1


def test_a_server_dripping_its_headers_meets_probe_servers_deadline():
    # One header byte every 0.2 s (200 bytes: 40 s), each read well inside a read timeout: the
    # whole transfer is what is bounded, headers included.
    from stopdoctor.actions.probe_server.http import Bounds, BoundedHttp

    with HostileServer("drip-headers", drip=0.2) as server:
        with pytest.raises(Exception, match="did not finish answering within 1 s"):
            BoundedHttp(server.url, Bounds(request_s=1.0)).get("/v1/models")
        listened = server.dripped
    assert listened < 100, listened  # a per-read timeout would have listened to all 200


def test_an_error_status_line_escapes_the_servers_control_characters():
    from stopdoctor.facts.http_client import ServerRejected, request_json

    with HostileServer("hostile-500") as server:
        with pytest.raises(ServerRejected) as caught:
            request_json(server.url + "/v1/chat/completions", {"messages": []}, Limits(seconds=600))
    line = str(caught.value)
    assert caught.value.code == 500 and "\n" not in line
    assert not any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 or c in "\u202e\u2066" for c in line), line
    assert "\\x1b[2J" in line and "forged" in line  # shown, escaped
