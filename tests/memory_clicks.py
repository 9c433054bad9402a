"""The costliest click of every page at its widest allowed settings, for tests/test_memory_budget.py.

Each click runs in a process of its own (``python -m tests.memory_clicks NAME`` prints one JSON line), as on a
fresh server: the model is loaded, the process's resident high-water mark is reset, and the click runs once, at
its widest settings and with the page's own repeats, in a thread of its own as Streamlit runs a page
(``mlm_core.measure.peak_rss_above``): what it needs the first time (kernels, caches, lazy imports) counts. Widest means what a page or a link allows: the largest sliders,
a shared link's masking rule p = 1 (every token selected), the largest K, the longest text. Where a lesson
refuses settings above one click's budget (``costs.loss_paths_bytes``, ``costs.train_step_bytes``), the
widest it still accepts is measured, and the estimate is reported beside the measurement.

Most clicks run on the bundled default model (the one a class uses, and the Efficiency lessons' point
depends on it); the ``*_big_vocab`` ones on a tiny BERT with XLM-R's 250,002-token vocabulary, where the
head's (rows, V) scores dominate and their size is known from the shapes.
"""

from __future__ import annotations

import gc
import json
import sys
import threading

import torch

from mlm_core.bundled import workshop_sentences
from mlm_core.masking import IGNORE_INDEX, MaskingConfig

EVERY_TOKEN = MaskingConfig(mlm_probability=1.0, mask_replace_prob=1.0, random_replace_prob=0.0)  # a link may ask it
EFFICIENCY_SIZES = [(b, t) for b in (16, 8, 4, 2, 1) for t in (128, 64, 32, 16)]  # the page's sliders, widest first
BIG_VOCAB = 250_002  # xlm-roberta's
PAGE_REPEATS = 5  # the Efficiency page's "Timed repeats" at its widest


def default_model():
    from mlm_core.models import load_masked_lm

    return load_masked_lm(None, device="cpu")


