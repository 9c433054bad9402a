"""What the model guesses at masked positions: top-k, p(true), rank and loss; typed blanks; the
pseudo-log-likelihood; filling several masks. (The Predictions page's view-model is ``lessons.predictions``.)

Every function here runs the model through ``head.masked_lm_logits`` (the encoder once, the head on
the M selected rows only) and turns its (M, V) scores into plain records a page shows.

Shapes: B = batch, T = sequence length, V = vocabulary, M = selected positions (``labels != IGNORE_INDEX``),
K = top-k, P = positions to fill.

>>> from mlm_core.models import tiny_random_masked_lm
>>> model, tokenizer = tiny_random_masked_lm()
>>> ids = torch.tensor([[101, 1996, 103, 2938, 102]])
>>> labels = torch.tensor([[-100, -100, 4937, -100, -100]])
>>> found = predict_masked(model, tokenizer, ids, torch.ones_like(ids), labels, k=3)
>>> [(p.position, p.true_token, len(p.top_tokens)) for p in found.positions]
[(2, 'cat', 3)]
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from mlm_core.errors import InputError
from mlm_core.head import SCORES_AT_ONCE, check_shapes, head_parts, masked_lm_logits, row_groups, selected_index
from mlm_core.masking import IGNORE_INDEX, Decision

__all__ = [
    "TokenPrediction",
    "Predictions",
    "predict_masked",
    "with_mask_token",
    "typed_blanks",
    "predict_typed_blanks",
    "PseudoLogLikelihood",
    "pseudo_log_likelihood",
    "pseudo_log_likelihoods",
    "FillStep",
    "FillResult",
    "FILL_MODES",
    "MASK_PREDICT_ITERATIONS",
    "mask_predict_schedule",
    "fill_masks",
]


# --------------------------------------------------------------------------- predictions
@dataclass(frozen=True)
class TokenPrediction:
    """What the model predicts at one selected position."""

    row: int  # index in the batch
    position: int  # index in the sequence
    seen_id: int  # what the model saw there ([MASK], a random token or the original)
    seen_token: str
    true_id: int  # what it should predict (the label)
    true_token: str
    top_ids: tuple[int, ...]  # the K most likely tokens, most likely first
    top_tokens: tuple[str, ...]
    top_probs: tuple[float, ...]
    true_prob: float  # p(true token)
    true_rank: int  # 1 = the model's first guess
    entropy: float  # of the predicted distribution, in nats (log V = uniform)
    loss: float  # -log p(true token): this position's cross-entropy
    decision: Decision | None = None  # MASK / RANDOM / UNCHANGED, when known

    @property
    def correct(self) -> bool:
        return self.true_rank == 1


@dataclass(frozen=True)
class Predictions:
    """Every selected position's prediction, in row-major order, and their mean loss."""

    positions: tuple[TokenPrediction, ...]
    k: int
    vocab_size: int
    known_truth: bool = True  # False for blanks a learner typed: nothing to score against

    @property
    def mean_loss(self) -> float:
        """The MLM loss of the batch: mean cross-entropy over the selected positions."""
        return sum(p.loss for p in self.positions) / len(self.positions) if self.positions else float("nan")

    def records(self) -> list[dict[str, Any]]:
        """One flat dict per position (tuples joined), ready for a table."""
        rows = []
        for p in self.positions:
            row = asdict(p)
            row["decision"] = p.decision.name if p.decision is not None else None
            row["top_tokens"] = " ".join(p.top_tokens)
            row["top_probs"] = ", ".join(f"{q:.3f}" for q in p.top_probs)
            row.pop("top_ids")
            rows.append(row)
        return rows


def _vocab_size(model) -> int:
    """V of the model's output layer (its config's where the model has none to show)."""
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(out, "weight", None)
    return int(weight.shape[0]) if weight is not None else int(getattr(model.config, "vocab_size", 1) or 1)


