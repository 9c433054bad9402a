"""BERT's second pre-training task: next-sentence prediction (NSP), next to the MLM loss.

BERT was pre-trained on ``MLM + NSP``: given ``[CLS] A [SEP] B [SEP]``, say whether B really
follows A in the same document (IsNext) or is a sentence from another document (NotNext).
Pairs are 50% of each, as in Google's ``create_pretraining_data.py``. The NSP classifier reads the
*pooled* ``[CLS]`` state (``BertPooler``: dense + tanh) through ``BertPreTrainingHeads``.

Masked-LM checkpoints (``BertForMaskedLM``, the bundled MiniLM) have neither a pooler nor an
NSP classifier, so ``build_pretraining_model`` adds new ones beside the model's own encoder and
MLM head, and ``train_nsp_head`` trains them for a few dozen steps.

Shapes: B = pairs in a batch, T = sequence length, H = hidden size, M = selected (masked) positions.
Labels follow Hugging Face's ``BertForPreTraining``: ``next_sentence_label`` 0 = IsNext, 1 = NotNext.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.bert.modeling_bert import BertPooler, BertPreTrainingHeads

from mlm_core.data import mask_batch, run_tokenizer
from mlm_core.errors import InputError
from mlm_core.losses import LossOutput, full_cross_entropy
from mlm_core.masking import IGNORE_INDEX
from mlm_core.training import Micro, Optimizer, TrainConfig, rng_devices, seed_dropout, train_step

# What came after BERT, said wherever the NSP lesson is shown (sources checked: paper and section).
AFTER_BERT = (
    "BERT's own ablation found that NSP helped: without it, QNLI fell from 88.4 to 84.9 and MNLI from 84.4 "
    "to 83.9 (Devlin et al. 2019, §5.1, Table 5). Later work disagreed: RoBERTa found that removing NSP, with "
    "inputs packed from full sentences, matches or slightly improves downstream results (Liu et al. 2019, "
    "§4.2, Table 2), and ALBERT replaced NSP with sentence-order prediction — two consecutive segments, "
    "in order or swapped — because NSP can be solved by spotting a change of topic (Lan et al. 2020, §3.1)."
)

IS_NEXT, NOT_NEXT = 0, 1  # Hugging Face's next_sentence_label convention
IS_NEXT_PROB = 0.5  # BERT: half the pairs are real continuations


@dataclass(frozen=True)
class SentencePair:
    """Sentence A, sentence B, and whether B really follows A."""

    first: str
    second: str
    is_next: bool
    document: int  # the document sentence A comes from

    @property
    def label(self) -> int:
        return IS_NEXT if self.is_next else NOT_NEXT


def make_nsp_pairs(
    documents: Sequence[Sequence[str]],
    num_pairs: int,
    *,
    generator: torch.Generator,
    is_next_prob: float = IS_NEXT_PROB,
) -> list[SentencePair]:
    """``num_pairs`` sentence pairs: IsNext with probability 0.5, else NotNext from another document.

    Sentence A is any sentence that has a successor in its document, drawn the same way for
    both classes (so A alone gives nothing away). IsNext: B is the next sentence. NotNext: B is a
    random sentence of a different, random document (Google BERT draws it from another document
    too, so it is never accidentally the true continuation).

    >>> docs = [["A1.", "A2."], ["B1.", "B2."]]
    >>> pairs = make_nsp_pairs(docs, 4, generator=torch.Generator().manual_seed(0))
    >>> all(p.second == docs[p.document][docs[p.document].index(p.first) + 1] for p in pairs if p.is_next)
    True
    """
    if generator is None:
        raise InputError("make_nsp_pairs needs a torch.Generator: the global RNG is never used.")
    documents = [[s for s in doc if s and s.strip()] for doc in documents]
    documents = [doc for doc in documents if doc]
    starts = [(d, i) for d, doc in enumerate(documents) for i in range(len(doc) - 1)]  # A with a successor
    if len(documents) < 2 or not starts:
        raise InputError(
            "Next-sentence prediction needs at least two documents, one of them with two or more "
            "sentences (NotNext partners come from a different document)."
        )
    if num_pairs <= 0:
        return []
    is_next = torch.rand(num_pairs, generator=generator) < is_next_prob  # (N,)
    start = torch.randint(len(starts), (num_pairs,), generator=generator)  # (N,)
    other = torch.randint(len(documents) - 1, (num_pairs,), generator=generator)  # (N,) skips A's document
    sentence_u = torch.rand(num_pairs, generator=generator)  # (N,) which sentence of that document
    pairs = []
    for n in range(num_pairs):
        d, i = starts[int(start[n])]
        if bool(is_next[n]):
            second = documents[d][i + 1]
        else:
            o = int(other[n])
            o = o + 1 if o >= d else o  # uniform over the documents other than d
            doc = documents[o]
            second = doc[min(int(float(sentence_u[n]) * len(doc)), len(doc) - 1)]
        pairs.append(SentencePair(documents[d][i], second, bool(is_next[n]), d))
    return pairs


def encode_pairs(tokenizer, pairs: Sequence[SentencePair], max_length: int = 64) -> dict[str, torch.Tensor]:
    """``[CLS] A [SEP] B [SEP]`` for each pair: input_ids, token_type_ids, attention_mask,
    special_tokens_mask, word_ids (B, T) and next_sentence_label (B,).

    ``word_ids`` number the words of A, then those of B after them (the tokenizer restarts at 0 for
    B), -1 on special tokens and padding: whole-word and span masking need them, as on every page.
    """
    if not pairs:
        raise InputError("There are no sentence pairs to encode.")
    batch = run_tokenizer(
        tokenizer, [p.first for p in pairs], [p.second for p in pairs],
        truncation="longest_first", max_length=max_length, padding=True,
        return_special_tokens_mask=True, return_token_type_ids=True, return_tensors="pt",
    )
    special = batch["special_tokens_mask"].bool() | (batch["attention_mask"] == 0)
    words = torch.full_like(batch["input_ids"], -1)  # (B, T)
    for row in range(len(pairs)):
        ids = [(p, s, w) for p, (s, w) in enumerate(zip(batch.sequence_ids(row), batch.word_ids(row)))
               if s is not None and w is not None and not special[row, p]]
        offset = 1 + max((w for _, s, w in ids if s == 0), default=-1)  # B's words come after A's
        for position, sequence, word in ids:
            words[row, position] = word + (offset if sequence == 1 else 0)
    return {
        "input_ids": batch["input_ids"],
        "token_type_ids": batch["token_type_ids"],
        "attention_mask": batch["attention_mask"],
        "special_tokens_mask": special.long(),
        "word_ids": words,
        "next_sentence_label": torch.tensor([p.label for p in pairs], dtype=torch.long),
    }


class BertPretrainingModel(nn.Module):
    """``BertForPreTraining`` assembled from a masked LM: its encoder, its MLM head, a new NSP head.

    ``bert`` and ``cls.predictions`` are the masked LM's own modules (shared, not copied);
    ``pooler`` (dense + tanh on [CLS]) and ``cls.seq_relationship`` (H → 2) are new.
    """

    def __init__(self, masked_lm: nn.Module, generator: torch.Generator):
        super().__init__()
        if getattr(masked_lm.config, "model_type", None) != "bert" or not hasattr(masked_lm, "cls"):
            raise InputError(
                "Next-sentence prediction needs a BERT masked LM (the bundled default, the tiny random "
                f"BERT or a BERT checkpoint); {type(masked_lm).__name__} has no BERT pre-training head."
            )
        config = masked_lm.config
        self.config = config
        self.bert = masked_lm.bert  # shared encoder (token_type_ids tell A from B)
        # Building modules draws from the global RNG: fork_rng hands its state back, and the new
        # weights are then drawn from our own generator.
        with torch.random.fork_rng(devices=[]):
            self.pooler = BertPooler(config)
            heads = BertPreTrainingHeads.__new__(BertPreTrainingHeads)  # without a second (V, H) head
            nn.Module.__init__(heads)
            heads.predictions = masked_lm.cls.predictions  # the masked LM's own MLM head
            heads.seq_relationship = nn.Linear(config.hidden_size, 2)  # new: IsNext / NotNext
            self.cls = heads
        device = next(masked_lm.parameters()).device
        dtype = next(masked_lm.parameters()).dtype
        with torch.no_grad():
            for linear in (self.pooler.dense, heads.seq_relationship):
                linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator) * config.initializer_range)
                linear.bias.zero_()
        self.pooler.to(device=device, dtype=dtype)
        heads.seq_relationship.to(device=device, dtype=dtype)

    def nsp_head(self) -> nn.Module:
        """The new modules, pooler and NSP classifier, together (shared, not copied): what a frozen-encoder
        run trains."""
        return nn.ModuleList([self.pooler, self.cls.seq_relationship])

    def encode(self, input_ids, attention_mask, token_type_ids) -> tuple[torch.Tensor, torch.Tensor]:
        """(sequence_output (B, T, H), pooled_output (B, H))."""
        device = next(self.bert.parameters()).device
        states = self.bert(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
            token_type_ids=token_type_ids.to(device),
        )[0]  # (B, T, H)
        return states, self.pooler(states)

    def nsp_logits(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        """IsNext / NotNext scores (B, 2)."""
        _, pooled = self.encode(input_ids, attention_mask, token_type_ids)
        return self.cls.seq_relationship(pooled)

    def classify(self, cls: torch.Tensor) -> torch.Tensor:
        """IsNext / NotNext scores (B, 2) from [CLS] states (B, H) computed already: the pooler, then the classifier."""
        return self.cls.seq_relationship(self.pooler.activation(self.pooler.dense(cls)))


def build_pretraining_model(masked_lm: nn.Module, *, generator: torch.Generator) -> BertPretrainingModel:
    """A ``BertPretrainingModel`` (MLM head + new NSP head) around ``masked_lm``'s encoder."""
    return BertPretrainingModel(masked_lm, generator)


