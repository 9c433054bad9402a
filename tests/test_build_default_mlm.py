"""The default-model build (scripts/build_default_mlm.py): it trains through mlm_core.training, its
batches depend on the seed and the step only, and its held-out numbers are training.evaluate's.

Tiny random BERT in place of the 22M-parameter encoder, workshop corpus only, no cloze sets.
"""

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from mlm_core import default_model as dm
from mlm_core import training
from mlm_core.head import masked_lm_logits
from mlm_core.models import tiny_random_masked_lm
from scripts import build_default_mlm as build
from scripts import default_mlm_data as data


def _run(tmp_path, tokenizer, monkeypatch, *extra):
    """Run the build's main on the tiny model; returns the (seed, lr) of every TrainStep call and the log."""
    calls = []
    real_step = training.TrainStep.__call__

    def spy(self, input_ids, attention_mask, labels, **kwargs):
        calls.append((kwargs["seed"], kwargs["lr"], [g["lr"] for g in self.opt.optimizer.param_groups]))
        loss = real_step(self, input_ids, attention_mask, labels, **kwargs)
        calls[-1] += ([g["lr"] for g in self.opt.optimizer.param_groups],)
        return loss

    monkeypatch.setattr(training.TrainStep, "__call__", spy)
    monkeypatch.setattr(dm, "build_untrained", lambda: tiny_random_masked_lm(tokenizer)[0])
    missing = str(tmp_path / "none.tsv")
    argv = ["--out", str(tmp_path / "out"), "--ckpt-dir", str(tmp_path / "ckpt"), "--batch", "2", "--seq-len", "32",
            "--warmup", "1", "--threads", "1", "--mix", "workshop=1", "--no-wordnet", "--cloze", missing,
            "--dev", missing, "--everyday", missing, "--export-every", "0", *extra]
    threads = torch.get_num_threads()
    try:
        assert build.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    log = [json.loads(line) for line in (tmp_path / "ckpt" / "log.jsonl").read_text().splitlines()]
    return calls, log


def test_every_step_is_the_training_loops_step_and_a_resume_continues_it(tmp_path, tokenizer, monkeypatch):
    calls, log = _run(tmp_path, tokenizer, monkeypatch, "--steps", "4", "--eval-every", "2", "--ckpt-every", "2",
                      "--anti-copy", "1.0")
    cfg = training.TrainConfig(steps=4, warmup_steps=1, learning_rate=3e-4, schedule="cosine",
                               min_lr_ratio=build.LR_FLOOR)
    assert [c[0] for c in calls] == [0, 1, 2, 3]  # dropout seeded by the step
    assert [c[1] for c in calls] == pytest.approx([training.lr_at(cfg, s) for s in range(4)])
    lr, head = calls[-1][1], calls[-1][3][2]  # the head's group learns at --head-lr x the schedule
    assert head == pytest.approx(lr * 1e-3 / 3e-4) and calls[-1][3][0] == pytest.approx(lr)
    assert training.lr_at(cfg, 4) == pytest.approx(3e-4 * build.LR_FLOOR)  # the cosine ends at its floor
    evals = [e for e in log if e["event"] == "eval"]
    assert [e["step"] for e in evals] == [2, 4] and all(e["heldout_loss"] > 0 for e in evals)
    record = json.loads((tmp_path / "out" / dm.BUILD_FILE).read_text())
    assert record["steps"] == 4 and record["reproduce"].startswith(build.COMMAND + " --out assets/default_mlm ")

    calls, log = _run(tmp_path, tokenizer, monkeypatch, "--steps", "6", "--resume",
                      str(tmp_path / "ckpt" / "last.safetensors"), "--eval-every", "100", "--ckpt-every", "100")
    assert [c[0] for c in calls] == [4, 5]
    assert any(e["event"] == "resumed" and e["step"] == 4 for e in log)


