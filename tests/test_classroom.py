"""Classroom mode: shared-link round trips and fall-backs, quiz questions, and scoring on hand-made cases."""

from urllib.parse import parse_qs, urlencode

import pytest
import torch

from mlm_core import IGNORE_INDEX, MaskingConfig, classroom
from mlm_core.classroom import (
    DEFAULT_SENTENCE, FIELDS, Field, decode, defaults, encode, from_values, guess_ranks, guess_token_id,
    make_question, masking_config, record_score, score_guesses, score_selection, score_totals,
)

STATES = [
    {},
    {"seed": 7, "p": 0.3, "mask": 0.5, "random": 0.25, "strategy": "whole_word"},
    {"sentence": "Ça va? 東京 עברית 😀 & = + ? # % <script>alert(1)</script>\nsecond line", "seed": 2**31 - 1,
     "strategy": "span", "p": 0.123457, "mask": 0.0, "random": 1.0, "model": "google/bert_uncased_L-2_H-128_A-2",
     "step": 12, "quiz": "random", "round": 3},
    {"sentence": "x" * classroom.MAX_SENTENCE_CHARS, "strategy": "exact_count", "p": 1.0, "mask": 1.0, "random": 0.0,
     "model": "tiny-random", "step": 0, "quiz": "loss", "round": classroom.MAX_ROUND},
    {"p": 0.0, "seed": 0, "step": 100_000, "model": "bert-base-uncased"},
]


def full(state):
    return {**defaults(), **state}


@pytest.mark.parametrize("state", STATES)
def test_round_trip_is_identity(state):
    values = full(state)
    params = encode(values)
    decoded = decode(params)
    assert decoded.values == values
    assert decoded.problems == ()
    assert decoded.given == {k for k, v in state.items() if v != defaults()[k]}
    # and through a real URL query string (percent-encoding, parse_qs lists)
    url_params = parse_qs(urlencode(params), keep_blank_values=True)
    assert decode(url_params).values == values


def test_encode_leaves_out_defaults_and_empty_link_gives_defaults():
    assert encode(defaults()) == {}
    assert encode({**defaults(), "seed": 3}) == {"seed": "3"}
    decoded = decode({})
    assert decoded.values == defaults() and decoded.problems == () and decoded.given == frozenset()
    assert defaults()["sentence"] == DEFAULT_SENTENCE
    assert masking_config(defaults()) == MaskingConfig()


BAD = [
    ("seed", "-1"), ("seed", "abc"), ("seed", "1e3"), ("seed", "99999999999"), ("seed", "3.5"), ("seed", ""),
    ("p", "nan"), ("p", "inf"), ("p", "1.5"), ("p", "-0.1"), ("p", "abc"), ("p", ""),
    ("mask", "2"), ("random", "-1"),
    ("strategy", "bogus"), ("strategy", "TOKEN"), ("strategy", ""),
    ("model", "/etc/passwd"), ("model", "../secret"), ("model", "a b"), ("model", "http://evil.example/x"),
    ("model", "~/models"), ("model", "a/b/c"), ("model", "x" * 200),
    ("sentence", ""), ("sentence", "   "), ("sentence", "null\x00byte"), ("sentence", "bell\x07"),
    ("sentence", "x" * (classroom.MAX_SENTENCE_CHARS + 1)),
    ("step", "-3"), ("step", "many"), ("quiz", "exam"), ("round", "1.5"), ("round", str(classroom.MAX_ROUND + 1)),
]


@pytest.mark.parametrize("name,raw", BAD)
def test_bad_params_fall_back_to_defaults_with_a_notice(name, raw):
    decoded = decode({name: raw, "seed" if name != "seed" else "p": "5" if name != "seed" else "0.2"})
    assert decoded.values[name] == defaults()[name]
    assert name not in decoded.given
    assert len(decoded.problems) == 1
    label = next(f.what for f in FIELDS if f.name == name)
    assert decoded.problems[0].startswith(label)
    assert "\x00" not in decoded.problems[0]
    # the other, valid parameter is still read
    other = "seed" if name != "seed" else "p"
    assert other in decoded.given


def test_rates_that_add_up_to_more_than_one_fall_back_together():
    decoded = decode({"mask": "0.9", "random": "0.5", "p": "0.3"})
    assert (decoded.values["mask"], decoded.values["random"]) == (0.8, 0.1)
    assert decoded.values["p"] == 0.3
    assert "more than 1" in decoded.problems[0]
    assert decoded.given == {"p"}
    masking_config(decoded.values)  # a valid rule


