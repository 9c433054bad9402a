"""What a shared link holds: the sentence, the seed, the masking rule and a little page state.

A teacher's view is a handful of values. ``encode`` writes them as query parameters and ``decode``
reads them back, checking every one, so a broken or tampered link falls back to the defaults with a
message saying what was ignored — never an exception. ``decode(encode(values))`` gives the same
values back. ``masking_config`` turns the values into the masking rule every page uses.

>>> values = decode({"seed": "7", "p": "0.3"}).values
>>> values["seed"], values["p"], values["strategy"]
(7, 0.3, 'token')
>>> encode(values)
{'seed': '7', 'p': '0.3'}
>>> decode({"seed": "-1"}).problems
('seed: "-1" is not a whole number from 0 to 2147483647, so the default (0) is used.',)
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from mlm_core.lessons.quiz import QUIZ_KINDS
from mlm_core.masking import SPAN_REPLACEMENTS, STRATEGIES, MaskingConfig
from mlm_core.seeds import MAX_SEED

# The Masking page's first example: a link without a sentence shows it, as the page does.
DEFAULT_SENTENCE = "The cat sat on the mat and watched the birds in the garden."
MAX_SENTENCE_CHARS = 2_000  # a link stays well under the ~8k characters browsers and proxies accept
MAX_STEP = 100_000
MAX_ROUND = 1_000_000
MAX_LIST = 64  # longest list of positions a link may hold
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*(/[A-Za-z0-9][A-Za-z0-9._\-]*)?")
_NUMBER = re.compile(r"\d{1,12}")

# The choices a link may name for a page's state (the Inside page checks its views against these; the quiz's
# own kinds, first the default, are mlm_core.lessons.quiz.QUIZ_KINDS).
INSIDE_VIEWS = ("attention", "lens", "saliency", "training")  # the Inside-the-model page's views, first the default
PREDICTION_SOURCES = ("here", "masking")  # the Predictions page's masks: clicked there, or the Masking page's


# --------------------------------------------------------------------------- link fields
@dataclass(frozen=True)
class Field:
    """One query parameter: its name, its kind and what a valid value looks like.

    Kinds: ``"text"``, ``"int"``, ``"float"`` (rounded to 6 decimals), ``"choice"``, ``"bool"``,
    ``"model"`` (a model name or hub id, never an absolute path) and ``"ints"`` (positions,
    comma-separated). ``default=None`` means "not set": the parameter is left out of the link and
    the page keeps its own default.
    """

    name: str
    kind: str
    default: Any = None
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()
    max_chars: int = MAX_SENTENCE_CHARS
    label: str = ""

    def __post_init__(self):
        if self.kind not in ("text", "int", "float", "choice", "bool", "model", "ints"):
            raise ValueError(f"unknown field kind {self.kind!r}")

    @property
    def what(self) -> str:
        return self.label or self.name

    def _expected(self) -> str:
        if self.kind == "text":
            return f"a text of 1 to {self.max_chars:,} characters without control characters"
        if self.kind == "int":
            return f"a whole number from {int(self.low)} to {int(self.high)}"
        if self.kind == "float":
            return f"a number from {self.low:g} to {self.high:g}"
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "0 or 1"
        if self.kind == "model":
            return "a model name such as tiny-random or bert-base-uncased"
        return f"up to {MAX_LIST} positions from {int(self.low)} to {int(self.high)}, separated by commas"

    def parse(self, raw: str) -> Any:
        """The value a query-parameter string stands for; ValueError (with a message) when it is invalid."""
        raw = str(raw)
        if self.kind == "text":
            if not raw.strip() or len(raw) > self.max_chars or _has_control(raw):
                raise ValueError(self._expected())
            return raw
        if self.kind == "int":
            if not _NUMBER.fullmatch(raw) or not self.low <= int(raw) <= self.high:
                raise ValueError(self._expected())
            return int(raw)
        if self.kind == "float":
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(self._expected()) from None
            if not math.isfinite(value) or not self.low <= value <= self.high:
                raise ValueError(self._expected())
            return round(value, 6)
        if self.kind == "choice":
            if raw not in self.choices:
                raise ValueError(self._expected())
            return raw
        if self.kind == "bool":
            if raw not in ("0", "1"):
                raise ValueError(self._expected())
            return raw == "1"
        if self.kind == "model":
            if len(raw) > 96 or ".." in raw or not _MODEL_NAME.fullmatch(raw):
                raise ValueError(self._expected())
            return raw
        parts = raw.split(",") if raw else []
        if len(parts) > MAX_LIST or not all(_NUMBER.fullmatch(p) and self.low <= int(p) <= self.high for p in parts):
            raise ValueError(self._expected())
        return tuple(sorted({int(p) for p in parts}))

    def format(self, value: Any) -> str:
        """The query-parameter string of a valid value (``parse(format(v)) == v``)."""
        if self.kind == "float":
            return repr(round(float(value), 6))
        if self.kind == "bool":
            return "1" if value else "0"
        if self.kind == "ints":
            return ",".join(str(int(v)) for v in value)
        return str(value)

    def coerce(self, value: Any) -> Any:
        """A Python value from the session made valid: text clipped, numbers rounded; ValueError if hopeless."""
        if value is None:
            raise ValueError("no value")
        if self.kind == "text":
            # cut before cleaning (a pasted book costs nothing), with room for the control characters dropped
            text = _strip_control(str(value)[: 2 * self.max_chars])[: self.max_chars]
            return self.parse(text)
        if self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(self._expected())
            return self.parse(repr(float(value)))
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise ValueError(self._expected())
            return self.parse(str(int(value)))
        if self.kind == "bool":
            return bool(value)
        if self.kind == "ints":
            return self.parse(",".join(str(int(v)) for v in value))
        return self.parse(str(value))


def _has_control(text: str) -> bool:
    return any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in text)


def _strip_control(text: str) -> str:
    return "".join(c for c in text if unicodedata.category(c) != "Cc" or c in "\t\n\r")


_RULE = MaskingConfig()  # BERT's defaults, read from the one place they are defined
FIELDS: tuple[Field, ...] = (
    Field("sentence", "text", DEFAULT_SENTENCE, label="sentence"),
    Field("seed", "int", 0, 0, MAX_SEED, label="seed"),
    Field("strategy", "choice", _RULE.strategy, choices=STRATEGIES, label="masking strategy"),
    Field("p", "float", _RULE.mlm_probability, 0.0, 1.0, label="selection probability p"),
    Field("mask", "float", _RULE.mask_replace_prob, 0.0, 1.0, label="[MASK] share"),
    Field("random", "float", _RULE.random_replace_prob, 0.0, 1.0, label="random share"),
    Field("span_replace", "choice", _RULE.span_replacement, choices=SPAN_REPLACEMENTS, label="span replacement"),
    Field("model", "model", None, label="model"),
    Field("step", "int", None, 0, MAX_STEP, label="step-through position"),
    Field("quiz", "choice", QUIZ_KINDS[0], choices=QUIZ_KINDS, label="quiz"),
    Field("round", "int", 0, 0, MAX_ROUND, label="quiz question number"),
    Field("view", "choice", INSIDE_VIEWS[0], choices=INSIDE_VIEWS, label="Inside-the-model view"),
    Field("source", "choice", PREDICTION_SOURCES[0], choices=PREDICTION_SOURCES, label="Predictions' masked sentence"),
)

# What each page's link holds: what that page shows, never another page's state (a Quiz link with the
# Masking page's step= or the Inside page's view=) and never a trained model's id (it lives in one session
# only). Every page reads any of FIELDS from a link it is opened with; it writes only its own.
RULE_FIELDS = ("strategy", "p", "mask", "random", "span_replace")  # the masking rule
LESSON_FIELDS = ("sentence", "seed", "model", *RULE_FIELDS)  # one sentence, its masks, the model
PAGE_LINKS: dict[str, tuple[str, ...]] = {
    "home": LESSON_FIELDS,  # where students start: the lesson they walk through the pages with
    "masking": (*LESSON_FIELDS, "step"),
    "predictions": (*LESSON_FIELDS, "source"),
    "inside": (*LESSON_FIELDS, "view"),
    "grammar": ("seed", "model"),  # its own pair (the seed draws it); the lesson sentence is not used there
    "losses": ("seed", "model", *RULE_FIELDS),  # a batch of workshop sentences picked by the seed
    "bug_museum": ("seed", "model", *RULE_FIELDS),  # the Loss page's batch
    "tokenizer": ("seed",),  # its own sentence and vocabularies; the seed of its masking demo
    "training": ("seed", "model", *RULE_FIELDS),
    "efficiency": ("seed", "model"),
    "quiz": ("seed", "model", *RULE_FIELDS, "quiz", "round", "qs"),  # never the sentence: it would give answers away
}
RETIRED = ("trained",)  # names old links carried: dropped from the address, never read


def defaults(fields: Sequence[Field] = FIELDS) -> dict[str, Any]:
    """Every field's default value (None for "not set")."""
    return {f.name: f.default for f in fields}