def mlm_nsp_loss(
    model: BertPretrainingModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    token_type_ids: torch.Tensor,
    labels: torch.Tensor,
    next_sentence_label: torch.Tensor,
    *,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
) -> LossOutput:
    """``mlm_weight * MLM + nsp_weight * NSP`` through ``BertPreTrainingHeads`` (BERT used 1 and 1).

    The MLM head runs on the selected rows only (``labels != -100``); the NSP head on the pooled
    [CLS] state. ``per_token`` is the MLM per-token loss; diagnostics hold ``mlm_loss``,
    ``nsp_loss``, ``is_next_prob`` (B,) and ``nsp_accuracy``. With nothing selected the MLM term
    is 0 (not NaN) and ``diagnostics["empty"]`` is True.
    """
    states, pooled = model.encode(input_ids, attention_mask, token_type_ids)  # (B, T, H), (B, H)
    labels = labels.to(states.device)
    selected = labels != IGNORE_INDEX  # (B, T)
    rows = states[selected]  # (M, H)
    prediction_scores, seq_relationship_score = model.cls(rows, pooled)  # (M, V), (B, 2)
    mlm = full_cross_entropy(prediction_scores, labels[selected])
    target = next_sentence_label.to(states.device)
    nsp = F.cross_entropy(seq_relationship_score.float(), target)
    total = mlm_weight * mlm.loss + nsp_weight * nsp
    probs = seq_relationship_score.detach().float().softmax(-1)
    return LossOutput(total, mlm.per_token, {
        "empty": mlm.diagnostics["empty"], "M": mlm.diagnostics["M"],
        "mlm_loss": float(mlm.loss.detach()), "nsp_loss": float(nsp.detach()),
        "mlm_weight": mlm_weight, "nsp_weight": nsp_weight,
        "is_next_prob": probs[:, IS_NEXT].cpu(),
        "nsp_accuracy": float((probs.argmax(-1) == target).float().mean()),
    })