def test_a_step_batch_depends_on_the_seed_and_the_step_only(tokenizer):
    seqs = [tokenizer(f"sentence number {i} of the tiny corpus", add_special_tokens=False)["input_ids"]
            for i in range(20)]
    train = {"a": seqs[:10], "b": seqs[10:]}
    plan = data.batch_plan({"a": 0.5, "b": 0.5}, 4)
    mask, _ = data.make_masker(tokenizer, "whole_word", 0.3)
    cont = data.continuation_pieces(tokenizer)
    first = data.step_batch(train, plan, 7, 0, tokenizer, cont, mask)
    again = data.step_batch(train, plan, 7, 0, tokenizer, cont, mask)
    other = data.step_batch(train, plan, 8, 0, tokenizer, cont, mask)
    assert torch.equal(first[1].input_ids, again[1].input_ids) and torch.equal(first[1].labels, again[1].labels)
    assert not torch.equal(first[1].labels, other[1].labels)
    assert plan == {"a": 2, "b": 2} and first[0].input_ids.shape[0] == 4


def test_heldout_numbers_are_training_evaluate_over_every_selected_position_and_the_mask_positions(tokenizer):
    model, _ = tiny_random_masked_lm(tokenizer)
    cont = data.continuation_pieces(tokenizer)
    seqs = [tokenizer("the cat sat on the mat and watched the birds" + " today" * i, add_special_tokens=False)
            ["input_ids"] for i in range(5)]
    mask, _ = data.make_masker(tokenizer, "token", mlm_probability=0.5)
    held = data.heldout_set(tokenizer, seqs, mask, cont, batch=2)  # three batches of different widths
    assert held.input_ids.shape == (5, len(seqs[-1]) + 2)
    out = training.evaluate(model, held)
    # by hand: the same seeded masks, batch by batch at their own widths
    g = torch.Generator().manual_seed(1234)
    total = at_mask = n = n_mask = 0.0
    for i in range(0, 5, 2):
        chunks = data.collate(tokenizer, seqs[i:i + 2], cont)
        res = mask(chunks, g)
        with torch.no_grad():
            logits, targets = masked_lm_logits(model, res.input_ids, chunks.attention_mask, res.labels)
        ce = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
        is_mask = res.input_ids[res.labels != -100] == tokenizer.mask_token_id
        total, n = total + float(ce.sum()), n + len(ce)
        at_mask, n_mask = at_mask + float(ce[is_mask].sum()), n_mask + int(is_mask.sum())
    assert 0 < n_mask < n  # [MASK] and other selected positions both present
    assert out["loss"] == pytest.approx(total / n, rel=1e-5)
    assert out["mask_loss"] == pytest.approx(at_mask / n_mask, rel=1e-5)
    assert data.heldout_set(tokenizer, [], mask, cont) is None


def test_measure_only_logs_the_init_assets_numbers_and_exports_nothing(tmp_path, tokenizer, monkeypatch):
    """docs/gpu_build.md re-measures a returned asset with ``--init-asset ASSET --measure-only``."""
    _run(tmp_path, tokenizer, monkeypatch, "--steps", "4", "--export-every", "2")
    asset = tmp_path / "out"
    assert (asset / "model.safetensors").is_file()
    again = tmp_path / "again"
    again.mkdir()
    calls, log = _run(again, tokenizer, monkeypatch, "--steps", "4", "--init-asset", str(asset), "--measure-only")
    init = [e for e in log if e["event"] == "eval_init"]
    assert len(init) == 1 and "heldout_loss" in init[0] and init[0]["note"].endswith(str(asset))
    assert not calls and not any(e["event"] in ("train", "exported", "final") for e in log)
    assert not (again / "out").exists()
    for argv in (["--measure-only"], ["--measure-only", "--init-asset", str(asset), "--resume", "x.safetensors"]):
        with pytest.raises(SystemExit):  # a resumed checkpoint's metrics_init would skip the measurement
            build.parse_args(argv)


