"""stopdoctor.toml / [tool.stopdoctor]: discovery, layering (file < env < flags), strict keys,
selectors, per-code severity and per-model expectations (SD501)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stopdoctor.config import Settings, find_config, load_settings, read_config, with_flags
from stopdoctor.gate import run_gate
from stopdoctor.core.errors import InputError
from stopdoctor.core.findings import Severity


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_config_is_found_upward_and_pyproject_without_table_is_skipped(tmp_path):
    write(tmp_path / "stopdoctor.toml", 'fail-on = "warning"\n')
    write(tmp_path / "a" / "pyproject.toml", "[project]\nname = 'x'\n")
    deep = tmp_path / "a" / "b"
    deep.mkdir()
    assert find_config(deep) == tmp_path / "stopdoctor.toml"
    write(tmp_path / "a" / "pyproject.toml", "[tool.stopdoctor]\nfail-on = 'info'\n")
    assert find_config(deep) == tmp_path / "a" / "pyproject.toml"
    assert load_settings(cwd=deep, environ={}).fail_on is Severity.INFO


def test_stopdoctor_toml_wins_over_pyproject_in_the_same_folder(tmp_path):
    write(tmp_path / "pyproject.toml", "[tool.stopdoctor]\nfail-on = 'info'\n")
    write(tmp_path / "stopdoctor.toml", "fail-on = 'warning'\n")
    assert load_settings(cwd=tmp_path, environ={}).fail_on is Severity.WARNING


@pytest.mark.parametrize("text, key", [
    ("fail_on = 'info'\n", "fail_on"),
    ("[[model]]\npath = 'm'\nexpect-knd = 'base'\n", "model[0].expect-knd"),
    ("[severty]\nSD101 = 'info'\n", "severty"),
])
def test_unknown_keys_are_an_error_naming_key_and_file(tmp_path, text, key):
    config = write(tmp_path / "stopdoctor.toml", text)
    with pytest.raises(InputError) as error:
        read_config(config)
    assert key in error.value.message and str(config) in error.value.message


def test_unknown_key_in_pyproject_names_the_full_table_path(tmp_path):
    config = write(tmp_path / "pyproject.toml", "[tool.stopdoctor]\nmodel = []\nfailon = 'x'\n")
    with pytest.raises(InputError, match=r"tool\.stopdoctor\.failon"):
        read_config(config)


def test_near_miss_key_gets_a_did_you_mean_hint(tmp_path):
    with pytest.raises(InputError) as error:
        read_config(write(tmp_path / "stopdoctor.toml", "fail_on = 'info'\n"))
    assert "fail-on" in error.value.hint


def test_layers_file_then_environment_then_flags(tmp_path):
    write(tmp_path / "stopdoctor.toml", "fail-on = 'warning'\nselect = ['SD1']\nformat = 'sarif'\n")
    from_file = load_settings(cwd=tmp_path, environ={})
    assert (from_file.fail_on, from_file.select, from_file.format) == (Severity.WARNING, ("SD1",), "sarif")
    env = load_settings(cwd=tmp_path, environ={"STOPDOCTOR_FAIL_ON": "info", "STOPDOCTOR_SELECT": "SD2, pad-is-eos"})
    assert env.fail_on is Severity.INFO and env.select == ("SD2", "pad-is-eos") and env.format == "sarif"
    flags = with_flags(env, fail_on="error", select=["SD101,SD102"], format="junit")
    assert (flags.fail_on, flags.select, flags.format) == (Severity.ERROR, ("SD101", "SD102"), "junit")


def test_environment_severity_and_config_path(tmp_path):
    config = write(tmp_path / "elsewhere.toml", "[severity]\nSD203 = 'error'\n")
    settings = load_settings(cwd=tmp_path, environ={"STOPDOCTOR_CONFIG": str(config), "STOPDOCTOR_SEVERITY": "SD104=info"})
    assert settings.config_file == config
    assert dict(settings.severity) == {"SD203": Severity.ERROR, "SD104": Severity.INFO}
    with pytest.raises(InputError, match="STOPDOCTOR_SEVERITY"):
        load_settings(cwd=tmp_path, environ={"STOPDOCTOR_SEVERITY": "SD104"})


@pytest.mark.parametrize("selector", ["SD9", "SD999", "no-such-check", "X1"])
def test_selectors_that_name_no_check_are_rejected(selector):
    with pytest.raises(InputError, match="names no rule"):
        with_flags(Settings(), ignore=[selector])


def test_bad_values_are_rejected_with_their_place(tmp_path):
    with pytest.raises(InputError, match="fail-on"):
        read_config(write(tmp_path / "a.toml", "fail-on = 'fatal'\n"))
    with pytest.raises(InputError, match="expect-kind"):
        read_config(write(tmp_path / "b.toml", "[[model]]\npath = 'm'\nexpect-kind = 'chat'\n"))
    with pytest.raises(InputError, match="must be a list"):
        read_config(write(tmp_path / "c.toml", "models = 'm'\n"))
    with pytest.raises(InputError, match="not valid TOML"):
        read_config(write(tmp_path / "d.toml", "models = [\n"))
    with pytest.raises(InputError, match="format"):
        with_flags(Settings(), format="xml")


def test_model_paths_are_relative_to_the_config_file(tmp_path, synth_root):
    import shutil

    shutil.copytree(synth_root / "clean-chatml", tmp_path / "models" / "chat")
    config = write(tmp_path / "stopdoctor.toml",
                   "models = ['models/chat', 'org/hub-model']\nserving = ['deploy/vllm.sh']\n")
    settings = read_config(config)
    assert [m.spec for m in settings.models] == [str(tmp_path / "models" / "chat"), "org/hub-model"]
    assert settings.serving == (tmp_path / "deploy" / "vllm.sh",)


def _gate(tmp_path: Path, synth_root: Path, case: str, model: str = "", top: str = "", **flags):
    config = write(tmp_path / "stopdoctor.toml", f"{top}[[model]]\npath = '{synth_root / case}'\n{model}")
    return run_gate(with_flags(read_config(config), **flags))


def test_select_ignore_and_severity_change_the_findings(tmp_path, synth_root):
    # chatml-eos-endoftext: SD101 (error) and SD104 pad-is-eos (warning)
    plain = _gate(tmp_path, synth_root, "chatml-eos-endoftext", "")
    assert {f.code for f in plain.findings} == {"SD101", "SD104"}
    assert plain.exit_code() == 1
    ignored = _gate(tmp_path, synth_root, "chatml-eos-endoftext", "", ignore=["end-of-turn-not-a-stop-id"])
    assert {f.code for f in ignored.findings} == {"SD104"} and ignored.exit_code() == 0
    assert "SD101" not in ignored.subjects[0].checks
    # the more specific selector wins both ways
    narrowed = _gate(tmp_path, synth_root, "chatml-eos-endoftext", top="select = ['SD1']\nignore = ['SD104']\n")
    assert {f.code for f in narrowed.findings} == {"SD101"}
    raised = _gate(tmp_path, synth_root, "chatml-eos-endoftext", top="[severity]\nSD1 = 'info'\npad-is-eos = 'error'\n\n")
    levels = {f.code: f.severity for f in raised.findings}
    assert levels == {"SD101": Severity.INFO, "SD104": Severity.ERROR}
    assert raised.levels["SD101"] is Severity.INFO and raised.levels["SD102"] is Severity.INFO


def test_expectations_that_hold_give_no_finding(tmp_path, synth_root):
    report = _gate(tmp_path, synth_root, "clean-chatml",
                   "expect-kind = 'instruct'\nexpect-end-of-turn = '<|im_end|>'\nexpect-stops = ['<|im_end|>']\n")
    assert report.findings == [] and "SD501" in report.subjects[0].checks


def test_failed_expectations_are_sd501_pointing_at_the_file_to_fix(tmp_path, synth_root):
    report = _gate(tmp_path, synth_root, "clean-chatml",
                   "expect-kind = 'base'\nexpect-end-of-turn = '<|eot_id|>'\nexpect-stops = ['<|endoftext|>', 99999]\n")
    failed = [f for f in report.findings if f.code == "SD501"]
    assert len(failed) == 3 and all(f.severity is Severity.ERROR for f in failed)
    kind = next(f for f in failed if "judges it" in f.message)
    end_of_turn = next(f for f in failed if "end a turn" in f.message)
    stops = next(f for f in failed if "stop ids" in f.message)
    assert kind.location.file == str(tmp_path / "stopdoctor.toml") and kind.location.key == "expect-kind"
    assert end_of_turn.location.file == "tokenizer_config.json" and "<|im_end|>" in end_of_turn.message
    assert "99999" in stops.message and stops.location.file == "generation_config.json"


def test_a_model_on_the_command_line_keeps_its_configured_expectation(tmp_path, synth_root):
    config = write(tmp_path / "stopdoctor.toml", f"[[model]]\npath = '{synth_root / 'clean-chatml'}'\nexpect-kind = 'base'\n")
    settings = with_flags(read_config(config), models=[str(synth_root / "clean-chatml")], revision="main")
    assert settings.models[0].expectation.kind == "base" and settings.models[0].revision == "main"


def test_no_model_at_all_is_an_input_error():
    with pytest.raises(InputError, match="no model"):
        run_gate(Settings())