@torch.no_grad()
def is_next_probabilities(model: BertPretrainingModel, tokenizer, pairs: Sequence[SentencePair],
                          max_length: int = 64) -> list[float]:
    """P(IsNext) for each pair, from the NSP head."""
    batch = encode_pairs(tokenizer, pairs, max_length)
    logits = model.nsp_logits(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return logits.float().softmax(-1)[:, IS_NEXT].cpu().tolist()


@dataclass
class NSPTrainResult:
    """What ``train_nsp_head`` returns: the model and its accuracy step by step."""

    model: BertPretrainingModel
    accuracy: list[float] = field(default_factory=list)  # per step, on that step's batch, before the update
    loss: list[float] = field(default_factory=list)  # NSP loss per step
    heldout_before: float = float("nan")  # accuracy on held-out pairs before training (≈ chance)
    heldout_after: float = float("nan")  # ... and after
    heldout_pairs: list[SentencePair] = field(default_factory=list)

    def smoothed_accuracy(self, window: int = 5) -> list[float]:
        """Running mean of the step accuracies over the last ``window`` steps."""
        out = []
        for i in range(len(self.accuracy)):
            chunk = self.accuracy[max(0, i - window + 1): i + 1]
            out.append(sum(chunk) / len(chunk))
        return out

    def records(self) -> list[dict]:
        """One dict per step: step, accuracy, smoothed accuracy, loss (for a table or a chart)."""
        smooth = self.smoothed_accuracy()
        return [{"step": i + 1, "accuracy": a, "accuracy_smoothed": s, "loss": l}
                for i, (a, s, l) in enumerate(zip(self.accuracy, smooth, self.loss))]


def train_nsp_head(
    masked_lm: nn.Module,
    tokenizer,
    documents: Sequence[Sequence[str]],
    *,
    generator: torch.Generator,
    steps: int = 40,
    batch_size: int = 32,
    lr: float = 1e-3,
    max_length: int = 48,
    pool_size: int = 256,
    heldout: int = 96,
    train_encoder: bool = False,
    on_progress: Callable[[float, str], None] | None = None,
) -> NSPTrainResult:
    """Train a new NSP head (pooler + classifier) for a few dozen steps; accuracy rises from chance.

    By default the encoder stays frozen: only the new head learns, so the [CLS] states of a pool
    of ``pool_size`` pairs (plus ``heldout`` pairs for the before/after accuracy) are computed
    once and every step draws a batch from that pool. This is fast on a CPU and never changes the
    (cached, shared) model. ``train_encoder=True`` fine-tunes a copy of the whole model on fresh
    pairs every step instead (slow). ``on_progress(fraction, text)`` reports progress, for
    ``st.progress``. Every step is the training loop's own step (`training.train_step`: forward, loss,
    backward, clip, AdamW), with the NSP loss given to it.
    """
    report = on_progress or (lambda fraction, text: None)
    if train_encoder:
        masked_lm = copy.deepcopy(masked_lm)
    model = build_pretraining_model(masked_lm, generator=generator)
    device = next(model.parameters()).device
    # The loop's own step (BERT's AdamW constants and weight decay, none on biases and LayerNorm; the global
    # gradient norm clipped at max_grad_norm), with the NSP loss: train() itself steps a masked LM on token
    # chunks, this is a 2-way classifier on [CLS] states. In fp32, as the states are computed.
    opt = Optimizer(model if train_encoder else model.nsp_head(), TrainConfig(learning_rate=lr, amp="off"), device)
    was_training = masked_lm.training
    masked_lm.train(train_encoder)  # frozen encoder: eval mode, no dropout
    # Fine-tuning the encoder draws dropout from torch's global RNG: seeded from `generator` inside fork_rng, so a
    # run repeats for a seed and the caller's RNG state comes back, as in the training loop (the frozen encoder
    # runs in eval mode and draws nothing more from `generator`).
    dropout_seed = int(torch.randint(0, 2**62, (1,), generator=generator)) if train_encoder else 0
    with torch.random.fork_rng(devices=rng_devices(device), enabled=train_encoder):
        if train_encoder:
            seed_dropout(dropout_seed, device)
        try:
            pairs_heldout = make_nsp_pairs(documents, heldout, generator=generator) if heldout else []
            result = NSPTrainResult(model, heldout_pairs=pairs_heldout)
            if train_encoder:
                heldout_cls, heldout_y = _cls_states(model, tokenizer, pairs_heldout, max_length, report, 0.0, 0.1)
            else:
                pool = make_nsp_pairs(documents, pool_size, generator=generator)
                pool_cls, pool_y = _cls_states(model, tokenizer, pool, max_length, report, 0.0, 0.6)
                heldout_cls, heldout_y = _cls_states(model, tokenizer, pairs_heldout, max_length, report, 0.6, 0.8)
            if pairs_heldout:
                result.heldout_before = _head_accuracy(model, heldout_cls, heldout_y)
            order = torch.empty(0, dtype=torch.long)
            for step in range(steps):
                if train_encoder:  # the encoder and the head on fresh pairs
                    pairs = make_nsp_pairs(documents, batch_size, generator=generator)
                    batch = encode_pairs(tokenizer, pairs, max_length)
                    forward, inputs = model.nsp_logits, (batch["input_ids"], batch["attention_mask"],
                                                         batch["token_type_ids"])
                    target = batch["next_sentence_label"].to(device)
                else:  # the head alone on the pool's [CLS] states
                    if len(order) < batch_size:  # a new pass over the pool, in a new order
                        order = torch.cat([order, torch.randperm(len(pool), generator=generator)])
                    index, order = order[:batch_size], order[batch_size:]
                    forward, inputs, target = model.classify, (pool_cls[index],), pool_y[index]  # (B, H), (B,)
                loss = functools.partial(_nsp_loss, target=target, accuracy=result.accuracy)
                (value,), _ = train_step(forward, opt, [Micro(inputs, loss)], lr=lr)
                result.loss.append(value)
                start = 0.1 if train_encoder else 0.8
                report(start + (0.95 - start) * (step + 1) / steps,
                       f"Step {step + 1}/{steps}: batch accuracy {result.accuracy[-1]:.0%}")
            if pairs_heldout:
                if train_encoder:  # the encoder changed: its [CLS] states too
                    heldout_cls, heldout_y = _cls_states(model, tokenizer, pairs_heldout, max_length, report, 0.95, 1.0)
                result.heldout_after = _head_accuracy(model, heldout_cls, heldout_y)
            report(1.0, "Done")
        finally:
            masked_lm.train(was_training)
    return result


def _nsp_loss(logits: torch.Tensor, *, target: torch.Tensor, accuracy: list[float]) -> torch.Tensor:
    """The NSP loss of a batch's scores (B, 2) against its labels (B,); its accuracy, before the update, goes to
    ``accuracy``."""
    accuracy.append(float((logits.detach().argmax(-1) == target).float().mean()))
    return F.cross_entropy(logits.float(), target)


@torch.no_grad()
def _cls_states(model, tokenizer, pairs, max_length, report, start, end, chunk=32):
    """The encoder's [CLS] state (N, H) and label (N,) of every pair, in chunks."""
    device = next(model.parameters()).device
    states, labels = [], []
    for i in range(0, len(pairs), chunk):
        batch = encode_pairs(tokenizer, pairs[i: i + chunk], max_length)
        states.append(model.encode(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])[0][:, 0])
        labels.append(batch["next_sentence_label"].to(device))
        report(start + (end - start) * min(len(pairs), i + chunk) / max(1, len(pairs)),
               f"Encoding sentence pairs: {min(len(pairs), i + chunk)}/{len(pairs)}")
    if not states:
        return None, None
    return torch.cat(states), torch.cat(labels)


