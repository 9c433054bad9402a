"""Next-sentence prediction: pair statistics, the combined loss against Hugging Face, a short training run."""

import math

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertForPreTraining

from mlm_core.errors import InputError
from mlm_core.data import mask_batch, special_ids
from mlm_core.masking import IGNORE_INDEX, MaskingConfig, mask_tokens
from mlm_core.lessons import nsp
from mlm_core.training import Optimizer, TrainConfig
from mlm_core.training import loop as training_loop
from mlm_core.lessons.nsp import (
    IS_NEXT,
    NOT_NEXT,
    build_pretraining_model,
    combined_loss_on_pairs,
    encode_pairs,
    is_next_probabilities,
    make_nsp_pairs,
    mlm_nsp_loss,
    train_nsp_head,
)

DOCS = [
    ["The cat sat on the mat.", "It fell asleep in the sun.", "Later it woke up hungry."],
    ["Trains leave the station every hour.", "The last one goes at midnight."],
    ["We planted tomatoes in spring.", "By August they were red.", "We made sauce from them.", "It was good."],
    ["The library opens at nine.", "Students queue at the door."],
]


def test_is_next_share_over_10k_pairs():
    pairs = make_nsp_pairs(DOCS, 10_000, generator=torch.Generator().manual_seed(0))
    share = sum(p.is_next for p in pairs) / len(pairs)
    assert 0.48 <= share <= 0.52


def test_pairs_are_what_they_claim():
    pairs = make_nsp_pairs(DOCS, 500, generator=torch.Generator().manual_seed(1))
    where = {s: (d, i) for d, doc in enumerate(DOCS) for i, s in enumerate(doc)}
    for p in pairs:
        d, i = where[p.first]
        assert d == p.document and i < len(DOCS[d]) - 1  # A always has a successor
        if p.is_next:
            assert p.second == DOCS[d][i + 1] and p.label == IS_NEXT
        else:
            assert where[p.second][0] != d and p.label == NOT_NEXT
    again = make_nsp_pairs(DOCS, 500, generator=torch.Generator().manual_seed(1))
    assert again == pairs


def test_pairs_need_two_documents():
    with pytest.raises(InputError):
        make_nsp_pairs([["One.", "Two."]], 4, generator=torch.Generator())
    with pytest.raises(InputError):
        make_nsp_pairs([["One."], ["Two."]], 4, generator=torch.Generator())


def _tiny_mlm(vocab_size):
    config = BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    with torch.random.fork_rng(devices=[]):  # module construction draws from the global RNG
        torch.manual_seed(0)
        return BertForMaskedLM(config).eval()


def test_mlm_nsp_loss_equals_bert_for_pretraining(tokenizer):
    mlm = _tiny_mlm(len(tokenizer))
    model = build_pretraining_model(mlm, generator=torch.Generator().manual_seed(0))
    pairs = make_nsp_pairs(DOCS, 6, generator=torch.Generator().manual_seed(2))
    batch = encode_pairs(tokenizer, pairs)
    labels = torch.full_like(batch["input_ids"], IGNORE_INDEX)
    eligible = batch["special_tokens_mask"] == 0
    labels[:, 2][eligible[:, 2]] = batch["input_ids"][:, 2][eligible[:, 2]]
    labels[0, 3] = batch["input_ids"][0, 3]
    args = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], labels, batch["next_sentence_label"])
    out = mlm_nsp_loss(model, *args)

    reference = BertForPreTraining(mlm.config).eval()
    state = {k: v for k, v in mlm.state_dict().items()}
    state.update({f"bert.pooler.{k}": v for k, v in model.pooler.state_dict().items()})
    state.update({f"cls.seq_relationship.{k}": v for k, v in model.cls.seq_relationship.state_dict().items()})
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    ref = reference(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                    token_type_ids=batch["token_type_ids"], labels=labels,
                    next_sentence_label=batch["next_sentence_label"])
    assert abs(out.loss.item() - ref.loss.item()) < 1e-5
    weighted = mlm_nsp_loss(model, *args, mlm_weight=0.5, nsp_weight=2.0)
    d = weighted.diagnostics
    assert abs(weighted.loss.item() - (0.5 * d["mlm_loss"] + 2.0 * d["nsp_loss"])) < 1e-5
    assert d["is_next_prob"].shape == (6,) and 0 <= d["nsp_accuracy"] <= 1
    # Nothing selected: MLM term 0, not NaN.
    empty = mlm_nsp_loss(model, *args[:3], torch.full_like(labels, IGNORE_INDEX), args[4])
    assert empty.diagnostics["empty"] and torch.isfinite(empty.loss)
    assert abs(empty.loss.item() - empty.diagnostics["nsp_loss"]) < 1e-6


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span", "exact_count"])
def test_pairs_are_masked_with_every_rule(tokenizer, strategy):
    """The Loss page's "MLM + NSP on these pairs" masks with the learner's rule. Whole-word and span masking
    need word ids, which encode_pairs did not give: the page stopped with an InputError for those rules.
    Words of B come after A's; a span never crosses the [SEP] between them; specials are never selected."""
    pairs = make_nsp_pairs(DOCS, 16, generator=torch.Generator().manual_seed(2))
    batch = encode_pairs(tokenizer, pairs)
    words, special = batch["word_ids"], batch["special_tokens_mask"].bool()
    assert bool((words[special] == -1).all()) and bool((words[~special] >= 0).all())
    for row in range(len(pairs)):
        second = batch["token_type_ids"][row].bool() & ~special[row]
        assert int(words[row][second].min()) > int(words[row][~second & ~special[row]].max())
    config = MaskingConfig(strategy=strategy, mlm_probability=0.5)
    masked = mask_batch(tokenizer, batch, config, torch.Generator().manual_seed(0), trace=False)
    assert int(masked.selected.sum()) > 0 and not bool(masked.selected[special].any())
    if strategy == "span":
        traced = mask_tokens(batch["input_ids"], batch["special_tokens_mask"], config,
                             mask_token_id=tokenizer.mask_token_id, vocab_size=len(tokenizer),
                             generator=torch.Generator().manual_seed(0), word_ids=words,
                             special_ids=special_ids(tokenizer), attention_mask=batch["attention_mask"])
        for row in range(len(pairs)):
            span_id = traced.draws["span_id"][row]
            for s in span_id.unique().tolist():
                if s >= 0:
                    assert ((span_id == s).nonzero().flatten().diff() == 1).all(), "a span is contiguous"
    model = build_pretraining_model(_tiny_mlm(len(tokenizer)), generator=torch.Generator().manual_seed(0))
    out = combined_loss_on_pairs(model, tokenizer, pairs[:4], config, generator=torch.Generator().manual_seed(0))
    assert math.isfinite(out["total"])