def test_repeated_and_unknown_params():
    decoded = decode({"seed": ["1", "2"], "utm_source": "mail", "embed": "true", "p": []})
    assert decoded.values["seed"] == 2
    assert decoded.problems == ()
    assert decoded.given == {"seed"}


def test_decode_keeps_base_values_when_a_param_is_bad():
    base = {**defaults(), "seed": 42}
    decoded = decode({"seed": "oops"}, base=base)
    assert decoded.values["seed"] == 42
    assert "current value (42)" in decoded.problems[0]


def test_from_values_cleans_session_values():
    base = defaults()
    values = from_values({"p": 0.35000000000000003, "seed": 3.0, "sentence": "a\x00b" + "c" * 5000,
                          "strategy": "nope", "mask": 0.9, "random": 0.5, "step": None}, base=base)
    assert values["p"] == 0.35 and values["seed"] == 3
    assert values["sentence"].startswith("ab") and len(values["sentence"]) == classroom.MAX_SENTENCE_CHARS
    assert values["strategy"] == "token"  # invalid: keeps the base
    assert (values["mask"], values["random"]) == (0.8, 0.1)
    assert decode(encode(values)).values == values


def test_extra_page_fields():
    fields = FIELDS + (Field("positions", "ints", (), 0, 511, label="clicked tokens"),
                       Field("fill", "bool", False), Field("k", "int", 5, 1, 10))
    values = {**defaults(fields), "positions": (3, 5, 9), "fill": True, "k": 8}
    params = encode(values, fields)
    assert params == {"positions": "3,5,9", "fill": "1", "k": "8"}
    assert decode(params, fields).values == values
    bad = decode({"positions": "3,x", "fill": "yes", "k": "11"}, fields)
    assert len(bad.problems) == 3 and bad.values == defaults(fields)
    assert decode({"positions": "9,3,3"}, fields).values["positions"] == (3, 9)


# --------------------------------------------------------------------------- scoring on hand-made cases
def test_score_guesses_hand_made():
    score = score_guesses(["mat", "##ly", "Paris", "the"], ["  MAT ", "ly", "paris", ""])
    assert score.correct == (True, True, True, False)
    assert (score.points, score.max_points) == (3, 4)
    assert score_guesses(["Paris"], ["paris"], lowercase=False).points == 0
    assert score_guesses(["a", "b"], ["a"]).correct == (True, False)  # a missing guess scores nothing


def test_score_selection_hand_made():
    # truth {2, 7}: picked 2 (hit) and 5 (false alarm), missed 7 → 1 - 1 = 0 of 2
    s = score_selection([2, 5], [2, 7])
    assert (s.hits, s.missed, s.false_alarms, s.points, s.max_points) == ((2,), (7,), (5,), 0, 2)
    assert score_selection([2, 7], [7, 2]).points == 2
    assert score_selection([2], [2, 7]).points == 1
    assert score_selection(range(10), [2, 7]).points == 0  # picking everything earns nothing
    assert (score_selection([], []).points, score_selection([], []).max_points) == (1, 1)
    assert score_selection([4], []).points == 0


def test_scoreboard_counts_each_question_once():
    board = record_score(None, "q1", "guess", 1, 2)
    board = record_score(board, "q1", "guess", 2, 2)  # answering again does not change the score
    board = record_score(board, "q2", "random", 3, 3)
    board2 = record_score(board, "q3", "loss", 0, 4)
    assert board["questions"].keys() == {"q1", "q2"}  # record_score returns a new board
    totals = score_totals(board2)
    assert (totals["points"], totals["max_points"], totals["questions"]) == (4, 9, 3)
    assert totals["by_kind"]["guess"] == {"points": 1, "max_points": 2, "questions": 1}
    assert totals["by_kind"]["loss"] == {"points": 0, "max_points": 4, "questions": 1}
    assert score_totals({})["points"] == 0


def test_guess_ranks_hand_made():
    probs = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    ranks = guess_ranks(probs.log(), [1, 0])
    assert [r for r, _ in ranks] == [2, 2]  # a tie with another token does not push the guess down
    assert [round(p, 4) for _, p in ranks] == [0.3, 0.1]
    assert guess_ranks(probs.log(), [None, 3]) == [(None, None), (None, None)]
    assert guess_ranks(probs.log(), [0, 2])[0][0] == 1