@torch.no_grad()
def _head_accuracy(model: BertPretrainingModel, cls: torch.Tensor, labels: torch.Tensor) -> float:
    return float((model.classify(cls).argmax(-1) == labels).float().mean())


def combined_loss_on_pairs(
    model: BertPretrainingModel,
    tokenizer,
    pairs: Sequence[SentencePair],
    config,
    *,
    generator: torch.Generator,
    mlm_weight: float = 1.0,
    nsp_weight: float = 1.0,
    max_length: int = 64,
) -> dict:
    """Mask a batch of pairs (BERT's 80/10/10) and compute MLM + NSP on it: the numbers the page shows.

    Returns ``mlm_loss``, ``nsp_loss``, ``total``, ``mlm_weight``, ``nsp_weight``, ``selected``
    (how many tokens the MLM term covers) and ``is_next_prob`` (one float per pair).
    """
    batch = encode_pairs(tokenizer, pairs, max_length)
    masked = mask_batch(tokenizer, batch, config, generator, trace=False)  # the learner's rule, on the pairs
    with torch.no_grad():
        out = mlm_nsp_loss(model, masked.input_ids, batch["attention_mask"], batch["token_type_ids"], masked.labels,
                           batch["next_sentence_label"], mlm_weight=mlm_weight, nsp_weight=nsp_weight)
    d = out.diagnostics
    return {"mlm_loss": d["mlm_loss"], "nsp_loss": d["nsp_loss"], "total": float(out.loss),
            "mlm_weight": mlm_weight, "nsp_weight": nsp_weight, "selected": d["M"],
            "is_next_prob": d["is_next_prob"].tolist()}

