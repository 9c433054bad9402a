"""The loss registry: adding a variant is one record. A fourth loss, label-smoothed cross-entropy, is registered
here and nowhere else; the config, the CLI, the loop (beside the full loss, on the same batches), the cost
calculator, the Loss page's view-model, its gradient view and the figures all take it from the record."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from mlm_core import cli, costs, loss_registry
from mlm_core.errors import InputError
from mlm_core.figures.losses import loss_bars, variant_color
from mlm_core.lessons.loss_lab import batch_losses, loss_batch, loss_metrics, loss_sentences, per_token_table
from mlm_core.loss_registry import LossInputs, LossVariant
from mlm_core.losses import LossOutput, empty_loss
from mlm_core.models import load_masked_lm
from mlm_core.training import TrainConfig, train_variants
from tests.conftest import SMALL_CORPUS

pytestmark = pytest.mark.usefixtures("one_thread")

SMOOTHING = 0.1
NAME = "smoothed"
TEXTS = ["The cat sat on the warm mat by the kitchen door.", "Every morning I drink a cup of coffee."] * 3


def label_smoothed(x: LossInputs) -> LossOutput:
    """Cross-entropy against (1 - ε) one-hot + ε / V (Szegedy et al. 2016, §7), as F.cross_entropy does."""
    if x.targets.numel() == 0:
        return empty_loss(x.logits, variant=NAME)
    per_token = F.cross_entropy(x.logits.float(), x.targets, reduction="none", label_smoothing=SMOOTHING)  # (M,)
    return LossOutput(per_token.mean(), per_token, {"empty": False, "M": int(x.targets.numel()), "variant": NAME})


SMOOTHED = LossVariant(NAME, label_smoothed, label="label-smoothed", title="Label-smoothed cross-entropy",
                       why="10% of the target's probability spread over the whole vocabulary.", color="#ae3ec9")


@pytest.fixture(autouse=True)
def smoothed():
    """One more variant, for one test; the registry holds the built-in ones again afterwards."""
    before = loss_registry.names()
    loss_registry.register(SMOOTHED)
    yield SMOOTHED
    loss_registry.unregister(NAME)
    assert loss_registry.names() == before and before[:3] == ("full", "weighted", "sampled")


@pytest.fixture(scope="module")
def tiny():
    return load_masked_lm("tiny-random", device="cpu")


def test_the_record_is_label_smoothed_cross_entropy():
    g = torch.Generator().manual_seed(0)
    logits, targets = torch.randn(7, 50, generator=g) * 3, torch.randint(50, (7,), generator=g)
    out = loss_registry.get(NAME).loss(LossInputs(targets, logits=logits))
    expected = F.cross_entropy(logits, targets, label_smoothing=SMOOTHING)
    assert torch.allclose(out.loss, expected, rtol=1e-6) and out.per_token.mean() == out.loss
    assert not torch.isclose(out.loss, F.cross_entropy(logits, targets))  # and not the plain one


def test_the_config_and_the_cli_accept_it_and_a_name_twice_is_refused():
    assert TrainConfig(loss=NAME).loss == NAME
    with pytest.raises(InputError, match=NAME):  # the message lists it among the choices
        TrainConfig(loss="no such loss")
    args = cli.build_parser().parse_args(["train", "--loss", NAME])
    assert args.loss == NAME
    with pytest.raises(InputError, match="registered already"):
        loss_registry.register(SMOOTHED)


def test_it_trains_beside_the_full_loss_on_the_same_batches(tiny):
    model, tok = tiny
    full = TrainConfig(steps=3, batch_size=2, seq_len=32, learning_rate=1e-3, warmup_steps=0, eval_every=3,
                       amp="off", seed=2)
    results = train_variants(model, tok, SMALL_CORPUS, {"full": full, NAME: dataclasses.replace(full, loss=NAME)})
    ours, theirs = results[NAME], results["full"]
    assert [r["masked_tokens"] for r in ours.steps] == [r["masked_tokens"] for r in theirs.steps]  # normalised by M
    assert all(math.isfinite(r["loss"]) for r in ours.steps)
    assert ours.steps[0]["loss"] != theirs.steps[0]["loss"]
    assert ours.evals[0]["loss"] == theirs.evals[0]["loss"]  # the same weights at step 0, scored the same way
    assert ours.evals[-1]["loss"] != theirs.evals[-1]["loss"]  # and different updates after
    vocab = model.config.vocab_size
    assert costs.run_step_bytes(model.config, ours.config) == costs.run_step_bytes(model.config, theirs.config)
    assert loss_registry.get(NAME).scored_classes(ours.config, vocab) == vocab


def test_the_loss_page_and_its_figures_show_it(tiny):
    model, tok = tiny
    batch = loss_batch(model, tok, TEXTS, seed=0)
    outputs = batch_losses(batch)
    assert list(outputs) == [*loss_registry.names()[:-1], NAME] and list(outputs)[:3] == ["full", "weighted", "sampled"]
    expected = F.cross_entropy(batch.logits, batch.targets, label_smoothing=SMOOTHING)
    assert torch.allclose(outputs[NAME].loss, expected, rtol=1e-6)
    assert loss_sentences(outputs)[NAME].startswith("**Label-smoothed cross-entropy ")
    assert [m["label"] for m in loss_metrics(outputs)][-2:] == ["label-smoothed", "gradient cosine"]
    assert all(NAME in row for row in per_token_table(outputs, batch))
    figure = loss_bars({name: float(out.loss) for name, out in outputs.items()})
    assert list(figure.data[0].marker.color) == [variant_color(n) for n in outputs] and variant_color(NAME) == "#ae3ec9"
    grads = loss_registry.logit_gradients(batch.logits, batch.targets, 1, outputs)
    z = batch.logits.clone().requires_grad_(True)
    F.cross_entropy(z, batch.targets, label_smoothing=SMOOTHING).backward()
    assert torch.allclose(grads[NAME], z.grad[1] * len(batch.targets), atol=1e-6)