@dataclass(frozen=True)
class Decoded:
    """What a link says: the values (defaults where it says nothing usable), which fields it gave, and problems."""

    values: dict[str, Any]
    given: frozenset[str]
    problems: tuple[str, ...]


def _shown(raw: str, limit: int = 40) -> str:
    text = raw if len(raw) <= limit else raw[:limit] + "…"
    return '"' + _strip_control(text) + '"'


def _check_rates(values: dict[str, Any], base: Mapping[str, Any], given: set[str], problems: list[str]) -> None:
    """[MASK] share + random share ≤ 1, else both go back to ``base`` (they share the same selected tokens)."""
    if "mask" not in values or "random" not in values:
        return
    if values["mask"] + values["random"] <= 1.0 + 1e-9:
        return
    problems.append(
        f"[MASK] share {values['mask']:g} + random share {values['random']:g} is more than 1, "
        f"so the shares {base['mask']:g} and {base['random']:g} are used."
    )
    values["mask"], values["random"] = base["mask"], base["random"]
    given.discard("mask")
    given.discard("random")


def decode(params: Mapping[str, Any], fields: Sequence[Field] = FIELDS,
           base: Mapping[str, Any] | None = None) -> Decoded:
    """Read query parameters; anything missing or invalid keeps its value from ``base`` (the defaults).

    ``params`` maps names to strings (or lists of strings: the last one counts, as in
    ``st.query_params``). Unknown names are ignored. Never raises on bad values.
    """
    base = {**defaults(fields), **(base or {})}
    values = {f.name: base[f.name] for f in fields}
    given: set[str] = set()
    problems: list[str] = []
    for f in fields:
        if f.name not in params:
            continue
        raw = params[f.name]
        if isinstance(raw, (list, tuple)):
            if not raw:
                continue
            raw = raw[-1]
        try:
            values[f.name] = f.parse(raw)
            given.add(f.name)
        except ValueError as exc:
            fallback = "the default" if base[f.name] == f.default else "the current value"
            shown = "" if base[f.name] is None else f" ({f.format(base[f.name])[:40]})"
            problems.append(f"{f.what}: {_shown(str(raw))} is not {exc}, so {fallback}{shown} is used.")
    _check_rates(values, base, given, problems)
    return Decoded(values, frozenset(given), tuple(problems))


