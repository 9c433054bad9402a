"""mlm_core.predict: predictions are right on hand-made heads, filling and re-masking match direct
implementations, pseudo-log-likelihood equals masking each token by hand."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlm_core.errors import InputError
from mlm_core.head import masked_lm_logits
from mlm_core.masking import IGNORE_INDEX, Decision
from mlm_core.lessons.predictions import decision_comparison_text, default_blank, summarize_by_decision
from mlm_core.predict import (
    fill_masks,
    mask_predict_schedule,
    predict_masked,
    pseudo_log_likelihood,
    typed_blanks,
    with_mask_token,
)


def test_predictions_probabilities_loss_and_entropy(tiny_mlms):
    model = tiny_mlms.model("roberta")
    input_ids, attention_mask, labels = tiny_mlms.batch(seed=3)
    tokenizer = _IdTokenizer()
    result = predict_masked(model, tokenizer, input_ids, attention_mask, labels, k=tiny_mlms.VOCAB)
    logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    per_token = F.cross_entropy(logits.float(), targets, reduction="none")
    assert len(result.positions) == len(targets)
    for p, loss, row_logits in zip(result.positions, per_token.tolist(), logits):
        assert math.isclose(sum(p.top_probs), 1.0, abs_tol=1e-5)  # k = V: the whole distribution
        assert list(p.top_probs) == sorted(p.top_probs, reverse=True)
        assert p.loss == pytest.approx(loss, abs=1e-5)
        assert p.true_prob == pytest.approx(math.exp(-loss), rel=1e-5)
        expected_entropy = torch.distributions.Categorical(logits=row_logits.float()).entropy().item()
        assert p.entropy == pytest.approx(expected_entropy, abs=1e-4)
        assert p.top_ids[p.true_rank - 1] == p.true_id  # with k = V the rank indexes the top list
        assert labels[p.row, p.position] == p.true_id and input_ids[p.row, p.position] == p.seen_id
    assert result.mean_loss == pytest.approx(per_token.mean().item(), abs=1e-5)


def _bias_only_bert(tiny_mlms, bias: torch.Tensor):
    """A BERT whose logits are exactly ``bias`` at every position (the head's transform outputs 0)."""
    model = tiny_mlms.model("bert")
    with torch.no_grad():
        ln = model.cls.predictions.transform.LayerNorm
        ln.weight.zero_()
        ln.bias.zero_()
        model.cls.predictions.bias.copy_(bias)
    return model


class _IdTokenizer:
    """Token i is written "t{i}"; ids 0-2 are special ([PAD], [CLS], [SEP]) and 3 is [MASK]."""

    all_special_ids = [0, 1, 2, 3]
    mask_token_id = 3
    mask_token = "[MASK]"

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, int):
            return f"t{ids}"
        return [f"t{i}" for i in ids]

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"t{i}" for i in ids if not (skip_special_tokens and i in self.all_special_ids))


def test_true_rank_and_probability_on_a_hand_made_head(tiny_mlms):
    bias = torch.zeros(tiny_mlms.VOCAB)
    bias[10], bias[20], bias[30] = 5.0, 4.0, 3.0  # the model's guesses: 10, then 20, then 30
    model = _bias_only_bert(tiny_mlms, bias)
    input_ids = torch.tensor([[1, 40, 41, 42, 43, 2]])
    labels = torch.tensor([[IGNORE_INDEX, 10, 30, 50, IGNORE_INDEX, IGNORE_INDEX]])
    decisions = torch.tensor([[0, Decision.MASK, Decision.RANDOM, Decision.UNCHANGED, 0, 0]])
    result = predict_masked(model, _IdTokenizer(), input_ids, torch.ones_like(input_ids), labels, k=2,
                            decisions=decisions)
    p10, p30, p50 = result.positions
    assert (p10.true_rank, p30.true_rank, p50.true_rank) == (1, 3, 4)  # 50 ties with all the zeros: best rank
    assert p10.top_ids == (10, 20) and p10.top_tokens == ("t10", "t20")
    probs = bias.softmax(-1)
    assert p30.true_prob == pytest.approx(probs[30].item(), rel=1e-5)
    assert p10.correct and not p30.correct
    assert (p10.decision, p30.decision, p50.decision) == (Decision.MASK, Decision.RANDOM, Decision.UNCHANGED)
    summary = {row["decision"]: row for row in summarize_by_decision(result)}
    assert summary["MASK"]["count"] == 1 and summary["MASK"]["top1_accuracy"] == 1.0
    assert summary["RANDOM"]["mean_true_prob"] == pytest.approx(probs[30].item(), rel=1e-5)
    records = result.records()
    assert records[0]["decision"] == "MASK" and records[0]["top_tokens"] == "t10 t20"


