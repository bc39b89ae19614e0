"""The pure diagnosis of a finished generation, on synthetic id sequences (no model, no torch)."""

from __future__ import annotations

from stopdoctor.analysis.diagnose import Generation, Step, StopCause, TurnEnder, diagnose, find_turns, runaway, should_have_stopped, step_at

IM_END = TurnEnder(2, "<|im_end|>", ("chat template ends assistant turns with it",))
ENDOFTEXT = TurnEnder(0, "<|endoftext|>", ("llama.cpp stops on it",))
ENDERS = {2: IM_END, 0: ENDOFTEXT}
HEADERS = {"user": "<|im_start|>user\n", "system": "<|im_start|>system\n"}
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]

# A ChatML runaway: answer, <|im_end|>, then a new user turn, never stopped (budget 12).
RUNAWAY = [
    (504, "Paris", False), (30, ".", False), (2, "<|im_end|>", True), (198, "\n", False),
    (1, "<|im_start|>", True), (4093, "user", False), (198, "\n", False), (57, "What", False),
    (314, " about", False), (3625, " Spain", False), (47, "?", False), (2, "<|im_end|>", True),
]


def _steps(tokens):
    return tuple(Step(i, tid, text, special) for i, (tid, text, special) in enumerate(tokens))


def _length_run(tokens) -> Generation:
    steps = _steps(tokens)
    return Generation("length", StopCause("length", step=len(steps) - 1), "".join(s.text for s in steps), steps)


def test_runaway_names_the_missed_end_of_turn_the_counterfactual_and_the_user_turn():
    generation = _length_run(RUNAWAY)
    diagnosis = diagnose(generation, ENDERS, [0], HEADERS, SPECIALS)
    missed = diagnosis.should_have_stopped
    assert (missed.id, missed.text, missed.step) == (2, "<|im_end|>", 2)
    cf = diagnosis.counterfactual
    assert cf.stop_ids == (0, 2) and cf.step == 2 and cf.wasted == 9
    turn = diagnosis.hallucinated_turn
    assert (turn.role, turn.step, turn.evidence) == ("user", 4, "<|im_start|>user\n")
    assert runaway(generation, diagnosis) is not None


def test_a_generation_that_stopped_on_the_end_of_turn_is_clean():
    steps = _steps(RUNAWAY[:3])
    generation = Generation("stop", StopCause("eos", 2, "<|im_end|>", step=2), "Paris.", steps)
    diagnosis = diagnose(generation, ENDERS, [2], HEADERS, SPECIALS)
    assert diagnosis.should_have_stopped is None
    assert diagnosis.counterfactual is None
    assert diagnosis.hallucinated_turn is None
    assert runaway(generation, diagnosis) is None


def test_plain_length_without_runaway_signs_exits_zero():
    tokens = [(10 + i, f" w{i}", False) for i in range(8)]
    generation = _length_run(tokens)
    diagnosis = diagnose(generation, ENDERS, [2], HEADERS, SPECIALS)
    assert not diagnosis.runaway_signs
    assert runaway(generation, diagnosis) is None


def test_only_ids_outside_the_stop_set_count_as_missed():
    steps = _steps([(5, "a", False), (0, "<|endoftext|>", True), (2, "<|im_end|>", True)])
    assert should_have_stopped(steps, ENDERS, [0]).step == 2
    assert should_have_stopped(steps, ENDERS, [0, 2]) is None


def test_a_user_turn_is_the_headline_even_after_an_empty_system_turn():
    text = "Paris.<|im_end|>\n<|im_start|>system\n<|im_end|>\n<|im_start|>user\nHi"
    turns = find_turns(text, HEADERS, SPECIALS)
    assert [t.role for t in turns] == ["system", "user"]
    generation = Generation("length", StopCause("length"), text)
    assert diagnose(generation, ENDERS, [0], HEADERS, SPECIALS).hallucinated_turn.role == "user"