@torch.no_grad()
def predict_masked(model, tokenizer, input_ids, attention_mask, labels, *, k: int = 5, decisions=None) -> Predictions:
    """Top-k, p(true), rank, entropy and loss at every position where ``labels != IGNORE_INDEX``.

    That is every selected position — [MASK], random and unchanged ones alike — because BERT is
    trained on all three. ``decisions`` (shaped like ``labels``) tags each position with its Decision.
    """
    input_ids, attention_mask, labels = check_shapes(input_ids, attention_mask, labels)
    groups = row_groups(labels, _vocab_size(model), gathered=head_parts(model) is not None)
    if len(groups) > 1:  # many selected positions: a few sentences at a time, so (M, V) stays small
        rows = []
        for g in groups:
            part = predict_masked(model, tokenizer, input_ids[g], None if attention_mask is None else attention_mask[g],
                                  labels[g], k=k, decisions=None if decisions is None else decisions.reshape(labels.shape)[g])
            rows += [replace(p, row=p.row + g.start) for p in part.positions]
            k, vocab = part.k, part.vocab_size
        return Predictions(tuple(rows), k, vocab)
    logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)  # (M, V), (M,)
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (M, V), in fp32 even for a bf16 model
    probs = log_probs.exp()  # (M, V)
    k = max(1, min(int(k), probs.shape[-1]))
    top_probs, top_ids = probs.topk(k, dim=-1)  # (M, K), (M, K)
    true_log_prob = log_probs.gather(1, targets[:, None]).squeeze(1)  # (M,)
    # rank = 1 + how many tokens the model prefers strictly (ties go in the true token's favour)
    true_rank = (log_probs > true_log_prob[:, None]).sum(-1) + 1  # (M,)
    entropy = -(probs * log_probs).nan_to_num().sum(-1)  # (M,), 0 * log 0 counted as 0
    index = selected_index(labels).cpu()  # (M,)
    width = labels.shape[-1]
    seen = input_ids.reshape(-1).cpu().index_select(0, index)  # (M,)
    codes = decisions.reshape(-1).cpu().index_select(0, index).tolist() if decisions is not None else None

    # one transfer to the host for everything shown
    top_ids, top_probs = top_ids.cpu().tolist(), top_probs.cpu().tolist()
    targets, true_log_prob = targets.cpu().tolist(), true_log_prob.cpu().tolist()
    true_rank, entropy = true_rank.cpu().tolist(), entropy.cpu().tolist()
    seen, flat = seen.tolist(), index.tolist()
    rows = []
    for m, flat_index in enumerate(flat):
        rows.append(TokenPrediction(
            row=flat_index // width,
            position=flat_index % width,
            seen_id=seen[m],
            seen_token=tokenizer.convert_ids_to_tokens(seen[m]),
            true_id=targets[m],
            true_token=tokenizer.convert_ids_to_tokens(targets[m]),
            top_ids=tuple(top_ids[m]),
            top_tokens=tuple(tokenizer.convert_ids_to_tokens(top_ids[m])),
            top_probs=tuple(top_probs[m]),
            true_prob=math.exp(true_log_prob[m]),
            true_rank=int(true_rank[m]),
            entropy=float(entropy[m]),
            loss=-true_log_prob[m],
            decision=Decision(codes[m]) if codes is not None else None,
        ))
    return Predictions(tuple(rows), k, int(logits.shape[-1]))


# --------------------------------------------------------------------------- typed blanks
_TYPED_MASK = re.compile(r"\[mask\]|<mask>", re.IGNORECASE)
def with_mask_token(tokenizer, text: str) -> str:
    """``text`` with every typed blank, ``[MASK]`` or ``<mask>`` (any case), as this tokenizer's mask token.

    >>> from mlm_core.bundled import load_default_tokenizer
    >>> with_mask_token(load_default_tokenizer(), "The cat sat on the <mask> and the [mask].")
    'The cat sat on the [MASK] and the [MASK].'
    """
    if tokenizer.mask_token is None:
        return text
    return _TYPED_MASK.sub(lambda _: tokenizer.mask_token, text)


