"""The fake next turn in plain text (issue #27 §2): a transcript the model writes itself
(`User: …\\nAssistant: …`, `### User:`), and a base model continuing its prompt's own labels
(`Q: …\\nA:`); and the detector's false positives, measured on real assistant answers labelled by
hand before it ran (tests/data/real_answer_labels.json, fixtures/real_answers.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stopdoctor.logs.query import analyze_logs
from stopdoctor.analysis.diagnose import Generation, StopCause, diagnose, prompt_labels

LABELS = Path(__file__).parent / "data" / "real_answer_labels.json"


def _log(tmp_path: Path, *answers: tuple[str, str]) -> Path:
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"object": "chat.completion", "model": "m", "choices": [
        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}]}) + "\n"
        for text, finish in answers))
    return path


def test_logs_flag_a_transcript_the_model_wrote_itself(tmp_path):
    path = _log(tmp_path,
                ("The capital of France is Paris.\nUser: And of Germany?\nAssistant: Berlin.", "stop"),
                ("Paris.\n\n### User:\nAnd of Germany?\n\n### Assistant:\nBerlin.", "length"),
                ("Paris.\n**User:** And of Germany?\n**Assistant:** Berlin.", "stop"),
                # quoted: introduced by a colon, in code, or a label no assistant answers
                ("Here is an example dialogue:\n\nUser: hi\nAssistant: hello", "stop"),
                ("Like this.\n```\nUser: hi\nAssistant: hello\n```", "stop"),
                ("Endpoints by resource.\n\nUser:\n* POST /users\n* GET /users", "stop"),
                ("Sure.\n\nQ: What is a WAF?\nA: A web application firewall.", "stop"))
    report = analyze_logs([str(path)])
    assert [line for _, line in report.flagged["hallucinated-turn"]] == [1, 2, 3]
    assert {e.detail.split(" (")[1].split(")")[0] for e in report.problems["hallucinated-turn"].examples} == {
        "transcript labels"}


def test_generate_reads_a_plain_prompts_own_labels_as_the_next_turn():
    prompt = "Q: What is the capital of France?\nA:"
    assert prompt_labels(prompt) == {"user": "\nQ:"}
    assert prompt_labels("The old lighthouse keeper climbed the stairs and") == {}
    assert prompt_labels("Note: the answer.\nWrite it down.") == {}  # it does not end asking for a label
    ran_on = Generation("length", StopCause("length"), " Paris.\nQ: What is the capital of Germany?\nA: Berlin.",
                        prompt=prompt)
    turn = diagnose(ran_on, {}, [], {}).hallucinated_turn
    assert turn is not None and (turn.role, turn.offset, turn.source) == ("user", 7, "the prompt's own role label")
    answered = Generation("length", StopCause("length"), " Paris, on the Seine. Its population is", prompt=prompt)
    assert diagnose(answered, {}, [], {}).hallucinated_turn is None


def _labels() -> dict[str, dict]:
    return json.loads(LABELS.read_text())["labels"]


@pytest.fixture(scope="module")
def real_answers() -> dict[str, str]:
    from fixtures.real_answers import answers

    try:
        return dict(answers())
    except Exception as error:  # noqa: BLE001 - prepared by `python fixtures/realmodels.py`
        pytest.fail(f"real answers unavailable ({error}): run `python fixtures/realmodels.py` (bash .ci/test-deps does)")


@pytest.mark.slow  # 67,594 answers through the whole report (~30 s); the quick loop has the small cases above
@pytest.mark.corpus
def test_false_positives_on_real_answers_are_measured_against_hand_labels(real_answers, tmp_path):
    """67,594 ChatGPT answers read by `logs` as a log (its prefilter, then `diagnose_text`): every
    one with a role label at a line start was labelled by hand before the detector ran (39:
    scripts, FAQs, flashcards, code, and one real fake turn). The detector must flag exactly the
    labelled fake turns: no false positive, no miss."""
    labels = _labels()
    assert set(labels) <= set(real_answers), "a labelled answer is not in the source"
    keys = list(real_answers)
    report = analyze_logs([str(_log(tmp_path, *((real_answers[k], "stop") for k in keys)))])
    flagged = {keys[line - 1] for _, line in report.flagged["hallucinated-turn"]}
    assert flagged == {key for key, label in labels.items() if label["fake_turn"]}
    assert report.responses == len(keys) == 67_594
