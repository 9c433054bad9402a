"""Shared links: round trips, fall-backs to the defaults with a notice, and session values made valid."""

from urllib.parse import parse_qs, urlencode

import pytest

from ui import share_state
from ui.share_state import (
    DEFAULT_SENTENCE, FIELDS, Field, decode, defaults, encode, from_values, masking_config,
)
from mlm_core.masking import MaskingConfig

STATES = [
    {},
    {"seed": 7, "p": 0.3, "mask": 0.5, "random": 0.25, "strategy": "whole_word"},
    {"sentence": "Ça va? 東京 עברית 😀 & = + ? # % <script>alert(1)</script>\nsecond line", "seed": 2**31 - 1,
     "strategy": "span", "p": 0.123457, "mask": 0.0, "random": 1.0, "model": "google/bert_uncased_L-2_H-128_A-2",
     "step": 12, "quiz": "random", "round": 3},
    {"sentence": "x" * share_state.MAX_SENTENCE_CHARS, "strategy": "exact_count", "p": 1.0, "mask": 1.0, "random": 0.0,
     "model": "tiny-random", "step": 0, "quiz": "loss", "round": share_state.MAX_ROUND},
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
    ("sentence", "x" * (share_state.MAX_SENTENCE_CHARS + 1)),
    ("step", "-3"), ("step", "many"), ("quiz", "exam"), ("round", "1.5"), ("round", str(share_state.MAX_ROUND + 1)),
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
    assert values["sentence"].startswith("ab") and len(values["sentence"]) == share_state.MAX_SENTENCE_CHARS
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