def test_build_leaves_model_and_global_rng_alone(tokenizer):
    mlm = _tiny_mlm(len(tokenizer))
    before = {k: v.clone() for k, v in mlm.state_dict().items()}
    state = torch.random.get_rng_state()
    model = build_pretraining_model(mlm, generator=torch.Generator().manual_seed(0))
    assert torch.equal(state, torch.random.get_rng_state())
    assert model.cls.predictions is mlm.cls.predictions and model.bert is mlm.bert
    again = build_pretraining_model(mlm, generator=torch.Generator().manual_seed(0))
    assert torch.equal(model.pooler.dense.weight, again.pooler.dense.weight)
    result = train_nsp_head(mlm, tokenizer, DOCS, generator=torch.Generator().manual_seed(0), steps=3,
                            batch_size=8, pool_size=16, heldout=8)
    for k, v in mlm.state_dict().items():
        assert torch.equal(v, before[k]), k


def test_train_nsp_head_reports_progress(tokenizer):
    mlm = _tiny_mlm(len(tokenizer))
    progress = []
    result = train_nsp_head(mlm, tokenizer, DOCS, generator=torch.Generator().manual_seed(0), steps=12,
                            batch_size=16, pool_size=64, heldout=32, lr=1e-2,
                            on_progress=lambda f, text: progress.append(f))
    assert len(result.accuracy) == 12 and len(result.loss) == 12
    assert all(0 <= a <= 1 for a in result.accuracy) and 0 <= result.heldout_after <= 1
    assert progress[-1] == 1.0 and progress == sorted(progress)
    assert result.loss[-1] < result.loss[0]  # it learns something, at least on its own pool
    assert len(result.records()) == 12 and "accuracy_smoothed" in result.records()[0]
    probs = is_next_probabilities(result.model, tokenizer, result.heldout_pairs[:4])
    assert len(probs) == 4 and all(0 <= p <= 1 for p in probs)
    fine = train_nsp_head(mlm, tokenizer, DOCS, generator=torch.Generator().manual_seed(0), steps=2,
                          batch_size=4, heldout=4, train_encoder=True)
    assert len(fine.accuracy) == 2 and fine.model.bert is not mlm.bert


def test_nsp_steps_through_the_training_loops_step(tokenizer, monkeypatch):
    """One loop (the house plan): every NSP step is training.train_step (forward, loss, backward, clip, step) with
    the NSP loss given to it, on the loop's Optimizer with its clipping rule."""
    steps, clipped = [], []
    real_step, real_clip = nsp.train_step, Optimizer.clip

    def step_spy(forward, opt, micro, **kwargs):
        steps.append((len(micro), kwargs.get("skip", False)))
        return real_step(forward, opt, micro, **kwargs)

    def clip_spy(self):
        clipped.append(self.cfg.max_grad_norm)
        return real_clip(self)

    wrapped = []  # the masked-LM forward a run's set-up builds: NSP steps its own classifier and never needs one
    monkeypatch.setattr(nsp, "train_step", step_spy)
    monkeypatch.setattr(Optimizer, "clip", clip_spy)
    monkeypatch.setattr(training_loop, "GatheredMaskedLM", lambda *a, **k: wrapped.append(a))
    for train_encoder in (False, True):
        steps.clear(), clipped.clear()
        result = train_nsp_head(_tiny_mlm(len(tokenizer)), tokenizer, DOCS, generator=torch.Generator().manual_seed(0),
                                steps=3, batch_size=4, pool_size=8, heldout=4, train_encoder=train_encoder)
        assert steps == [(1, False)] * 3 and clipped == [TrainConfig().max_grad_norm] * 3
        assert len(result.accuracy) == len(result.loss) == 3
    assert wrapped == []


def test_fine_tuning_the_encoder_repeats_for_a_seed_and_leaves_the_global_rng_alone(tokenizer):
    """Dropout in the fine-tuned encoder is seeded from the run's generator (fork_rng): the same seed, the same run."""
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.3)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        mlm = BertForMaskedLM(config).eval()

    def run(seed):
        return train_nsp_head(mlm, tokenizer, DOCS, generator=torch.Generator().manual_seed(seed),
                              steps=3, batch_size=4, heldout=4, train_encoder=True).loss

    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = run(0)
    assert torch.equal(torch.rand(1), expected_next)  # the caller's global RNG state came back
    torch.manual_seed(999)  # another global state: the run does not depend on it
    assert run(0) == first