def test_server_text_with_special_tokens_stripped_still_shows_the_turn():
    # What `transformers serve` returns for the broken-eos SmolLM2: specials skipped.
    text = "The capital of France is Paris.\nsystem\n\nuser\nI'm planning to launch a new product"
    generation = Generation("length", StopCause("length"), text)
    diagnosis = diagnose(generation, ENDERS, [0], HEADERS, SPECIALS)
    roles = [t.role for t in diagnosis.turns]
    assert roles == ["system", "user"]
    assert diagnosis.hallucinated_turn.source == "role word on its own line"
    assert diagnosis.hallucinated_turn.step is None
    assert diagnosis.should_have_stopped is None  # its text was stripped: nothing to see
    assert runaway(generation, diagnosis) is not None


def test_role_words_inside_prose_are_not_turns():
    text = "The user\nmanual says: a system user can log in.\nUsers: many"
    assert find_turns(text, HEADERS, SPECIALS) == []


def test_transcript_role_labels_are_turns():
    turns = find_turns("Paris.\n\nUser: and Spain?\nAssistant: Madrid", {}, [])
    assert [(t.role, t.evidence) for t in turns] == [("user", "User:")]


def test_a_turn_cut_off_by_a_stop_string_is_not_reported():
    # The stop string "<|im_start|>" ended generation; the header it cut off is not in the text.
    steps = _steps(RUNAWAY[:6])
    generation = Generation("stop", StopCause("stop_string", text="<|im_start|>", stop_string="<|im_start|>", step=4),
                            "Paris.<|im_end|>\n", steps)
    diagnosis = diagnose(generation, ENDERS, [0], HEADERS, SPECIALS)
    assert diagnosis.hallucinated_turn is None
    assert diagnosis.counterfactual is None  # it did stop
    assert runaway(generation, diagnosis) is None


def test_server_text_that_keeps_special_tokens_shows_the_missed_token():
    text = "Paris.<|im_end|>\n<|im_start|>user\nmore"
    generation = Generation("length", StopCause("length"), text)
    missed = diagnose(generation, ENDERS, [0], HEADERS, SPECIALS).should_have_stopped
    assert (missed.id, missed.step, missed.offset) == (2, None, 6)


def test_step_at_maps_text_offsets_to_steps():
    steps = _steps(RUNAWAY)
    assert step_at(steps, 0) == 0
    assert step_at(steps, 5) == 1  # "."
    assert step_at(steps, 6) == 2  # first char of <|im_end|>
    assert step_at(steps, 10_000) is None


def test_quoted_transcripts_and_labels_do_not_make_a_runaway():
    answers = [
        "Here is an example:\n```\nUser: hi\nuser\nAssistant: hello\n```\nThat is all.",
        "FAQ\nQ: What is it?\nA: A tool.",
        "Specs:\nSystem: Linux x86_64\nRAM: 8 GB",
    ]
    for text in answers:
        generation = Generation("length", StopCause("length"), text)
        diagnosis = diagnose(generation, ENDERS, [0, 2], HEADERS, SPECIALS)
        assert diagnosis.hallucinated_turn is None, text
        assert runaway(generation, diagnosis) is None, text


def test_a_transcript_label_headlines_only_without_template_headers():
    text = "Paris.\n\nUser: and Spain?"
    with_headers = diagnose(Generation("length", StopCause("length"), text), ENDERS, [0], HEADERS, SPECIALS)
    assert with_headers.hallucinated_turn is None and [t.source for t in with_headers.turns] == ["role label"]
    without = diagnose(Generation("length", StopCause("length"), text), ENDERS, [0], {}, [])
    assert without.hallucinated_turn.evidence == "User:"


def test_server_that_went_past_a_requested_stop_id_is_named():
    # the server was asked to stop on 2 but returned text after <|im_end|> (it ignored or refused the ids)
    text = "Paris.<|im_end|>\n<|im_start|>user\nmore"
    diagnosis = diagnose(Generation("length", StopCause("length"), text), ENDERS, [0, 2], HEADERS, SPECIALS)
    missed = diagnosis.should_have_stopped
    assert missed.id == 2 and "the server went on past it" in missed.reasons[-1]
    ended_there = diagnose(Generation("stop", StopCause("eos"), "Paris.<|im_end|>"), ENDERS, [0, 2], HEADERS, SPECIALS)
    assert ended_there.should_have_stopped is None