def typed_blanks(tokenizer, input_ids) -> list[int]:
    """Positions of one sentence (T,) that hold the mask token: the blanks a learner typed."""
    ids = torch.as_tensor(input_ids).reshape(-1)  # (T,)
    if tokenizer.mask_token_id is None:
        return []
    return (ids == tokenizer.mask_token_id).nonzero().flatten().tolist()


@torch.no_grad()
def predict_typed_blanks(model, tokenizer, input_ids, attention_mask, positions: Sequence[int], *,
                         k: int = 5) -> Predictions:
    """Top-k at blanks a learner typed: there is no true token, so ``known_truth`` is False and the
    true-token fields (p, rank, loss) are not meaningful (they refer to the mask token itself)."""
    ids = torch.as_tensor(input_ids).reshape(1, -1)  # (1, T)
    attention_mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(1, -1)
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[0, list(positions)] = tokenizer.mask_token_id  # any id: only the positions matter
    decisions = torch.full_like(ids, int(Decision.NOT_SELECTED))
    decisions[0, list(positions)] = int(Decision.MASK)
    found = predict_masked(model, tokenizer, ids, attention_mask, labels, k=k, decisions=decisions)
    return replace(found, known_truth=False)


# --------------------------------------------------------------------------- a score that needs no random draw
@dataclass(frozen=True)
class PseudoLogLikelihood:
    """A sentence's pseudo-log-likelihood: every token masked in turn (Salazar et al. 2020).

    PLL(W) = Σ_t log P(w_t | W without w_t): one masked copy of the sentence per token, so it does not
    depend on a random masking. ``mean_loss`` = −PLL / N is on the scale of the MLM loss, and
    ``pseudo_perplexity`` = exp(mean_loss) (Salazar et al. 2020, "Masked Language Model Scoring", §2).
    """

    positions: tuple[int, ...]  # every non-special position, each masked once
    tokens: tuple[str, ...]  # the true token there
    log_probs: tuple[float, ...]  # log P(true token | the rest), in nats

    @property
    def total(self) -> float:
        return sum(self.log_probs)

    @property
    def mean_loss(self) -> float:
        return -self.total / len(self.log_probs) if self.log_probs else float("nan")

    @property
    def pseudo_perplexity(self) -> float:
        return math.exp(self.mean_loss) if self.log_probs else float("nan")


@torch.no_grad()
def pseudo_log_likelihood(model, tokenizer, input_ids, attention_mask=None, *, batch_size: int = 32
                          ) -> PseudoLogLikelihood:
    """Mask each non-special token of one sentence (T,) in turn and score the true token there ([UNK] is scored
    too: it is a token of the input like any word, as in Salazar et al. 2020's every-token PLL).

    The N masked copies run through the gathered head in batches of ``batch_size`` rows, one
    selected position per row (``pseudo_log_likelihoods`` for one sentence).
    """
    ids = torch.as_tensor(input_ids).reshape(-1)  # (T,)
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(-1)  # (T,)
    kept = torch.arange(ids.shape[0]) if mask is None else mask.bool().nonzero().squeeze(1)  # the attended tokens
    score = pseudo_log_likelihoods(model, tokenizer, [ids[kept].tolist()], batch_size=batch_size)[0]
    return replace(score, positions=tuple(int(kept[p]) for p in score.positions))  # positions in input_ids