def test_fill_masks_independent_and_easy_first(tiny_mlms):
    bias = torch.zeros(tiny_mlms.VOCAB)
    bias[0], bias[3], bias[10] = 9.0, 8.0, 5.0  # specials score highest but must never be chosen
    model = _bias_only_bert(tiny_mlms, bias)
    tokenizer = _IdTokenizer()
    sentence = torch.tensor([1, 40, 41, 42, 43, 2])  # [CLS] ... [SEP]
    before = sentence.clone()
    one_pass = fill_masks(model, tokenizer, sentence, None, [3, 1], mode="independent", k=3)
    assert torch.equal(sentence, before)  # the caller's tensor is never edited
    assert one_pass.order == (1, 3)
    assert one_pass.ids == (1, 10, 41, 10, 43, 2)
    assert one_pass.steps[-1].ids == one_pass.ids and one_pass.text == "t10 t41 t10 t43"
    assert all(s.token_id not in tokenizer.all_special_ids for s in one_pass.steps)

    model = tiny_mlms.model("bert")  # real context dependence: the iterative order follows confidence
    one_pass = fill_masks(model, tokenizer, sentence, None, [1, 2, 4], mode="independent")
    steps = fill_masks(model, tokenizer, sentence, None, [1, 2, 4], mode="easy_first")
    assert sorted(steps.order) == [1, 2, 4] and len(steps.steps) == 3
    most_sure = max(one_pass.steps, key=lambda s: s.prob)  # the iterative first pass is the one pass
    assert steps.order[0] == most_sure.position and steps.steps[0].token_id == most_sure.token_id
    for i, step in enumerate(steps.steps):  # each step's sequence has exactly the positions filled so far
        filled = set(steps.order[: i + 1])
        assert all((step.ids[p] == tokenizer.mask_token_id) == (p not in filled) for p in (1, 2, 4))
    with pytest.raises(InputError):
        fill_masks(model, tokenizer, sentence, None, [0], mode="easy_first")  # [CLS]
    with pytest.raises(InputError):
        fill_masks(model, tokenizer, sentence, None, [1], mode="sideways")
    with pytest.raises(InputError):
        fill_masks(model, tokenizer, sentence, None, [], mode="independent")


def _remask_reference(model, tokenizer, sentence, targets, iterations):
    """Mask-Predict written out directly from Ghazvininejad et al. 2019, §3.2, for comparison."""
    ids = sentence.clone()
    ids[targets] = tokenizer.mask_token_id
    special = torch.tensor(tokenizer.all_special_ids)
    tokens, probs, history = {}, {}, []

    def predict(todo):
        with torch.no_grad():
            logits = model(input_ids=ids[None]).logits[0].float()  # (T, V) every position, then pick
        logits[:, special] = float("-inf")
        p = logits.softmax(-1)
        for q in todo:
            probs[q], tokens[q] = (float(v) for v in p[q].max(-1))
            tokens[q] = int(tokens[q])
            ids[q] = tokens[q]

    predict(targets)
    history.append(tuple(targets))
    n = len(targets)
    for t in range(1, iterations):
        m = n * (iterations - t) // iterations
        if m == 0:
            break
        todo = sorted(sorted(targets, key=lambda q: (probs[q], q))[:m])
        ids[todo] = tokenizer.mask_token_id
        predict(todo)
        history.append(tuple(todo))
    return ids, probs, history


def test_mask_predict_re_masks_the_least_sure_and_matches_a_direct_implementation(tiny_mlms):
    model = tiny_mlms.model("bert", seed=3)
    tokenizer = _IdTokenizer()
    sentence = torch.tensor([1, 40, 41, 42, 43, 44, 45, 46, 2])
    targets = [1, 2, 3, 5, 6, 7]
    for iterations in (1, 2, 3, 4, 10):
        result = fill_masks(model, tokenizer, sentence, None, targets, mode="mask_predict", iterations=iterations)
        ids, probs, history = _remask_reference(model, tokenizer, sentence, targets, iterations)
        assert result.ids == tuple(ids.tolist())
        assert result.rounds == tuple(history)
        assert [len(r) for r in result.rounds[1:]] == [m for m in mask_predict_schedule(6, iterations) if m]
        for step in result.steps:
            assert step.prob == pytest.approx(probs[step.position], rel=1e-5)
        for before, done in zip(result.round_probs, result.rounds[1:]):  # the re-masked were the least sure
            least = sorted(range(len(targets)), key=lambda i: (before[i], targets[i]))[: len(done)]
            assert sorted(targets[i] for i in least) == list(done)
    one = fill_masks(model, tokenizer, sentence, None, targets, mode="mask_predict", iterations=1)
    independent = fill_masks(model, tokenizer, sentence, None, targets, mode="independent")
    assert one.ids == independent.ids  # T = 1 is one pass
    assert mask_predict_schedule(6, 3) == [4, 2]


