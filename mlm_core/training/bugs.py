"""Bugs that train: named options of the loop's masking, labels and evaluation steps.

Each one is a mistake real pipelines made (the Bug museum shows each on one batch; the Training page's
"bugs that train" lesson races a buggy twin beside a clean run). ``TrainConfig.bug`` names one; ""
is the clean loop, and the clean path never calls into this module.

- masking step: ``special_tokens_masked`` (special tokens "protected" by hard-coded ids 0 and 1, so
  [CLS] and [SEP] can be selected), ``random_share_misread`` (the conditional 0.5 of the 80/10/10 rule
  read as "50% random" and "fixed" to the unconditional 0.1: 2% random, 18% unchanged);
- labels (what the loss averages over): ``labels_never_ignored`` (labels = a copy of the ids, never
  set to -100: the loss is over every position, padding included);
- evaluation step: ``eval_remasked`` (the held-out text masked afresh on every evaluation),
  ``eval_dropout`` (the model left in train mode while it is evaluated).

A masking or labels bug changes what the buggy twin trains on; an evaluation bug changes only what it
reports (``reported_loss`` in its eval events), so its training is the clean run's, bit for bit.

Shapes: T = sequence length.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from mlm_core.masking import MaskingConfig

MASKING, LABELS, EVALUATION = "masking", "labels", "evaluation"
# name -> the step of the loop it changes
BUGS = {
    "labels_never_ignored": LABELS,
    "special_tokens_masked": MASKING,
    "random_share_misread": MASKING,
    "eval_remasked": EVALUATION,
    "eval_dropout": EVALUATION,
}
HARDCODED_SPECIAL_IDS = (0, 1)  # the museum's exhibit 1: "special tokens are ids 0 and 1" ([PAD], [unused0] in BERT)


def step_of(bug: str) -> str:
    """The step a bug changes ("" for the clean loop).

    >>> step_of("eval_dropout"), step_of("")
    ('evaluation', '')
    """
    return BUGS.get(bug, "")


def changes_training(bug: str) -> bool:
    """True when the bug changes what the model trains on (its masks or its labels)."""
    return step_of(bug) in (MASKING, LABELS)


def buggy_masking(masking: MaskingConfig, bug: str) -> MaskingConfig:
    """The rule the buggy masking step really applies.

    ``random_share_misread``: the draw that picks random among the selected tokens not made [MASK] uses the
    unconditional share (0.1) where BERT's rule needs the conditional 0.1 / 0.2 = 0.5, so random ends up
    at 0.2 x 0.1 = 2% of the selected tokens and unchanged at 18%. Same draws as the clean rule: the same
    tokens are selected and made [MASK]; four in five of the clean rule's random tokens stay unchanged.

    >>> rule = buggy_masking(MaskingConfig(), "random_share_misread")
    >>> round(rule.random_replace_prob, 3), round(rule.random_given_not_mask, 3), round(rule.unchanged_prob, 3)
    (0.02, 0.1, 0.18)
    """
    if bug == "random_share_misread":
        return replace(masking, random_replace_prob=masking.random_replace_prob * (1.0 - masking.mask_replace_prob))
    return masking


def buggy_special_tokens_mask(input_ids: torch.Tensor) -> torch.Tensor:
    """``special_tokens_masked``: 1 only where the id is 0 or 1 (the hard-coded "special" ids), (T,) or (B, T).

    >>> buggy_special_tokens_mask(torch.tensor([101, 2023, 102, 0])).tolist()  # [CLS] x [SEP] [PAD]
    [0, 0, 0, 1]
    """
    return torch.isin(input_ids, torch.tensor(HARDCODED_SPECIAL_IDS, dtype=input_ids.dtype)).long()


def buggy_labels(original_ids: torch.Tensor, labels: torch.Tensor, bug: str) -> torch.Tensor:
    """``labels_never_ignored``: every position's original id is a target (padding too); else the labels.

    >>> buggy_labels(torch.tensor([101, 7, 102, 0]), torch.tensor([-100, 7, -100, -100]), "labels_never_ignored").tolist()
    [101, 7, 102, 0]
    """
    return original_ids.clone() if bug == "labels_never_ignored" else labels
