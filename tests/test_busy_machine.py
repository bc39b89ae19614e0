"""A slow or busy machine makes a command slower, never wrong (issue 26 §2).

The template's limits are its own CPU time inside its renders: work the command does outside them
(importing torch, loading a model, building a 262k vocabulary) and time the machine gives to other
processes are never charged. The unit tests below spend that outside time on purpose; the slow test
runs real commands on the real models while the test keeps every core busy.

May import pytest, the standard library, stopdoctor and tests' helpers and fixtures.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.helpers import CpuClock, cli

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
USER = [{"role": "user", "content": "hi"}]


def _spin(seconds: float) -> None:
    """Burn CPU in this thread, outside any render (what an import or a model load does)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_time_spent_outside_renders_is_never_charged_to_the_template():
    from stopdoctor.template.limits import RenderLimits, render_deadline
    from stopdoctor.template.render import render_chat

    with render_deadline(RenderLimits(max_total_seconds=0.3)):
        _spin(0.5)  # the command's own work: more than the whole allowance
        time.sleep(0.4)  # the machine running something else
        for _ in range(20):
            assert render_chat(CHATML, USER).endswith("<|im_start|>user\nhi<|im_end|>\n")


def test_the_renders_own_time_is_still_bounded_in_all():
    from stopdoctor.core.errors import TemplateError
    from stopdoctor.template.limits import RenderLimits, render_deadline
    from stopdoctor.template.render import render_chat

    slow = "{% for i in range(30000) %}{% endfor %}" + CHATML  # a few hundredths of a second each
    renders = 0
    cpu = time.process_time()
    with pytest.raises(TemplateError, match="took more than 0.3 s of CPU time in all"):
        with render_deadline(RenderLimits(max_total_seconds=0.3)):
            while True:
                render_chat(slow, USER)
                renders += 1
    assert renders >= 1
    assert time.process_time() - cpu < 5  # stopped at the allowance, measured in work


def test_one_render_is_bounded_by_its_own_cpu_time():
    from stopdoctor.core.errors import TemplateError
    from stopdoctor.template.limits import RenderLimits
    from stopdoctor.template.render import render_chat

    endless = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    cpu = time.process_time()
    with pytest.raises(TemplateError, match=r"ran longer than 0\.3 s \(its own CPU time\)"):
        render_chat(endless, USER, limits=RenderLimits(max_seconds=0.3))
    assert time.process_time() - cpu < 3


def test_cpu_clock_counts_a_childs_work_and_never_the_time_it_waits():
    """Tests bound commands' time with CpuClock (tests/helpers.py): it must see work done in a child
    process, and must not see time spent waiting (what a busy machine adds)."""
    import subprocess

    waited = CpuClock()
    time.sleep(0.5)
    assert waited.seconds < 0.25
    worked = CpuClock()
    spin = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", spin], check=True)
    assert worked.seconds >= 0.5


def _busy(until: float) -> None:
    while time.time() < until:
        pass


@contextmanager
def saturated(per_core: int = 3, seconds: float = 600.0) -> Iterator[int]:
    """Keep every core busy with `per_core` spinning processes each; they end by themselves after
    `seconds` and are ended when the block leaves."""
    count = per_core * (os.cpu_count() or 1)
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds threads
    until = time.time() + seconds
    workers = [context.Process(target=_busy, args=(until,), daemon=True) for _ in range(count)]
    for worker in workers:
        worker.start()
    try:
        yield count
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            worker.join(10)


@pytest.mark.slow
def test_healthy_models_stay_healthy_on_a_saturated_machine(real_gguf_models, tmp_path):
    """The commands that failed with "the template loops" at load 6-9 on 2 cores, on the healthy
    SmolLM2 and Gemma 3, with three spinning processes per core for the whole test."""
    smollm2 = str(real_gguf_models.smollm2_gguf)
    tiny = tmp_path / "tiny"
    tiny.mkdir()
    (tiny / "tokenizer_config.json").write_text(
        '{"eos_token": "<|im_end|>", "added_tokens_decoder": {"0": {"content": "<|im_end|>", "special": true}}, '
        '"chat_template": ' + __import__("json").dumps(CHATML) + "}")
    assert len(CHATML) < 250
    with saturated() as busy:
        assert busy >= 3
        inspected = cli("inspect", smollm2, "--json")
        assert inspected.code in (0, 1), inspected.stderr
        assert "loops" not in inspected.stderr
        report = inspected.json()
        assert [marker["text"] for marker in report["end_of_turn"]] == ["<|im_end|>"]
        assert report["verdict"]["kind"] == "instruct"

        gemma = cli("inspect", str(real_gguf_models.gemma_gguf), "--json")
        assert gemma.code in (0, 1) and "loops" not in gemma.stderr, gemma.stderr
        assert gemma.json()["verdict"]["kind"] == "base"

        small = cli("inspect", str(tiny), "--json")
        assert small.code in (0, 1) and "loops" not in small.stderr, small.stderr

        probed = cli("probe-stop", "\nUser:", "--model", smollm2, "--from-template")
        assert probed.code in (0, 1) and "loops" not in probed.stderr, probed.stderr


@pytest.mark.slow
@pytest.mark.needs_torch
def test_live_check_stays_healthy_on_a_saturated_machine(real_models):
    """`check --live` imports torch and loads the model before it renders: none of that is the
    template's time. It failed 3 of 3 on the healthy SmolLM2 on a busy machine."""
    pytest.importorskip("torch")
    with saturated():
        checked = cli("check", str(real_models.smollm2_hf), "--live", "--format", "json")
        assert "loops" not in checked.stderr, checked.stderr
        assert checked.code == 0, checked.stderr
        fragment = cli("generate", str(real_models.smollm2_gguf), "--fragment-test", "--json")
        assert "loops" not in fragment.stderr, fragment.stderr
        assert fragment.code in (0, 1), fragment.stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