def test_an_untied_output_layer_trains_at_its_own_rate_and_travels_in_the_asset(tmp_path, tokenizer, monkeypatch):
    """--output-lr: the output layer becomes a copy of the word embeddings, trains apart from them (which stay
    frozen) at its own rate, and is stored in the asset, whose loader unties a fresh model to take it."""
    calls, log = _run(tmp_path, tokenizer, monkeypatch, "--steps", "3", "--eval-every", "3", "--ckpt-every", "3",
                      "--lr", "1e-3", "--output-lr", "5e-4")
    lr, groups = calls[-1][1], calls[-1][3]
    assert len(groups) == 4 and groups[3] == pytest.approx(lr * 0.5)  # body, body (no decay), head, output layer
    installed = tiny_random_masked_lm(tokenizer)[0]
    emb, out = "bert.embeddings.word_embeddings.weight", dm.OUTPUT_WEIGHT
    delta = load_file(str(tmp_path / "out" / dm.WEIGHTS_FILE))
    assert out in delta and emb not in delta  # the word embeddings stayed as installed
    assert (delta[out].float() - installed.state_dict()[emb]).abs().max() > 1e-3  # the output layer moved
    with safe_open(str(tmp_path / "ckpt" / "last.safetensors"), "pt") as f:
        assert f"model/{out}" in f.keys() and f"opt/{out}/exp_avg" in f.keys()  # a resume keeps it, and its moments

    assert not dm.output_untied(installed)
    dm.apply_delta_(installed, tmp_path / "out" / dm.WEIGHTS_FILE)
    assert dm.output_untied(installed) and not installed.config.tie_word_embeddings
    assert torch.equal(installed.cls.predictions.decoder.weight, delta[out].float())
    installed.tie_weights()  # the config says untied: nothing ties them back
    assert dm.output_untied(installed)
    record = json.loads((tmp_path / "out" / dm.BUILD_FILE).read_text())
    assert "--output-lr 0.0005" in record["reproduce"] and "untied" in record["trained"]