def test_guess_token_id(tokenizer):
    assert guess_token_id(tokenizer, " Cat ") == tokenizer.convert_tokens_to_ids("cat")
    assert guess_token_id(tokenizer, "") is None
    assert guess_token_id(tokenizer, "unbelievably") is None  # several pieces: no single blank fits it
    assert guess_token_id(tokenizer, "ly", "##ly") == tokenizer.convert_tokens_to_ids("##ly")


# --------------------------------------------------------------------------- questions
@pytest.mark.parametrize("kind", classroom.QUIZ_KINDS)
def test_questions_are_reproducible_and_consistent(tokenizer, kind):
    q = make_question(tokenizer, kind, DEFAULT_SENTENCE, seed=3)
    again = make_question(tokenizer, kind, DEFAULT_SENTENCE, seed=3)
    assert q.qid == again.qid and q.shown == again.shown and q.decisions == again.decisions
    other = make_question(tokenizer, kind, DEFAULT_SENTENCE, seed=4)
    assert other.qid != q.qid
    assert q.decisions[0] == q.decisions[-1] == "SPECIAL"
    labels = q.labels[0].tolist()
    selected = [i for i, d in enumerate(q.decisions) if d in ("MASK", "RANDOM", "UNCHANGED")]
    assert list(q.in_loss) == selected == [i for i, label in enumerate(labels) if label != IGNORE_INDEX]
    for i in selected:
        assert labels[i] == tokenizer.convert_tokens_to_ids(q.tokens[i])
    for i, d in enumerate(q.decisions):
        if d == "MASK":
            assert q.shown[i] == tokenizer.mask_token
        elif d in ("NOT_SELECTED", "UNCHANGED", "SPECIAL"):
            assert q.shown[i] == q.tokens[i]


def test_guess_question_blanks_whole_words(tokenizer):
    sentence = "Unbelievably, the tokenizer splits rare words into several word pieces."
    for seed in range(10):
        q = make_question(tokenizer, "guess", sentence, seed=seed)
        assert 1 <= len(q.blanks) <= classroom.MAX_BLANKS
        assert set(q.decisions) <= {"SPECIAL", "NOT_SELECTED", "MASK"}
        for i in q.blanks:
            assert not q.tokens[i].startswith("##") and not q.tokens[i + 1].startswith("##")
            assert any(c.isalnum() for c in q.tokens[i])


def test_random_question_has_something_to_find(tokenizer):
    for seed in range(5):
        q = make_question(tokenizer, "random", DEFAULT_SENTENCE, seed=seed)
        assert q.positions("RANDOM") and q.positions("UNCHANGED")
        assert set(q.candidates).isdisjoint(q.blanks)
    no_random = make_question(tokenizer, "random", DEFAULT_SENTENCE, seed=0,
                              config=MaskingConfig(mask_replace_prob=0.9, random_replace_prob=0.0))
    assert not no_random.positions("RANDOM") and no_random.positions("UNCHANGED")


def test_question_sentence():
    corpus = ["a", "b", "c", "d"]
    assert classroom.question_sentence("shared", corpus, 0, 0) == "shared"
    picks = [classroom.question_sentence("shared", corpus, 1, r) for r in range(1, 6)]
    assert picks == [classroom.question_sentence("shared", corpus, 1, r) for r in range(1, 6)]
    assert set(picks) <= set(corpus)
    assert classroom.question_sentence("shared", [], 1, 3) == "shared"


def test_rank_guesses_matches_the_model(tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    from mlm_core.models import predict_masked

    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=128)
    model = BertForMaskedLM(config).eval()
    q = make_question(tokenizer, "guess", DEFAULT_SENTENCE, seed=1)
    guesses = [q.answers[0].upper()] + ["zzzzqqq"] * (len(q.blanks) - 1)
    reports = classroom.rank_guesses(model, tokenizer, q, guesses)
    predictions = predict_masked(model, tokenizer, q.input_ids, q.attention_mask, q.labels, k=3)
    assert [r.position for r in reports] == list(q.blanks)
    assert reports[0].correct and reports[0].guess_rank == reports[0].answer_rank
    for report, p in zip(reports, predictions.positions):
        assert report.answer_rank == p.true_rank
        assert report.answer_prob == pytest.approx(p.true_prob, rel=1e-5)
    for report in reports[1:]:
        assert not report.correct and report.guess_rank is None  # not one token of the vocabulary
