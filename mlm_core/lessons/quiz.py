"""The quiz: questions about a masked sentence, their scores, and the model's view of a guess.

A quiz question is a sentence masked by ``data.mask_sentence``, the Masking page's own path, so the
quiz's masks for seed S are the Masking page's masks for seed S. A link names the question by its
seed and number (a corpus sentence) or by a random id (a teacher's sentence, kept on the server in
a ``QuestionBank``), never by its words: a student who reads the address learns no answer.
Scoring is pure: plain values in, a score out.

Shapes: T = sequence length, M = selected positions, V = vocabulary.

>>> score_selection(picked=[2, 5], truth=[2, 7]).points
0
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from mlm_core import seeds
from mlm_core.classroom import Ask, Reveal, model_words, word_of
from mlm_core.data import mask_sentence, token_pieces
from mlm_core.errors import InputError
from mlm_core.formatting import probability_text
from mlm_core.head import masked_lm_logits
from mlm_core.masking import IGNORE_INDEX, MaskingConfig, decision_names
from mlm_core.predict import predict_masked
from mlm_core.seeds import MAX_SEED

QUIZ_KINDS = ("guess", "random", "loss")  # the Quiz page's quizzes, first the default (a link's quiz=)
QUIZ_TITLES = {
    "guess": "Guess the token",
    "random": "Which one was random?",
    "loss": "Which positions count in the loss?",
}
MAX_BLANKS = 3  # guess-the-token: at most this many [MASK]s, so a room can answer in a minute
QUIZ_SEARCH = 600  # corpus sentences a question may look through to find masks that suit its quiz
MASKING_MAX_TOKENS = 128  # the Masking page's limit: the quiz masks a sentence exactly as it does
QUESTION_ID_CHARS = 10  # a teacher's sentence in the bank: its id in a link (``qs=``)


# --------------------------------------------------------------------------- quiz questions
@dataclass(frozen=True, eq=False)
class Question:
    """One quiz question: the sentence as the model sees it, and what really happened at each token."""

    kind: str  # one of QUIZ_KINDS
    qid: str  # the same for everyone with the same link: scores are kept per question
    sentence: str
    tokens: tuple[str, ...]  # the original tokens, [CLS] and [SEP] included
    shown: tuple[str, ...]  # what the model sees
    decisions: tuple[str, ...]  # per token: SPECIAL, NOT_SELECTED, MASK, RANDOM or UNCHANGED
    input_ids: torch.Tensor  # (1, T) the corrupted ids
    attention_mask: torch.Tensor  # (1, T)
    labels: torch.Tensor  # (1, T) original id where selected, IGNORE_INDEX elsewhere
    decision_codes: torch.Tensor  # (1, T) Decision codes
    config: MaskingConfig  # the rule the question was drawn with
    truncated: bool = False
    source: str = ""  # where the sentence came from: "corpus:17", "teacher:<bank id>"
    seed: int = 0  # the seed of these masks: the Masking page shows the same ones with it
    whole_word: tuple[bool, ...] = ()  # per token: is it a whole word of one piece?

    def positions(self, *names: str) -> tuple[int, ...]:
        """Positions whose decision is one of ``names``."""
        return tuple(i for i, d in enumerate(self.decisions) if d in names)

    @property
    def blanks(self) -> tuple[int, ...]:
        """Positions shown as [MASK]."""
        return self.positions("MASK")

    @property
    def answers(self) -> tuple[str, ...]:
        """The original token under each [MASK], left to right."""
        return tuple(self.tokens[i] for i in self.blanks)

    @property
    def in_loss(self) -> tuple[int, ...]:
        """Positions the MLM loss uses: every selected one (labels != -100)."""
        return tuple(int(i) for i in (self.labels[0] != IGNORE_INDEX).nonzero().flatten().tolist())

    @property
    def candidates(self) -> tuple[int, ...]:
        """Positions a student may point at: every non-special token not shown as [MASK]."""
        return self.positions("NOT_SELECTED", "RANDOM", "UNCHANGED")


def _question_id(kind: str, source: str, seed: int, round: int, config: MaskingConfig, tokenizer) -> str:
    # Built from where the sentence came from (a corpus index, a teacher's bank id), never from
    # its words: the id is shown on the page and must not help anyone recover a hidden word.
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    text = f"{kind}|{seed}|{round}|{config}|{name}|{len(tokenizer)}|{source}"
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _bare(token: str) -> str:
    """A token without its word-start mark (RoBERTa's Ġ, SentencePiece's ▁)."""
    return token[1:] if token[:1] in ("Ġ", "▁") and len(token) > 1 else token


def word_shaped(token: str) -> bool:
    """Does ``token`` look like an ordinary whole word (letters only, no continuation mark)?

    A random replacement that fails this ("##rew", "⁄", "[unused7]") gives itself away by its
    shape alone, so the "which one was random?" quiz only asks about ones that pass.

    >>> [word_shaped(t) for t in ("garden", "Ġgarden", "##rew", "⁄", "[unused7]", "x")]
    [True, True, False, False, False, False]
    """
    bare = _bare(token)
    return not token.startswith("##") and len(bare) >= 2 and bare.isascii() and bare.isalpha()


def _build(kind, tokenizer, encoded, result, sentence, qid, config, source, seed) -> Question:
    tokens = tuple(encoded.tokens[0])
    length = len(tokens)
    decisions = tuple(decision_names(result, 0, special_tokens_mask=encoded.special_tokens_mask, length=length))
    shown = tuple(tokenizer.convert_ids_to_tokens(result.input_ids[0, :length].tolist()))
    words = encoded.word_ids[0, :length].tolist()
    pieces: dict[int, int] = {}
    for w in words:
        if w >= 0:
            pieces[w] = pieces.get(w, 0) + 1
    whole = tuple(w >= 0 and pieces[w] == 1 for w in words)
    return Question(kind, qid, sentence, tokens, shown, decisions, result.input_ids[:, :length].clone(),
                    encoded.attention_mask[:, :length].clone(), result.labels[:, :length].clone(),
                    result.decisions[:, :length].clone(), config, bool(encoded.truncated[0]), source, seed, whole)


def make_question(tokenizer, kind: str, sentence: str, *, seed: int = 0, round: int = 0,
                  config: MaskingConfig | None = None, source: str = "",
                  max_length: int = MASKING_MAX_TOKENS) -> Question:
    """A quiz question about ``sentence``: the Masking page's masks for this sentence, seed and rule.

    The masks come from ``data.mask_sentence`` (one seed, one selection and one decision per token,
    on every page): the quiz changes nothing in them, it only chooses which sentence to ask about
    (``corpus_question_sentence``) and with which seed (``pick_question``). ``source`` names where the sentence came from ("corpus:17", a
    teacher's bank id) and goes into the question id instead of the words.
    Raises ``InputError`` for empty text or a tokenizer without a mask token.
    """
    if kind not in QUIZ_KINDS:
        raise ValueError(f"kind must be one of {QUIZ_KINDS}, got {kind!r}")
    config = config or MaskingConfig()
    masked = mask_sentence(tokenizer, sentence, config, seed, max_length=max_length)
    encoded, result = masked.encoded, masked.result
    source = source or "sentence:" + hashlib.sha1(sentence.encode("utf-8")).hexdigest()
    qid = _question_id(kind, source, seed, round, config, tokenizer)
    return _build(kind, tokenizer, encoded, result, sentence, qid, config, source, int(seed))


def question_problem(question: Question) -> str | None:
    """Why this question cannot be asked as it is (None when it can): what the masks lack.

    - guess: 1 to ``MAX_BLANKS`` [MASK]s, each on a whole word (one piece, letters or digits);
    - random: a random replacement, each one shaped like an ordinary word (``word_shaped``) and put
      in place of a whole word, so nobody can spot it by its shape;
    - loss: a [MASK], and a selected token that does not look selected (random or unchanged); a
      random replacement, if any, shaped like an ordinary word in place of a whole word (as for random).
    """
    if question.kind == "guess":
        blanks = question.blanks
        if not blanks:
            return "no token became [MASK]"
        if len(blanks) > MAX_BLANKS:
            return f"{len(blanks)} tokens became [MASK] (the quiz asks about at most {MAX_BLANKS})"
        if any(not question.whole_word[i] or not any(c.isalnum() for c in question.tokens[i]) for i in blanks):
            return "a [MASK] hides part of a word or a punctuation mark"
        if question.positions("RANDOM"):
            return "a random replacement would make the blanks harder to read"
        return None
    if question.kind == "random":
        if not question.positions("RANDOM"):
            return "no token was replaced by a random one"
        return _shape_giveaway(question)
    if not question.blanks:
        return "no token became [MASK]"
    if not question.positions("RANDOM", "UNCHANGED"):
        return "every selected token is a [MASK], so the colours would not matter"
    # The loss quiz shows the tokens without colours: a random "##rew" or "[unused7]" would still
    # say "I was selected" by its shape, and the answer would be read, not thought out.
    return _shape_giveaway(question)


def _shape_giveaway(question: Question) -> str | None:
    """Why a random replacement in ``question`` can be spotted by its shape alone, or None when none can.

    Every random replacement must look like an ordinary whole word (``word_shaped``) and stand in for
    one: BERT draws it from the whole vocabulary, word pieces and ``[unused]`` entries included.
    """
    if any(not word_shaped(question.shown[i]) or not question.whole_word[i] or not word_shaped(question.tokens[i])
           for i in question.positions("RANDOM")):
        return "a random replacement can be spotted by its shape (a word piece, a symbol)"
    return None


def corpus_question_sentence(sentences: Sequence[str], seed: int, round: int,
                             kind: str = QUIZ_KINDS[0]) -> tuple[int, str]:
    """(index, sentence): the corpus sentence of question ``round`` of quiz ``kind`` for ``seed``, the same for everyone.

    Each quiz takes its questions a third of the corpus apart from the others', so that after "Guess the
    token" has revealed a sentence's words, question 1 of "Which one was random?" is another sentence.

    >>> corpus = [f"sentence {i}" for i in range(30)]
    >>> len({corpus_question_sentence(corpus, 7, 0, kind)[0] for kind in QUIZ_KINDS})
    3
    """
    if not sentences:
        raise InputError("There is no corpus to take quiz sentences from.")
    index = int(torch.randint(len(sentences), (1,), generator=seeds.generator(seed, "quiz_sentence", round)))
    index = (index + QUIZ_KINDS.index(kind) * (len(sentences) // len(QUIZ_KINDS))) % len(sentences)
    return index, sentences[index]


def pick_question(tokenizer, kind: str, sentence: str, *, seed: int, round: int = 0,
                  config: MaskingConfig | None = None, source: str = "", search: int = QUIZ_SEARCH) -> Question:
    """The question about ``sentence`` with the masks of the first seed from ``seed`` on (``seed``,
    ``seed + 1``, …, as the Masking page's re-roll goes) whose masks suit the quiz.

    The masks are never changed to make a question work: the seed is what is chosen, and the page
    shows it, so the Masking page with that seed shows exactly these masks. For the random quiz a
    seed that also leaves a token unchanged is preferred. Tries up to ``search`` seeds; when none
    suits, returns the question of ``seed`` itself (``question_problem`` says what it lacks).
    """
    first = best = None
    for step in range(max(1, search)):
        question = make_question(tokenizer, kind, sentence, seed=(seed + step) % (MAX_SEED + 1), round=round,
                                 config=config, source=source)
        first = first or question
        if question_problem(question) is None:
            if kind != "random" or question.positions("UNCHANGED"):
                return question
            best = best or question
    return best or first


class QuestionBank:
    """Teachers' own quiz sentences, kept on the server: a shared link carries an id, never the words.

    One bank serves every session of a server (a teacher's link works for the whole room). Ids are
    random, so an id says nothing about its sentence. Thread-safe. It is bounded three ways, so that
    no student can push the teacher's question out:

    - each ``client`` (an IP address) keeps at most ``max_per_client`` sentences: its own oldest go first;
    - all clients together keep ``max_entries``: past that, the oldest sentence of whoever holds the
      most goes first;
    - sentences added with ``keep=True`` (the teacher's: from the server's own machine) are never
      dropped for anyone else's; only the teacher's own ``max_kept``-th newer one drops the oldest.

    >>> bank = QuestionBank(max_per_client=2)
    >>> qs = bank.add("The cat sat on the mat.", client="teacher", keep=True)
    >>> bank.get(qs), bank.add("The cat sat on the mat.") == qs, bank.get("nope")
    ('The cat sat on the mat.', True, None)
    >>> spam = [bank.add(f"spam {i}", client="ip:10.0.0.9") for i in range(1000)]
    >>> bank.get(qs), sum(bank.get(i) is not None for i in spam)
    ('The cat sat on the mat.', 2)
    """

    def __init__(self, max_entries: int = 1_000, *, max_per_client: int = 20, max_kept: int = 200):
        self.max_entries = max_entries
        self.max_per_client = max_per_client
        self.max_kept = max_kept
        self._lock = threading.Lock()
        self._by_id: dict[str, tuple[str, str | None, bool]] = {}  # id -> (sentence, client, kept), oldest first
        self._by_sentence: dict[str, str] = {}

    def add(self, sentence: str, client: str | None = None, *, keep: bool = False) -> str:
        """The sentence's id (a new random one, or the one it already has); ``client``: who adds it."""
        with self._lock:
            qs = self._by_sentence.get(sentence)
            if qs is not None:
                text, owner, kept = self._by_id.pop(qs)
                self._by_id[qs] = (text, owner, kept or keep)  # now the newest; the teacher's from now on
                self._trim()
                return qs
            qs = secrets.token_hex(5)
            while qs in self._by_id:
                qs = secrets.token_hex(5)
            self._by_id[qs] = (sentence, client, keep)
            self._by_sentence[sentence] = qs
            self._trim(client)
            return qs

    def _drop(self, qs: str) -> None:
        sentence, _, _ = self._by_id.pop(qs)
        self._by_sentence.pop(sentence, None)

    def _trim(self, client: str | None = None) -> None:
        kept = [qs for qs, (_, _, k) in self._by_id.items() if k]
        for qs in kept[:max(0, len(kept) - self.max_kept)]:
            self._drop(qs)
        if client is not None:
            mine = [qs for qs, (_, owner, k) in self._by_id.items() if owner == client and not k]
            for qs in mine[:max(0, len(mine) - self.max_per_client)]:
                self._drop(qs)
        while True:
            others = [(qs, owner) for qs, (_, owner, k) in self._by_id.items() if not k]
            if len(others) <= self.max_entries:
                return
            held: dict[str | None, int] = {}
            for _, owner in others:
                held[owner] = held.get(owner, 0) + 1
            biggest = max(held.values())
            self._drop(next(qs for qs, owner in others if held[owner] == biggest))  # its oldest

    def get(self, qs: str | None) -> str | None:
        with self._lock:
            entry = self._by_id.get(str(qs)) if qs else None
            return entry[0] if entry else None

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_id)


# --------------------------------------------------------------------------- scoring (pure)
def normalize_guess(text: str, *, lowercase: bool = True) -> str:
    """A typed guess or a token, compared without spaces, a leading ``##`` or (for uncased models) case.

    >>> normalize_guess("  Mat "), normalize_guess("##ly")
    ('mat', 'ly')
    """
    text = "".join(str(text).split())
    if text.startswith("##") and len(text) > 2:
        text = text[2:]
    return text.lower() if lowercase else text


@dataclass(frozen=True)
class GuessScore:
    correct: tuple[bool, ...]  # one per blank
    points: int
    max_points: int


def score_guesses(answers: Sequence[str], guesses: Sequence[str], *, lowercase: bool = True) -> GuessScore:
    """One point per blank whose guess is the original token (an empty guess scores nothing).

    >>> score_guesses(["mat", "##ly"], ["Mat", "ly"]).points
    2
    """
    guesses = list(guesses) + [""] * (len(answers) - len(guesses))
    correct = tuple(bool(normalize_guess(g)) and normalize_guess(g, lowercase=lowercase)
                    == normalize_guess(a, lowercase=lowercase) for a, g in zip(answers, guesses))
    return GuessScore(correct, sum(correct), len(answers))


@dataclass(frozen=True)
class SelectionScore:
    hits: tuple[int, ...]  # picked and right
    missed: tuple[int, ...]  # right but not picked
    false_alarms: tuple[int, ...]  # picked but wrong
    points: int
    max_points: int


def score_selection(picked: Sequence[int], truth: Sequence[int]) -> SelectionScore:
    """Points for pointing at the right positions: hits minus false alarms, at least 0, out of len(truth).

    Picking everything is not free: each wrong pick cancels a right one. When nothing is to be
    found, picking nothing is worth 1 point out of 1.

    >>> s = score_selection(picked=[2, 5], truth=[2, 7])
    >>> s.hits, s.missed, s.false_alarms, s.points, s.max_points
    ((2,), (7,), (5,), 0, 2)
    """
    picked_set, truth_set = {int(p) for p in picked}, {int(t) for t in truth}
    hits = tuple(sorted(picked_set & truth_set))
    missed = tuple(sorted(truth_set - picked_set))
    false_alarms = tuple(sorted(picked_set - truth_set))
    if not truth_set:
        return SelectionScore(hits, missed, false_alarms, int(not false_alarms), 1)
    return SelectionScore(hits, missed, false_alarms, max(0, len(hits) - len(false_alarms)), len(truth_set))


def record_score(board: Mapping[str, Any] | None, qid: str, kind: str, points: int, max_points: int) -> dict:
    """A new scoreboard with this question's score added; a question already scored keeps its first score."""
    questions = dict((board or {}).get("questions", {}))
    if qid not in questions:
        questions[qid] = {"kind": kind, "points": int(points), "max_points": int(max_points)}
    return {"questions": questions}


def score_totals(board: Mapping[str, Any] | None) -> dict[str, Any]:
    """Points, maximum and number of questions, overall and per quiz kind."""
    by_kind = {kind: {"points": 0, "max_points": 0, "questions": 0} for kind in QUIZ_KINDS}
    for item in (board or {}).get("questions", {}).values():
        entry = by_kind.setdefault(item["kind"], {"points": 0, "max_points": 0, "questions": 0})
        entry["points"] += item["points"]
        entry["max_points"] += item["max_points"]
        entry["questions"] += 1
    total = {key: sum(v[key] for v in by_kind.values()) for key in ("points", "max_points", "questions")}
    return {**total, "by_kind": by_kind}


# --------------------------------------------------------------------------- guesses under the model
def guess_token_id(tokenizer, guess: str, answer: str | None = None) -> int | None:
    """The vocabulary id of a typed guess, or None when it is empty, unknown or more than one token.

    For an answer that is a word piece (``##ly``), the guess "ly" is read as that piece.
    """
    text = "".join(str(guess).split())
    if not text:
        return None
    vocab = tokenizer.get_vocab()
    if answer is not None and answer.startswith("##") and not text.startswith("##"):
        for candidate in ("##" + text, "##" + text.lower()):
            if candidate in vocab:
                return vocab[candidate]
    pieces = token_pieces(tokenizer, text)
    if len(pieces) != 1:
        return None
    token_id = tokenizer.convert_tokens_to_ids(pieces[0])
    if token_id is None or token_id == tokenizer.unk_token_id:
        return None
    return int(token_id)


def guess_ranks(log_probs: torch.Tensor, guess_ids: Sequence[int | None]) -> list[tuple[int | None, float | None]]:
    """(rank, probability) of each row's guess under the model; rank 1 = its first choice.

    ``log_probs`` is (M, V); rank counts the tokens the model prefers strictly, plus one.

    >>> lp = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]))
    >>> [(r, round(p, 2)) for r, p in guess_ranks(lp, [1, 0])]
    [(2, 0.3), (2, 0.1)]
    """
    out: list[tuple[int | None, float | None]] = []
    for m, token_id in enumerate(guess_ids):
        if token_id is None or not 0 <= int(token_id) < log_probs.shape[-1]:
            out.append((None, None))
            continue
        row = log_probs[m]  # (V,)
        value = row[int(token_id)]
        out.append((int((row > value).sum()) + 1, float(value.exp())))
    return out


@dataclass(frozen=True)
class GuessReport:
    """One blank after the reveal: the answer, the student's guess, and how the model rates that guess."""

    position: int
    answer: str
    guess: str
    correct: bool
    guess_rank: int | None  # None: not one token of the vocabulary
    guess_prob: float | None
    answer_rank: int
    answer_prob: float


@torch.no_grad()
def rank_guesses(model, tokenizer, question: Question, guesses: Sequence[str], *, lowercase: bool = True) -> list[GuessReport]:
    """Rank and probability of each guess (and of the answer) at its blank, from one forward pass."""
    blanks = question.blanks
    selected = question.in_loss  # row order of masked_lm_logits
    logits, targets = masked_lm_logits(model, question.input_ids, question.attention_mask, question.labels)  # (M, V)
    log_probs = torch.log_softmax(logits.float(), dim=-1).cpu()  # (M, V)
    rows = [selected.index(p) for p in blanks]
    guesses = list(guesses) + [""] * (len(blanks) - len(guesses))
    score = score_guesses(question.answers, guesses, lowercase=lowercase)
    guess_ids = [guess_token_id(tokenizer, g, a) for g, a in zip(guesses, question.answers)]
    guess_stats = guess_ranks(log_probs[rows], guess_ids)
    answer_stats = guess_ranks(log_probs[rows], targets.cpu()[rows].tolist())
    return [GuessReport(p, a, g, ok, gr, gp, ar, ap) for p, a, g, ok, (gr, gp), (ar, ap)
            in zip(blanks, question.answers, guesses, score.correct, guess_stats, answer_stats)]


# --------------------------------------------------------------------------- what the page says after a reveal
def guess_rows(reports: Sequence[GuessReport], predictions, top_k: int) -> list[dict[str, Any]]:
    """One table row per blank: the answer, the guess, and how the model ranks both (``predict.Predictions``)."""
    vocab = predictions.vocab_size
    by_position = {p.position: p for p in predictions.positions}
    rows = []
    for i, r in enumerate(reports):
        top = by_position[r.position]
        rows.append({
            "blank": i + 1,
            "answer": r.answer,
            "your guess": r.guess or "—",
            "right?": "✅" if r.correct else "❌",
            f"model's top {top_k}": ", ".join(f"{t} {probability_text(q)}" for t, q in zip(top.top_tokens, top.top_probs)),
            "your guess: rank": f"{r.guess_rank:,} of {vocab:,}" if r.guess_rank else "not one token",
            "your guess: p": probability_text(r.guess_prob) if r.guess_prob is not None else "—",
            "answer: rank": f"{r.answer_rank:,}",
            "answer: p": probability_text(r.answer_prob),  # the chart's format: one probability, one text
        })
    return rows


def hidden_in_plain_sight(selected: int, masks: int) -> str:
    """The random-or-unchanged question, in numbers (markdown)."""
    hidden = selected - masks
    return (f"BERT selected **{selected}** token{'s' if selected != 1 else ''} of this sentence. You can see "
            f"**{masks}** `[MASK]`{'s' if masks != 1 else ''}, so **{hidden}** selected "
            f"token{'s are' if hidden != 1 else ' is'} hiding in plain sight: swapped for a random token, or left "
            "exactly as they were.")


def selection_caption(score: SelectionScore, names: Mapping[int, str]) -> str:
    """Found, missed and wrong picks of one answer, by their pills' names."""
    def listed(positions) -> str:
        return ", ".join(names.get(i, str(i)) for i in positions) or "—"

    return f"found: {listed(score.hits)} · missed: {listed(score.missed)} · wrong picks: {listed(score.false_alarms)}"


def loss_answer(in_loss: int, score: SelectionScore, names: Mapping[int, str]) -> str:
    """Which positions the loss uses, and what the answer missed (markdown)."""
    return (f"The loss uses the **{in_loss} selected positions** — `[MASK]`, random **and** unchanged ones, where "
            "`labels` holds the original id — and nothing else: unselected tokens and `[CLS]`/`[SEP]` have "
            "`labels = -100`, which cross-entropy skips. "
            f"Missed: {', '.join(names[i] for i in score.missed) or '—'}. "
            f"Wrong picks: {', '.join(names[i] for i in score.false_alarms) or '—'}.")


def class_ask(question: Question, model, tokenizer, k: int = 10) -> Ask | None:
    """"Which word is hidden?" at the question's first [MASK] (None when it has none): the sentence as the model
    sees it, and, for the reveal, the hidden word beside the model's top ``k`` guesses there."""
    if not question.blanks:
        return None
    first = question.blanks[0]
    labels = torch.full_like(question.labels, IGNORE_INDEX)
    labels[0, first] = question.labels[0, first]
    found = predict_masked(model, tokenizer, question.input_ids, question.attention_mask, labels, k=k).positions[0]
    shown = [t for t, d in zip(question.shown, question.decisions) if d != "SPECIAL"]
    context = tokenizer.convert_tokens_to_string(shown).replace(" ##", "")
    truth = word_of(tokenizer, found.true_token)
    blanks = len(question.blanks)
    where = "the first [MASK]" if blanks > 1 else "[MASK]"
    return Ask("word", f"Which word is hidden at {where}? One word.", context=context, tokenizer=tokenizer,
               reveal=Reveal(model_words(tokenizer, found.top_tokens, found.top_probs), truth=truth,
                             note=f"the hidden word {truth!r} is the model's guess number {found.true_rank:,} "
                                  f"(p = {probability_text(found.true_prob)})."))