def test_pseudo_log_likelihood_equals_masking_each_token_by_hand(tiny_mlms):
    """Salazar et al. 2020: PLL = sum over tokens of log p(token | the sentence with it masked)."""
    model = tiny_mlms.model("bert", seed=1)
    tokenizer = _IdTokenizer()
    sentence = torch.tensor([1, 40, 41, 3, 42, 43, 2, 0, 0])  # a typed [MASK] (3) and padding (0) are skipped
    attention = torch.tensor([1, 1, 1, 1, 1, 1, 1, 0, 0])
    score = pseudo_log_likelihood(model, tokenizer, sentence, attention, batch_size=2)  # 2 per batch
    assert score.positions == (1, 2, 4, 5)
    for position, value in zip(score.positions, score.log_probs):
        ids = sentence.clone()
        ids[position] = tokenizer.mask_token_id
        with torch.no_grad():
            logits = model(input_ids=ids[None], attention_mask=attention[None]).logits[0, position]  # (V,)
        direct = float(F.log_softmax(logits.float(), -1)[int(sentence[position])])
        assert value == pytest.approx(direct, abs=1e-5)
    assert score.total == pytest.approx(sum(score.log_probs))
    assert score.mean_loss == pytest.approx(-score.total / 4)
    assert score.pseudo_perplexity == pytest.approx(math.exp(score.mean_loss))
    again = pseudo_log_likelihood(model, tokenizer, sentence, attention)
    assert again.log_probs == pytest.approx(score.log_probs, abs=1e-6)  # no draw: the same every time


def test_typed_blanks_and_the_first_word_to_hide(tokenizer):
    from mlm_core.data import encode

    class RobertaLike:
        mask_token = "<mask>"

    assert with_mask_token(RobertaLike(), "a [MASK] b [mask] c <MASK>") == "a <mask> b <mask> c <mask>"
    text = with_mask_token(tokenizer, "The <mask> sat on the [mask].")
    enc = encode(tokenizer, text)
    assert typed_blanks(tokenizer, enc.input_ids[0]) == [2, 6]
    for sentence, expected in (("The cat sat on the mat.", {"cat", "sat", "mat"}),
                               ("It is what it is, and so it goes.", {"goes"}),
                               ("Hello, world!", {"hello", "world"}),
                               ("... !!! ,", {".", "!", ","})):
        enc = encode(tokenizer, sentence)
        position = default_blank(enc.tokens[0], enc.word_ids[0].tolist())
        assert enc.tokens[0][position] in expected, sentence
    assert default_blank(["[CLS]", "[SEP]"], [-1, -1]) is None


def test_decision_comparison_text_follows_the_numbers():
    def row(name, mean, sem, n):
        return {"decision": name, "count": n, "mean_true_prob": mean, "sem_true_prob": sem}

    tie = decision_comparison_text([row("MASK", 0.20, 0.02, 80), row("RANDOM", 0.22, 0.05, 10),
                                           row("UNCHANGED", 0.90, 0.03, 10)], 64)
    assert "**unchanged** than at **random**" in tie
    assert "**random** and **[MASK]** cannot be told apart" in tie
    assert "random 0.22 ± 0.05 (n = 10)" in tie
    clear = decision_comparison_text([row("MASK", 0.40, 0.01, 80), row("RANDOM", 0.05, 0.01, 10),
                                             row("UNCHANGED", 0.90, 0.01, 10)], 64)
    assert "surer at **[MASK]** than at **random**" in clear


def test_many_selected_positions_are_predicted_a_few_sentences_at_a_time(tiny_mlms, monkeypatch):
    """Issue 29 item 1: "compare on many sentences" at a link's p = 1 held (M, V) scores for 16,000 rows (2 GB in
    fp32, five such tensors). predict_masked now goes a few sentences at a time (head.row_groups), with the same
    predictions, rows and order."""
    import mlm_core.predict as predict

    for arch in ("bert", "electra"):  # a gathered head and one scored at every position
        model = tiny_mlms.model(arch)
        input_ids, attention_mask, labels = tiny_mlms.batch(rate=0.9)
        decisions = torch.where(labels != IGNORE_INDEX, int(Decision.MASK), int(Decision.NOT_SELECTED))
        tokenizer = _Ids()
        whole = predict_masked(model, tokenizer, input_ids, attention_mask, labels, k=3, decisions=decisions)
        monkeypatch.setattr(predict, "row_groups", lambda lab, vocab, gathered=True: [slice(i, i + 1) for i in range(lab.shape[0])])
        split = predict_masked(model, tokenizer, input_ids, attention_mask, labels, k=3, decisions=decisions)
        monkeypatch.undo()
        assert [(p.row, p.position, p.top_ids, p.true_rank, p.decision) for p in split.positions] == \
            [(p.row, p.position, p.top_ids, p.true_rank, p.decision) for p in whole.positions]
        assert split.mean_loss == pytest.approx(whole.mean_loss, abs=1e-5) and split.vocab_size == whole.vocab_size


def test_row_groups_bound_the_scores_a_prediction_holds():
    from mlm_core.head import row_groups

    labels = torch.full((6, 5), IGNORE_INDEX)
    labels[:, :3] = 1  # three selected positions per row
    groups = row_groups(labels, vocab_size=100, budget=700)
    assert groups == [slice(0, 2), slice(2, 4), slice(4, 6)]  # 2 rows × 3 × 100 = 600 ≤ 700
    assert row_groups(labels, vocab_size=1000, budget=10) == [slice(i, i + 1) for i in range(6)]  # one row each


class _Ids:
    """A stand-in tokenizer for tiny random vocabularies: ids shown as text."""

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids] if isinstance(ids, (list, tuple)) else str(ids)