@torch.no_grad()
def pseudo_log_likelihoods(model, tokenizer, sentences: Sequence[Sequence[int]], *, batch_size: int = 32,
                           word_ids: Sequence[Sequence[int | None]] | None = None) -> list[PseudoLogLikelihood]:
    """``pseudo_log_likelihood`` of several sentences (each a list of token ids, specials included), their
    masked copies packed together: one row per (sentence, token), rows of similar length in one batch,
    padded on the right and masked out, so many short sentences (a minimal pair, a benchmark) cost a few
    forward passes instead of one per sentence.

    ``word_ids`` (one list per sentence: the word of each token, None for specials) gives PLL-word-l2r (Kauf &
    Ivanova 2023, "A Better Way to Do Masked Language Model Scoring", ACL, §3): a piece is scored with the pieces
    of its own word to its right masked too, so "lo ##aves" no longer gives "lo" away through "##aves".
    """
    special = set(int(i) for i in tokenizer.all_special_ids) - {getattr(tokenizer, "unk_token_id", None)}
    pad_id = getattr(tokenizer, "pad_token_id", None) or 0  # any id: padded columns are masked out
    rows = [(s, t) for s, ids in enumerate(sentences) for t, tok in enumerate(ids) if int(tok) not in special]
    rows.sort(key=lambda r: len(sentences[r[0]]))  # similar lengths share a batch: little padding
    longest = max((len(ids) for ids in sentences), default=1)
    # A copy per row: a gathered head scores one position of each (N × V), any other head all of them (N × T × V).
    per_copy = _vocab_size(model) * (1 if head_parts(model) is not None else longest)
    batch_size = max(1, min(int(batch_size), SCORES_AT_ONCE // per_copy))
    scores: dict[tuple[int, int], float] = {}
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        width = max(len(sentences[s]) for s, _ in chunk)
        copies = torch.full((len(chunk), width), pad_id, dtype=torch.long)  # (N, T)
        attention = torch.zeros_like(copies)  # (N, T)
        labels = torch.full_like(copies, IGNORE_INDEX)  # (N, T)
        for r, (s, t) in enumerate(chunk):
            ids = torch.as_tensor(list(sentences[s]), dtype=torch.long)
            copies[r, :len(ids)] = ids
            attention[r, :len(ids)] = 1
            copies[r, t] = tokenizer.mask_token_id
            if word_ids is not None and word_ids[s][t] is not None:  # PLL-word-l2r: the word's later pieces too
                for later in range(t + 1, len(ids)):
                    if word_ids[s][later] == word_ids[s][t]:
                        copies[r, later] = tokenizer.mask_token_id
            labels[r, t] = ids[t]
        logits, targets = masked_lm_logits(model, copies, attention, labels)  # (N, V), one row per copy
        got = F.log_softmax(logits.float(), dim=-1).gather(1, targets[:, None]).squeeze(1)  # (N,)
        scores.update(zip(chunk, got.cpu().tolist()))
    out = []
    for s, ids in enumerate(sentences):
        positions = tuple(t for t, tok in enumerate(ids) if int(tok) not in special)
        out.append(PseudoLogLikelihood(positions, tuple(tokenizer.convert_ids_to_tokens([int(ids[t]) for t in positions])),
                                       tuple(scores[(s, t)] for t in positions)))
    return out


# --------------------------------------------------------------------------- filling several masks
@dataclass(frozen=True)
class FillStep:
    """One filled position: which token went in, with what probability, and the sentence after it."""

    position: int
    token_id: int
    token: str
    prob: float  # p(token) when it was chosen
    candidates: tuple[tuple[str, float], ...]  # the top-k at that moment
    ids: tuple[int, ...]  # the whole sequence after this step


@dataclass(frozen=True)
class FillResult:
    """Several masks filled: ``"independent"`` (one pass), ``"easy_first"`` (greedy, most confident
    position first, never revised) or ``"mask_predict"`` (Ghazvininejad et al. 2019)."""

    mode: str
    order: tuple[int, ...]  # positions in the order they were (last) filled
    steps: tuple[FillStep, ...]  # one per position: the token it ends with, and its probability then
    ids: tuple[int, ...]  # the final sequence
    tokens: tuple[str, ...]
    text: str
    rounds: tuple[tuple[int, ...], ...] = ()  # positions predicted in each model pass
    round_tokens: tuple[tuple[str, ...], ...] = ()  # mask_predict: the tokens at the positions after each pass
    round_probs: tuple[tuple[float, ...], ...] = ()  # mask_predict: their probabilities after each pass

    @property
    def log_prob(self) -> float:
        """Sum of log p of the chosen tokens, each when it was chosen (higher = more confident)."""
        return sum(math.log(max(s.prob, 1e-45)) for s in self.steps)


FILL_MODES = ("independent", "easy_first", "mask_predict")
MASK_PREDICT_ITERATIONS = 4  # Ghazvininejad et al. 2019 report T = 4 and T = 10 (Table 1)


def mask_predict_schedule(n_masks: int, iterations: int) -> list[int]:
    """How many of the N positions Mask-Predict re-masks at iterations t = 1 … T−1: ⌊N·(T−t)/T⌋.

    (Ghazvininejad et al. 2019, §3.2: "the number of masks n is a function of the iteration t".)

    >>> mask_predict_schedule(6, 3), mask_predict_schedule(3, 10)[:4]
    ([4, 2], [2, 2, 2, 1])
    """
    return [n_masks * (iterations - t) // iterations for t in range(1, max(1, iterations))]


@torch.no_grad()
def fill_masks(model, tokenizer, input_ids, attention_mask, positions: Sequence[int], mode: str = "independent",
               k: int = 5, iterations: int = MASK_PREDICT_ITERATIONS) -> FillResult:
    """Put the mask token at ``positions`` of one sentence, then fill them with the model's first choices.

    - ``independent``: one pass; every position takes its first choice from it (the choices cannot
      see each other).
    - ``easy_first``: greedy easy-first filling: fill the one position the model is most sure of,
      run again with it filled in, repeat; a filled token is never revised.
    - ``mask_predict``: Mask-Predict (Ghazvininejad et al. 2019, §3.2): predict every position at
      once, then for t = 1 … T−1 re-mask the ⌊N·(T−t)/T⌋ positions with the lowest probability and
      predict them again (the others keep their token and probability); T = ``iterations``.
    Special tokens are never chosen; a position may already hold the mask token (a typed blank).
    """
    if mode not in FILL_MODES:
        raise InputError(f"mode must be one of {', '.join(FILL_MODES)}; got {mode!r}.")
    ids = torch.as_tensor(input_ids).reshape(-1).clone()  # (T,) never edit the caller's tensor
    mask = None if attention_mask is None else torch.as_tensor(attention_mask).reshape(1, -1)
    targets = _fill_targets(tokenizer, ids, positions)
    ids[targets] = tokenizer.mask_token_id
    filling = _Filling(model, tokenizer, ids, mask, k)
    {"independent": _fill_independent, "easy_first": _fill_easy_first, "mask_predict": _mask_predict}[mode](
        filling, targets, iterations)
    final = tuple(ids.tolist())
    return FillResult(
        mode=mode,
        order=tuple(filling.order),
        steps=tuple(filling.steps[p] for p in filling.order),
        ids=final,
        tokens=tuple(tokenizer.convert_ids_to_tokens(list(final))),
        text=tokenizer.decode(list(final), skip_special_tokens=True),
        rounds=tuple(filling.rounds),
        round_tokens=tuple(filling.round_tokens),
        round_probs=tuple(filling.round_probs),
    )


def _fill_targets(tokenizer, ids: torch.Tensor, positions: Sequence[int]) -> list[int]:
    """The positions to fill, sorted, once each; an ``InputError`` for none, one outside the sentence, or a special
    token other than the mask token (a typed blank may already hold it)."""
    special = set(int(i) for i in tokenizer.all_special_ids)
    targets = sorted(set(int(p) for p in positions))
    if not targets:
        raise InputError("Pick at least one token to mask.")
    for p in targets:
        if not 0 <= p < ids.shape[0]:
            raise InputError(f"Position {p} is outside the sentence (it has {ids.shape[0]} tokens).")
        if int(ids[p]) in special and int(ids[p]) != tokenizer.mask_token_id:
            raise InputError(f"Position {p} is the special token {tokenizer.convert_ids_to_tokens(int(ids[p]))}; "
                             "pick a word piece instead.")
    return targets


class _Filling:
    """One sentence being filled: our own copy of its ids (T,), filled in place, each position's latest step, the
    order they were filled in, and the rounds of predictions that filled them."""

    def __init__(self, model, tokenizer, ids: torch.Tensor, mask: torch.Tensor | None, k: int):
        self.model, self.tokenizer, self.ids, self.mask, self.k = model, tokenizer, ids, mask, k
        self.banned = torch.tensor(sorted(set(int(i) for i in tokenizer.all_special_ids)))  # (S,) never in a sentence
        self.steps: dict[int, FillStep] = {}
        self.order: list[int] = []
        self.rounds: list[tuple[int, ...]] = []
        self.round_tokens: list[tuple[str, ...]] = []
        self.round_probs: list[tuple[float, ...]] = []

    def probabilities(self, todo: list[int]) -> torch.Tensor:
        """The model's probabilities (P, V) at the positions ``todo``, in order, on the ids as they are now."""
        width = self.ids.shape[0]
        labels = torch.full((1, width), IGNORE_INDEX)
        labels[0, todo] = 0  # any id: only where labels are set matters here
        logits, _ = masked_lm_logits(self.model, self.ids[None], self.mask, labels)  # (P, V), positions in order
        logits = logits.float().cpu()
        logits[:, self.banned[self.banned < logits.shape[-1]]] = float("-inf")
        return logits.softmax(-1)  # (P, V)

    def fill(self, position: int, probs: torch.Tensor) -> None:
        """Write the first choice of ``probs`` (V,) at ``position``, and remember the step."""
        self.steps[position] = _fill(self.ids, position, probs, self.tokenizer, self.k)


def _fill_independent(filling: _Filling, targets: list[int], iterations: int) -> None:
    """One pass; every position takes its first choice from it."""
    probs = filling.probabilities(targets)  # (P, V): one pass for all positions
    filling.rounds.append(tuple(targets))
    for i, p in enumerate(targets):
        filling.fill(p, probs[i])
        filling.order.append(p)


def _fill_easy_first(filling: _Filling, targets: list[int], iterations: int) -> None:
    """Fill the position the model is most sure of, run again with it filled in, repeat."""
    remaining = list(targets)
    while remaining:
        probs = filling.probabilities(remaining)  # (P, V) with the earlier choices filled in
        best = int(probs.max(-1).values.argmax())  # the position the model is most sure of
        p = remaining.pop(best)
        filling.rounds.append((p,))
        filling.fill(p, probs[best])
        filling.order.append(p)


def _mask_predict(filling: _Filling, targets: list[int], iterations: int) -> None:
    """Mask-Predict: every position at once, then re-mask and predict again the least confident ones."""
    steps = filling.steps
    for t, n_masks in enumerate([len(targets)] + mask_predict_schedule(len(targets), iterations)):
        if n_masks == 0:
            break
        if t == 0:  # iteration 0: every position is masked
            todo = list(targets)
        else:  # re-mask the n least confident (ties: the leftmost first)
            todo = sorted(sorted(targets, key=lambda q: (steps[q].prob, q))[:n_masks])
            filling.ids[todo] = filling.tokenizer.mask_token_id
        probs = filling.probabilities(todo)  # (n, V)
        for i, p in enumerate(todo):
            filling.fill(p, probs[i])
        filling.rounds.append(tuple(todo))
        filling.round_tokens.append(tuple(steps[p].token for p in targets))
        filling.round_probs.append(tuple(steps[p].prob for p in targets))
    filling.order = sorted(targets, key=lambda q: max(r for r, done in enumerate(filling.rounds) if q in done))


def _fill(ids: torch.Tensor, position: int, probs: torch.Tensor, tokenizer, k: int) -> FillStep:
    """Write the most likely token at ``position`` of ``ids`` (in place: ``ids`` is our own copy)."""
    top_probs, top_ids = probs.topk(max(1, min(k, probs.shape[-1])))  # (K,)
    choice = int(top_ids[0])
    ids[position] = choice
    tokens = tokenizer.convert_ids_to_tokens(top_ids.tolist())
    return FillStep(
        position=position,
        token_id=choice,
        token=tokens[0],
        prob=float(top_probs[0]),
        candidates=tuple(zip(tokens, (float(q) for q in top_probs))),
        ids=tuple(ids.tolist()),
    )
