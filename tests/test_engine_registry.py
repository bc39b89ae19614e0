"""The engine registry (runtimes/engines/): adding an engine is one module. Every module in the
folder is discovered, each engine's values cite their source, no two engines claim one spelling,
launcher or `owned_by`, and what a launcher or a spelling names is the registry's answer alone."""

from __future__ import annotations

import pkgutil
from collections import Counter
from pathlib import Path

import pytest

from stopdoctor.runtimes import engines as registry
from stopdoctor.runtimes.engines import engine, engine_for_launcher, engines, hf_runtimes, launcher_kinds
from stopdoctor.runtimes.engines.engine import Engine
from stopdoctor.runtimes.expected import expected_of
from stopdoctor.runtimes.serving import load_serving

FOLDER = Path(registry.__file__).parent
SOURCE_HINT = (".py", ".go", ".h", ".cpp", "#", "commit", "console script", "python -m", "binary")


def test_every_module_in_the_folder_is_an_engine():
    modules = {m.name for m in pkgutil.iter_modules([str(FOLDER)])} - {registry.TYPES_MODULE}
    assert modules >= {"transformers", "vllm", "tgi", "llama_cpp", "llama_cpp_python", "ollama", "mlx_lm", "mlx_vlm",
                       "sglang"}
    found = engines()
    assert len(found) == len(modules)
    assert all(isinstance(e, Engine) for e in found)


def test_a_new_module_is_one_more_engine(tmp_path, monkeypatch):
    # Adding an engine is a file in the folder: the registry finds it with nothing else changed.
    folder = tmp_path / "engines"
    folder.mkdir()
    (folder / "lmdeploy_test.py").write_text(
        "from stopdoctor.runtimes.engines.engine import Engine\n"
        "ENGINE = Engine(name='lmdeploy-test', listed=99, stop_rule='x', stop_rule_source='lmdeploy/x.py',\n"
        "                launchers=('lmdeploy-test',), launchers_source='the lmdeploy console script')\n",
        encoding="utf-8")
    before = len(engines())
    monkeypatch.setattr(registry, "__path__", [str(FOLDER), str(folder)])
    for cached in (registry.engines, registry._by_spelling):
        cached.cache_clear()
    try:
        assert engine_for_launcher("lmdeploy-test").name == "lmdeploy-test"
        assert engine("LMDEPLOY-TEST") is not None
        assert len(engines()) == len({e.name for e in engines()}) == before + 1
    finally:
        monkeypatch.undo()
        for cached in (registry.engines, registry._by_spelling):
            cached.cache_clear()
    assert engine("lmdeploy-test") is None


def test_every_value_cites_its_source():
    for e in engines():
        assert e.stop_rule and any(h in e.stop_rule_source for h in SOURCE_HINT), e.name
        if e.launchers:
            assert e.launchers_source, e.name
        for default in e.defaults:
            assert default.runtime == e.name and default.version and any(h in default.source for h in SOURCE_HINT), default
        if e.sampling is not None:
            assert any(h in e.sampling.source for h in SOURCE_HINT), e.name
        for parser in e.reasoning_parsers:
            assert parser.names and any(h in parser.source for h in SOURCE_HINT), parser


def test_no_two_engines_claim_one_name():
    for what in (lambda e: e.names(), lambda e: e.launchers, lambda e: e.owned_by):
        counts = Counter(x for e in engines() for x in what(e))
        assert not [x for x, n in counts.items() if n > 1]


@pytest.mark.parametrize("spelling, name", [
    ("llamacpp", "llama.cpp"), ("llama.cpp", "llama.cpp"), ("LLAMA-CPP", "llama.cpp"), ("text-generation-inference", "tgi"),
    ("transformers serve", "transformers"), ("llama_cpp_python", "llama-cpp-python"), ("vllm", "vllm"),
    ("mlx-lm", "mlx-lm"), ("sglang", "sglang"), ("ollama", "ollama"),
])
def test_one_engine_under_every_spelling(spelling, name):
    assert engine(spelling).name == name
    assert expected_of(spelling, "1.0").engine == name and expected_of(spelling, "1.0").known


@pytest.mark.parametrize("program", ["vllm-mlx", "swiftlm", "python", "", None, "llama_cpp", "ollama-serve"])
def test_unknown_launchers_are_unknown(program):
    assert engine_for_launcher(program) is None


def test_launchers_name_their_engine():
    assert engine_for_launcher("llama-server").name == "llama.cpp"
    assert engine_for_launcher("sglang.launch_server").name == "sglang"
    assert launcher_kinds()["llama-server"] == "llamacpp"  # the serving kind `check --serving --kind` uses
    assert hf_runtimes() == ("transformers", "vllm", "tgi")


def test_check_serving_asks_the_registry_for_launchers(tmp_path):
    serve = tmp_path / "serve.sh"
    serve.write_text("python -m llama_cpp.server --model m.gguf\n", encoding="utf-8")
    assert load_serving(serve).kind == "llama-cpp-python"
    serve.write_text("swiftlm serve m\n", encoding="utf-8")  # SwiftLM: not in the registry
    from stopdoctor.core.errors import InputError
    with pytest.raises(InputError, match="'swiftlm' is not one stopdoctor knows"):
        load_serving(serve)


def test_unknown_engine_is_unknown_not_guessed():
    found = expected_of("vllm-mlx", None)
    assert not found.known and found.stop_rule is None and found.defaults == ()
    assert expected_of(None, None).engine is None and not expected_of(None, None).known