def from_values(current: Mapping[str, Any], fields: Sequence[Field] = FIELDS,
                base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Values from the session (widgets), each made valid; invalid or missing ones keep ``base``'s.

    A cleared sentence drops the step (back to its default, "show all"): a step of no sentence means nothing.

    >>> values = from_values({"sentence": "  ", "step": 16}, base={"sentence": "The cat sat.", "step": 3})
    >>> values["sentence"], values["step"]
    ('The cat sat.', None)
    """
    base = {**defaults(fields), **(base or {})}
    values = {f.name: base[f.name] for f in fields}
    given: set[str] = set()
    for f in fields:
        if f.name in current and current[f.name] is not None:
            try:
                values[f.name] = f.coerce(current[f.name])
                given.add(f.name)
            except (ValueError, TypeError):
                pass
    names = {f.name for f in fields}
    if {"sentence", "step"} <= names and "sentence" in current and not str(current["sentence"] or "").strip():
        # A cleared sentence cannot travel in a link (the last valid one stays), and its step must not
        # either: "step=16" of nothing opened the default sentence part-way through.
        values["step"] = next(f.default for f in fields if f.name == "step")
    _check_rates(values, base, given, [])
    return values


def encode(values: Mapping[str, Any], fields: Sequence[Field] = FIELDS) -> dict[str, str]:
    """Query parameters for ``values``; values equal to the default (or None) are left out to keep links short."""
    params = {}
    for f in fields:
        value = values.get(f.name, f.default)
        if value is None or value == f.default:
            continue
        params[f.name] = f.format(f.coerce(value))
    return params


def masking_config(values: Mapping[str, Any]) -> MaskingConfig:
    """The masking rule a link describes (its rates and strategy)."""
    return MaskingConfig(mlm_probability=values["p"], mask_replace_prob=values["mask"],
                         random_replace_prob=values["random"], strategy=values["strategy"],
                         span_replacement=values.get("span_replace", _RULE.span_replacement))