def test_untying_keeps_every_prediction(tokenizer):
    model = tiny_random_masked_lm(tokenizer)[0].eval()
    ids = tokenizer("the cat sat on the [MASK] .", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = model(input_ids=ids).logits
        dm.untie_output_(model)
        after = model(input_ids=ids).logits
    assert dm.output_untied(model) and torch.equal(before, after)
    weight = model.cls.predictions.decoder.weight
    dm.untie_output_(model)  # a second call changes nothing
    assert model.cls.predictions.decoder.weight is weight


def test_a_checkpoint_resumes_only_into_a_model_that_matches_it(tmp_path, tokenizer):
    """An untied checkpoint into a tied model is refused before anything is written; a tied one into an untied
    model starts the output layer from the checkpoint's word embeddings; a missing tensor is an error, not silence."""
    emb = "bert.embeddings.word_embeddings.weight"
    tied = tiny_random_masked_lm(tokenizer)[0]
    with torch.no_grad():
        tied.get_input_embeddings().weight.mul_(2.0)  # a trained checkpoint's embeddings differ from a fresh model's
    opt = torch.optim.AdamW(tied.parameters())
    build.save_checkpoint(tmp_path / "tied.safetensors", tied, opt, {"step": 1})
    fresh = tiny_random_masked_lm(tokenizer)[0]
    dm.untie_output_(fresh)
    build.load_checkpoint(tmp_path / "tied.safetensors", fresh, torch.optim.AdamW(fresh.parameters()))
    assert dm.output_untied(fresh)
    assert torch.equal(fresh.cls.predictions.decoder.weight, tied.state_dict()[emb])

    build.save_checkpoint(tmp_path / "untied.safetensors", fresh, opt, {"step": 1})
    plain = tiny_random_masked_lm(tokenizer)[0]
    before = plain.state_dict()[emb].clone()
    with pytest.raises(ValueError, match="--output-lr"):
        build.load_checkpoint(tmp_path / "untied.safetensors", plain, torch.optim.AdamW(plain.parameters()))
    assert torch.equal(plain.state_dict()[emb], before)  # refused before any tensor was loaded

    state = {k: v for k, v in tied.state_dict().items() if "layer.0.attention" not in k and ".decoder." not in k}
    build.save_file({f"model/{k}": v.contiguous() for k, v in state.items()}, str(tmp_path / "short.safetensors"),
                    metadata={"meta": json.dumps({"step": 1})})
    with pytest.raises(ValueError, match="missing"):
        build.load_checkpoint(tmp_path / "short.safetensors", plain, torch.optim.AdamW(plain.parameters()))


def test_the_word_embeddings_are_trained_tied_or_the_output_layer_untied_not_both():
    with pytest.raises(SystemExit):
        build.parse_args(["--out", "x", "--emb-lr", "1e-5", "--output-lr", "1e-5"])


def test_under_ema_the_average_is_evaluated_exported_and_resumed(tmp_path, tokenizer, monkeypatch):
    """--ema: the exported asset holds the average of the weights, not the last ones; a checkpoint keeps the
    average, so a resumed build continues it."""
    _, log = _run(tmp_path, tokenizer, monkeypatch, "--steps", "4", "--eval-every", "4", "--ckpt-every", "2",
                  "--lr", "3e-3", "--ema", "0.5")
    delta = load_file(str(tmp_path / "out" / dm.WEIGHTS_FILE))
    with safe_open(str(tmp_path / "ckpt" / "last.safetensors"), "pt") as f:
        live = {k[len("model/"):]: f.get_tensor(k) for k in f.keys() if k.startswith("model/")}
        avg = {k[len("ema/"):]: f.get_tensor(k) for k in f.keys() if k.startswith("ema/")}
    name = "bert.encoder.layer.0.attention.self.query.weight"
    assert name in avg and name in delta
    assert not torch.allclose(avg[name], live[name])  # the average lags the trained weights
    assert torch.allclose(delta[name].float(), avg[name], atol=1e-3)  # and it is what was exported
    record = json.loads((tmp_path / "out" / dm.BUILD_FILE).read_text())
    assert "--ema 0.5" in record["reproduce"] and "moving average" in record["description"]

    calls, log = _run(tmp_path, tokenizer, monkeypatch, "--steps", "5", "--eval-every", "100", "--ckpt-every", "100",
                      "--lr", "3e-3", "--ema", "0.5", "--resume", str(tmp_path / "ckpt" / "last.safetensors"))
    with safe_open(str(tmp_path / "ckpt" / "last.safetensors"), "pt") as f:
        step5_live, step5_avg = f.get_tensor(f"model/{name}"), f.get_tensor(f"ema/{name}")
    assert torch.allclose(step5_avg, 0.5 * avg[name] + 0.5 * step5_live, atol=1e-6)  # continued, not restarted


def test_ema_added_on_resume_starts_at_the_checkpoints_weights_as_a_copy(tmp_path, tokenizer, monkeypatch):
    """A stage that adds --ema to a checkpoint without an average: the average starts at its weights, in memory
    of its own (it was the weights' own memory once: every update shrank them, and saving failed)."""
    _run(tmp_path, tokenizer, monkeypatch, "--steps", "2", "--eval-every", "100", "--ckpt-every", "2", "--lr", "3e-3")
    with safe_open(str(tmp_path / "ckpt" / "last.safetensors"), "pt") as f:
        start = {k[len("model/"):]: f.get_tensor(k) for k in f.keys() if k.startswith("model/")}
    _, log = _run(tmp_path, tokenizer, monkeypatch, "--steps", "4", "--eval-every", "100", "--ckpt-every", "100",
                  "--lr", "3e-3", "--ema", "0.5", "--resume", str(tmp_path / "ckpt" / "last.safetensors"))
    resumed = next(e for e in log if e["event"] == "resumed")
    assert resumed["ema"].startswith("0 of ")
    with safe_open(str(tmp_path / "ckpt" / "last.safetensors"), "pt") as f:
        name = "bert.encoder.layer.0.attention.self.query.weight"
        live, avg = f.get_tensor(f"model/{name}"), f.get_tensor(f"ema/{name}")
    assert not torch.allclose(live, avg)
    # two updates from the checkpoint's weights: avg = 0.25 start + 0.25 w3 + 0.5 w4, between the start and now
    assert (avg - start[name]).abs().max() < (live - start[name]).abs().max()


@pytest.mark.parametrize("decay", ["1.0", "-0.1", "1.5"])
def test_an_ema_decay_outside_0_to_1_is_refused(decay):
    with pytest.raises(SystemExit):
        build.parse_args(["--out", "x", "--ema", decay])