def big_vocab_model():
    from transformers import BertConfig, BertForMaskedLM

    from mlm_core.bundled import load_default_tokenizer

    config = BertConfig(vocab_size=BIG_VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = BertForMaskedLM(config).eval()
    model.requires_grad_(False)
    return model, load_default_tokenizer()  # its ids are a subset of the model's: every sentence encodes


def long_texts(n: int, words: int = 120) -> list[str]:
    """n texts, each longer than the pages' 64- or 128-token limits."""
    sentences = workshop_sentences()
    return [" ".join(sentences[(i * 5 + j) % len(sentences)] for j in range(words // 10)) for i in range(n)]


def widest(fits) -> tuple[int, int]:
    """The largest (batch, sequence) of the Efficiency page's sliders that the lesson's own estimate admits."""
    return next((b, t) for b, t in EFFICIENCY_SIZES if fits(b, t))


# ------------------------------------------------------------------------------------------- the clicks
def eff_paths(model, tok, small):
    from mlm_core.costs import loss_paths_bytes
    from mlm_core.lessons.efficiency import loss_paths
    from mlm_core.measure import click_budget_bytes

    V = model.get_output_embeddings().weight.shape[0]
    b, t = (1, 16) if small else widest(lambda b, t: loss_paths_bytes(b, t, V) <= click_budget_bytes())
    loss_paths(model, tok, batch_size=b, seq_len=t, repeats=PAGE_REPEATS)
    return {"B": b, "T": t, "estimate": loss_paths_bytes(b, t, V)}


def eff_paths_loop(model, tok, small):
    """The widest batch on which the page still runs the loop (M ≤ LOOP_MAX_ROWS selected rows)."""
    from mlm_core.lessons.efficiency import loss_paths

    b, t = (1, 16) if small else (16, 64)
    rows = loss_paths(model, tok, batch_size=b, seq_len=t, repeats=PAGE_REPEATS)
    assert small or rows[0]["path"] == "loop", rows
    return {"B": b, "T": t, "M": rows[0]["masked"]}


def eff_loop_at_its_bound(model, tok, small):
    """The loop at LOOP_MAX_ROWS rows exactly (the bound the library allows), measured as loss_paths measures it."""
    from mlm_core.head import encoder_states
    from mlm_core.lessons.efficiency import LOOP_MAX_ROWS, masked_batch, head_params, split_head, loss_path_functions
    from mlm_core.measure import peak_memory_bytes

    b, t = (1, 16) if small else (16, 128)
    ids, mask, labels = masked_batch(tok, b, t, 0, mask_rate=1.0)
    keep = (labels != IGNORE_INDEX).reshape(-1).nonzero().squeeze(1)[: (4 if small else LOOP_MAX_ROWS)]
    trimmed = torch.full_like(labels.reshape(-1), IGNORE_INDEX)
    trimmed[keep] = labels.reshape(-1)[keep]
    transform, decoder = split_head(model)
    with torch.no_grad():
        states = encoder_states(model, ids, mask).float()
    loop = loss_path_functions(transform, decoder, states, trimmed.reshape(labels.shape), head_params(model))["loop"]
    loop()
    peak_memory_bytes(loop)
    return {"M": int(keep.numel())}


def eff_sweep(model, tok, small):
    from mlm_core.lessons.efficiency import loop_vs_vectorised

    if small:
        loop_vs_vectorised(rows=(2,), vocab_sizes=(10,), repeats=1)
    else:
        loop_vs_vectorised(vocab_sizes=(1_000, 30_522), repeats=PAGE_REPEATS)
    return {}


def eff_steps(model, tok, small):
    from mlm_core.lessons.efficiency import step_bytes, amp_and_checkpointing
    from mlm_core.measure import click_budget_bytes

    b, t = (1, 16) if small else widest(lambda b, t: step_bytes(model, b, t) <= click_budget_bytes())
    amp_and_checkpointing(model, tok, batch_size=b, seq_len=t, repeats=1 if small else PAGE_REPEATS)
    return {"B": b, "T": t, "estimate": step_bytes(model, b, t)}


def eff_profile(model, tok, small):
    from mlm_core.lessons.efficiency import step_bytes, step_time_breakdown
    from mlm_core.measure import click_budget_bytes

    b, t = (1, 16) if small else widest(lambda b, t: step_bytes(model, b, t) <= click_budget_bytes())
    for amp in ("off", "bf16"):
        step_time_breakdown(model, tok, amp=amp, batch_size=b, seq_len=t)
    return {"B": b, "T": t, "estimate": step_bytes(model, b, t)}


def pred_compare(model, tok, small):
    """Predictions, "Compare on many sentences": 256 sentences of up to 64 tokens, every token selected."""
    from mlm_core import seeds
    from mlm_core.data import encode, mask_batch
    from mlm_core.lessons.predictions import summarize_by_decision
    from mlm_core.predict import predict_masked

    texts = workshop_sentences()[: 4 if small else 256]
    batch = encode(tok, texts, max_length=64)
    masked = mask_batch(tok, batch, EVERY_TOKEN, seeds.generator(0), trace=False)
    found = predict_masked(model, tok, masked.input_ids, batch.attention_mask, masked.labels, k=1,
                           decisions=masked.decisions)
    summarize_by_decision(found)
    return {"M": len(found.positions)}


def pred_sentence(model, tok, small):
    """Predictions on one 128-token sentence: every token hidden, the largest k, the PLL and every fill mode."""
    from mlm_core.data import encode
    from mlm_core.predict import fill_masks, predict_masked, pseudo_log_likelihood

    enc = encode(tok, long_texts(1)[0], max_length=16 if small else 128)
    ids, mask = enc.input_ids[0], enc.attention_mask[0]
    labels = torch.where(enc.special_tokens_mask[0].bool(), IGNORE_INDEX, ids)
    predict_masked(model, tok, ids, mask, labels, k=10)
    pseudo_log_likelihood(model, tok, ids, mask)
    positions = [i for i in range(1, ids.numel() - 1)][:8]
    for mode in ("independent", "easy_first", "mask_predict"):
        fill_masks(model, tok, ids, mask, positions, mode=mode, k=3, iterations=10)
    return {"T": int(ids.numel())}


def inside_lens_profile(model, tok, small):
    """Inside the model, the logit lens over 128 workshop sentences, masked by a link's rule p = 1."""
    from mlm_core.lessons.inside import lens_profile_on_texts

    profile = lens_profile_on_texts(model, tok, workshop_sentences()[: 4 if small else 128], seed=0,
                                    config=EVERY_TOKEN)
    return {"M": profile.positions}


def inside_views(model, tok, small):
    """Inside the model at 64 tokens: attention, the lens, gradient × input, leave-one-out, head patterns and
    the agreement over 24 sentences."""
    from mlm_core.data import encode
    from mlm_core.inside import attention_from, gradient_saliency, leave_one_out, logit_lens
    from mlm_core.lessons.inside import agreement_over_texts, measure_head_patterns

    enc = encode(tok, long_texts(1)[0], max_length=16 if small else 64)
    ids = enc.input_ids[0].clone()
    position = ids.numel() // 2
    true_id = int(ids[position])
    ids[position] = tok.mask_token_id
    attention_from(model, tok, ids, None, position)
    logit_lens(model, tok, ids, None, position, true_id, k=10)
    gradient_saliency(model, tok, ids, None, position, true_id)
    leave_one_out(model, tok, ids, None, position, true_id)
    measure_head_patterns(model, tok, encode(tok, workshop_sentences()[: 2 if small else 32], max_length=64))
    agreement_over_texts(model, tok, workshop_sentences()[: 2 if small else 24])
    return {"T": int(ids.numel())}


def loss_page(model, tok, small):
    """The Loss page (and the Bug museum's batch): 8 long sentences, every token selected, K = V from the softmax
    sampler, the gradient view and the K sweep up to V."""
    from mlm_core import seeds
    from mlm_core.lessons.loss_lab import LossSettings, batch_losses, loss_batch
    from mlm_core.loss_registry import logit_gradients
    from mlm_core.sampled_softmax import SampledSoftmaxConfig, sampled_softmax_sweep, sweep_ks

    from mlm_core.errors import InputError

    for n in range(2 if small else 8, 0, -1):  # the most sentences the page accepts (it refuses a batch over budget)
        try:
            batch = loss_batch(model, tok, long_texts(n), EVERY_TOKEN, seed=0)
            break
        except InputError:
            continue
    V = batch.weight.shape[0]
    widest_k = SampledSoftmaxConfig(num_sampled=V, sampler="softmax", replacement=True)
    outputs = batch_losses(batch, LossSettings(sampled=widest_k))
    logit_gradients(batch.logits, batch.targets, 0, outputs)  # every variant's, as the page draws them
    sampled_softmax_sweep(batch.hidden, batch.weight, batch.bias, batch.targets, ks=sweep_ks(V), config=widest_k,
                          counts=batch.counts, generator=seeds.generator(0, "sweep"))  # the page's draws
    return {"M": int(batch.targets.numel())}


def masking_corpus(model, tok, small):
    """The Masking page's "Mask the corpus": 100,000 tokens, whole-word (span masking stops at 20,000)."""
    from mlm_core.lessons.masking_view import masking_statistics

    masking_statistics(tok, workshop_sentences(), MaskingConfig(strategy="whole_word"),
                       target_tokens=1_000 if small else 100_000, seed=0)
    return {}


CLICKS = {
    "eff_paths": (default_model, eff_paths),
    "eff_paths_loop": (default_model, eff_paths_loop),
    "eff_loop_at_its_bound": (default_model, eff_loop_at_its_bound),
    "eff_sweep": (default_model, eff_sweep),
    "eff_steps": (default_model, eff_steps),
    "eff_profile": (default_model, eff_profile),
    "pred_compare": (default_model, pred_compare),
    "pred_compare_big_vocab": (big_vocab_model, pred_compare),
    "pred_sentence": (default_model, pred_sentence),
    "pred_sentence_big_vocab": (big_vocab_model, pred_sentence),
    "inside_lens_profile": (default_model, inside_lens_profile),
    "inside_lens_profile_big_vocab": (big_vocab_model, inside_lens_profile),
    "inside_views": (default_model, inside_views),
    "loss_page": (default_model, loss_page),
    "loss_page_big_vocab": (big_vocab_model, loss_page),
    "masking_corpus": (default_model, masking_corpus),
}


def run(name: str) -> dict:
    """The click on a fresh server: the model loaded, nothing else run yet (the first click pays for the kernels,
    caches and lazy imports it needs), in a thread of its own as Streamlit runs a page."""
    from mlm_core.measure import peak_rss_above

    torch.set_num_threads(1)
    load, click = CLICKS[name]
    model, tok = load()
    gc.collect()

    def in_a_thread():
        out = {}

        def work():
            try:
                out["info"] = click(model, tok, False)
            except BaseException as exc:  # noqa: BLE001 - re-raised below, in the measuring thread
                out["error"] = exc
        thread = threading.Thread(target=work, name="click")
        thread.start()
        thread.join()
        if "error" in out:
            raise out["error"]
        return out["info"]

    info, peak = peak_rss_above(in_a_thread)
    return {"click": name, "peak_bytes": peak, **info}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1])))
