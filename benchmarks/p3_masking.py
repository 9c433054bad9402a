"""P3: masking throughput: ``mask_tokens`` (trace on and off) against Hugging Face's collator.

Same batches of token ids (B, T) from the workshop corpus, same special-tokens masks, BERT's
15% and 80/10/10, each side with its own seeded ``torch.Generator``:

- ours: ``mlm_core.masking.mask_tokens(..., trace=True)`` (every decision and the draws behind it
  kept for the Masking page) and ``trace=False``;
- Hugging Face: ``DataCollatorForLanguageModeling(tokenizer, seed=0).torch_mask_tokens(ids.clone(),
  special_tokens_mask)``: the masking step of its collator, on a copy because it edits its input
  in place (ours returns new tensors, so the copy is part of both costs).

Target: ours with the trace on at least as fast (≥ 1.0×).

Run: ``python -m benchmarks.p3_masking`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import os
import time

from benchmarks._common import Result, Target, cli, compare, median, paired_ratio

import torch  # noqa: E402

TARGET = 1.0


def run(quick: bool = False, repeats: int = 30, batch_size: int = 32, seq_len: int = 128,
        batches: int = 20) -> Result:
    from transformers import DataCollatorForLanguageModeling

    from mlm_core.bundled import load_default_tokenizer, workshop_sentences
    from mlm_core.data import encode, special_ids
    from mlm_core.masking import MaskingConfig, mask_tokens

    if quick:
        repeats, batches = 2, 4
    start = time.perf_counter()
    tokenizer = load_default_tokenizer()
    sentences = workshop_sentences()
    per_row = max(4, seq_len // 6)
    data = []
    for b in range(batches):
        texts = [" ".join(sentences[(b * batch_size * per_row + i * per_row + j) % len(sentences)]
                          for j in range(per_row)) for i in range(batch_size)]
        enc = encode(tokenizer, texts, max_length=seq_len)
        data.append((enc.input_ids, enc.special_tokens_mask))
    config = MaskingConfig()  # BERT: 15%, 80/10/10
    ids_special = special_ids(tokenizer)
    vocab = len(tokenizer)
    mask_id = tokenizer.mask_token_id
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=0)
    collator.create_rng("pt")
    g_on, g_off = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)

    def ours(trace: bool, g: torch.Generator):
        def fn():
            for ids, special in data:
                mask_tokens(ids, special, config, mask_token_id=mask_id, vocab_size=vocab, generator=g,
                            special_ids=ids_special, trace=trace)
        return fn

    def hf():
        for ids, special in data:
            collator.torch_mask_tokens(ids.clone(), special_tokens_mask=special)

    tokens = batches * batch_size * seq_len
    threads = torch.get_num_threads()
    rows = []
    # Default threads (what the benchmark's target is on), then one thread, as in a DataLoader worker.
    other = (os.cpu_count() or 1) if threads == 1 else 1
    for n_threads in dict.fromkeys((threads, other)):
        torch.set_num_threads(n_threads)
        try:
            times = compare({"ours_trace": ours(True, g_on), "ours_notrace": ours(False, g_off), "hf": hf},
                            warmup=1, repeats=repeats)
        finally:
            torch.set_num_threads(threads)
        for name, label in (("ours_trace", "mask_tokens, trace on"), ("ours_notrace", "mask_tokens, trace off"),
                            ("hf", "HF DataCollatorForLanguageModeling")):
            t = median(times[name])
            rows.append({"masking": label, "threads": n_threads, "ms_per_batch": t / batches * 1e3,
                         "tokens_per_s": tokens / t, "vs_hf_x": paired_ratio(times["hf"], times[name]),
                         "times_ms": [x * 1e3 for x in times[name]]})
    return Result(
        name="p3_masking",
        title="P3 — masking throughput: mask_tokens vs Hugging Face's collator (same batches)",
        config={"B": batch_size, "T": seq_len, "batches": batches, "repeats": repeats, "quick": quick,
                "threads": torch.get_num_threads()},
        rows=rows,
        columns=["masking", "threads", "ms_per_batch", "tokens_per_s", "vs_hf_x"],
        targets=[Target("P3 throughput ratio, trace on", rows[0]["vs_hf_x"], ">=", TARGET,
                        note=f"{threads} thread{'s' if threads != 1 else ''}"),
                 Target("P3 throughput ratio, trace off (reported)", rows[1]["vs_hf_x"], ">=", TARGET,
                        note=f"{threads} thread{'s' if threads != 1 else ''}")]
        + ([Target(f"P3 throughput ratio, trace on, {rows[3]['threads']} threads (reported)", rows[3]["vs_hf_x"],
                   ">=", TARGET)] if len(rows) > 3 else []),
        notes=["vs_hf_x = median over rounds of hf time / our time: above 1 means ours is faster"],
        seconds=time.perf_counter() - start,
    )


if __name__ == "__main__":
    cli(run, __doc__.splitlines()[0])
