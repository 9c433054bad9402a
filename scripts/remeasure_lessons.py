"""Re-measure every model-dependent number that docs/lessons.md and docs/workshop.md quote.

The docs mark each such number where it stands: ``<!-- m:heads_cls_n -->48<!-- /m -->``. Each marker's
id names one claim of ``CLAIMS`` below; the claim says which ``mlm_core`` call measures it (the same
call the page makes, with the page's sentences and seed) and how the docs write it. The script prints
one markdown table row per marker: claim id, file:line, quoted value, measured value, OK or STALE.
``--write`` puts the measured values into the docs in place (the sentence around a number is yours:
read the diff). The pages compute their numbers at run time and are never rewritten.

Run after every export of the default model (one CPU thread; on the shared 2-core machine under a
load of ~20 it took 8.5 minutes, 6 of them in the three training lessons)::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/remeasure_lessons.py            # table only
    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/remeasure_lessons.py --write    # and rewrite the docs

``--skip training`` leaves out the three training lessons (the slowest group; their markers are then
reported "not measured" and left as they are); ``--only heads lens``
measures just those groups. After the table it checks the sentences whose words depend on the
measurement (``SENTENCE_CHECKS``: "most heads", "keeps rising", "more than 1 nat"...) and says which
need rewording. Exit status 1 when a sentence check fails, or a marker is STALE and ``--write`` was not given.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: import the project's mlm_core
    sys.path.insert(0, str(ROOT))

from mlm_core import encode, load_masked_lm, seeds  # noqa: E402
from mlm_core.bundled import gazetteer, heldout_workshop_sentences, workshop_sentences  # noqa: E402
from mlm_core.data import mask_batch  # noqa: E402
from mlm_core.default_model import read_build_record  # noqa: E402
from mlm_core.grammar import score_pairs  # noqa: E402
from mlm_core.lessons.grammar import FIRST_PAIR as GRAMMAR_FIRST_PAIR, WEAK_MARGIN  # noqa: E402
from mlm_core.lessons.inside import agreement_over_texts, lens_profile_on_texts, measure_head_patterns  # noqa: E402
from mlm_core.formatting import signed as signed_number  # noqa: E402
from mlm_core.lessons.loss_lab import (  # noqa: E402
    SWEEP_PURPOSE,
    batch_losses,
    loss_batch,
    pick_sentences,
    sampled_softmax_check,
)
from mlm_core.lessons.masking_view import masking_statistics  # noqa: E402
from mlm_core.lessons.museum import COSINE_BUGGY, labels_never_ignored, run_exhibits  # noqa: E402
from mlm_core.lessons.training_registry import BIND_VARIANTS, base_config, default_run, lesson_variants  # noqa: E402
from mlm_core.lessons.training_view import (  # noqa: E402
    BINDING_SHARE, CONTROL_SHARE, OTHER, PROBE_SETS, binding, gazetteer_texts, probe_set_scores, probes_right,
)
from mlm_core.precision import resolve_amp  # noqa: E402
from mlm_core.losses import token_counts  # noqa: E402
from mlm_core.masking import MaskingConfig  # noqa: E402
from mlm_core.lessons.predictions import summarize_by_decision  # noqa: E402
from mlm_core.predict import predict_masked  # noqa: E402
from mlm_core.sampled_softmax import SampledSoftmaxConfig, sampled_softmax_sweep  # noqa: E402
from mlm_core.training import (frequency_buckets, loss_by_group, make_eval_set, split_chunks, train_variants,  # noqa: E402
                               word_piece_ids)
from mlm_core.training import chunk_token_counts  # noqa: E402

NAME_FORMS = ("Veldoria", "Veldorian", "Veldorians")  # the invented name's forms in the gazetteer
GUIDE_SEED = 144  # the seed docs/workshop.md teaches with (its Masking step): the guide's numbers are measured with it
HELDOUT_N = len(heldout_workshop_sentences())  # corpus-level numbers: the documents the default model never trained on
DOCS = (ROOT / "docs" / "lessons.md", ROOT / "docs" / "workshop.md")
MARKER = re.compile(r"<!-- m:([a-z0-9_]+) -->(.*?)<!-- /m -->")
MINUS = "\u2212"  # the docs write negative numbers with a real minus sign


# --------------------------------------------------------------------------------------------
# How the docs write a number
# --------------------------------------------------------------------------------------------
def fixed(digits: int) -> Callable[[float], str]:
    """A number with ``digits`` decimals, thousands separated, a real minus sign: 2.887, −0.086, 10,001."""
    return lambda v: f"{v:,.{digits}f}".replace("-", MINUS)


def signed(digits: int) -> Callable[[float], str]:
    """A z-score as the Masking page writes it (``formatting.signed``): +3.24, −1.24, and 0.00, never −0.00."""
    return lambda v: signed_number(v, f".{digits}f")


def percent(digits: int) -> Callable[[float], str]:
    """A share as a percentage without the % sign (the docs keep the sign outside the marker): 0.186 -> 18.6."""
    return lambda v: f"{100 * v:.{digits}f}".replace("-", MINUS)


def text(v) -> str:
    return str(v)


@dataclass(frozen=True)
class Claim:
    id: str
    group: str  # the measurement that gives it (GROUPS)
    what: str  # what is measured, in words
    fmt: Callable = text


def _claims() -> list[Claim]:
    """Every claim the docs mark, group by group (one function per part of the app)."""
    c: list[Claim] = []

    def add(group: str, what: str, fmt: Callable, *ids: str) -> None:
        c.extend(Claim(i, group, what, fmt) for i in ids)

    for part in (_model_claims, _loss_claims, _training_claims, _guide_claims):
        part(add)
    return c


def _model_claims(add: Callable[..., None]) -> None:
    """The default model's build record, the Grammar page, and Inside the model (heads, lens, saliency)."""
    add("build", "the default model's build step (assets/default_mlm/build.json)", lambda v: str(int(v)), "model_step")
    # the Grammar page: BLiMP as the default model's build measured it (build.json's final_metrics.blimp)
    add("build", "the default model's BLiMP accuracy, overall (mean over paradigms), %", percent(1), "blimp_overall")
    add("build", "the BLiMP pairs it was measured on (a fixed sample of every paradigm)", fixed(0), "blimp_pairs")
    for key, name in (("dn", "determiner_noun_agreement"), ("island", "island_effects"), ("npi", "npi_licensing")):
        add("build", f"the default model's BLiMP accuracy on {name}, %", percent(0), f"blimp_{key}")
    add("grammar", "the Grammar page's first pair (agreement across 'to the cabinet'): PLL(good) - PLL(bad), nats",
        signed(3), "grammar_first_margin")
    # Inside the model: attention patterns (pages/inside.py, PATTERN_SENTENCES workshop sentences)
    for key, name in (("cls", "[CLS]"), ("sep", "[SEP]"), ("punct", ". or ,"), ("prev", "previous token"),
                      ("next", "next token")):
        add("heads", f"heads putting > 50% of their attention on {name} (of 72; 32 workshop sentences)", fixed(0),
            f"heads_{key}_n")
        add("heads", f"the strongest head for {name} (layer-head)", text, f"heads_{key}_top")
        add("heads", f"the strongest head's share of attention on {name}, %", percent(0), f"heads_{key}_top_pct")
    add("heads", "even attention's share, smallest and largest over the patterns, %", percent(0),
        "heads_even_min", "heads_even_max")
    add("heads", "the strongest previous-token head at a [MASK] (each sentence's last word hidden): its share on "
        "the previous token and on the [MASK] itself, %", percent(0), "heads_prev_top_mask_pct",
        "heads_prev_top_mask_self_pct")
    # the logit lens (the held-out workshop sentences, BERT's rule, seed 1, [MASK] positions)
    add("lens", "[MASK] positions the lens profile averages over", fixed(0), "lens_positions")
    add("lens", "share of [MASK] positions whose answer is in the lens's top 5 at depth d (0 = embeddings), %",
        percent(0), *(f"lens_top5_d{d}" for d in range(7)))
    add("lens", "share whose answer is the lens's first guess, at the embeddings and after the last layer, %",
        percent(0), "lens_top1_d0", "lens_top1_d6")
    add("lens", "mean log p(true) at the embeddings and after the last layer", fixed(1), "lens_logp_d0",
        "lens_logp_d6")
    add("lens", f"the page's curve (128 held-out sentences, the guide's seed {GUIDE_SEED}): top-5 share at the embeddings "
        "and after the last layer, %", percent(0), "lens128_top5_d0", "lens128_top5_d6")
    # saliency agreement (Kendall tau with leave-one-out, last word masked)
    add("saliency", "mean tau on magnitudes, gradient x input (32 held-out sentences)", fixed(2), "sal_grad_input")
    add("saliency", "mean tau on magnitudes, gradient x (input - [MASK]) (32 sentences)", fixed(2), "sal_grad_delta")
    add("saliency", "mean tau on the signed scores, gradient x input and x (input - [MASK]) (32 sentences)", fixed(2),
        "sal_grad_input_signed", "sal_grad_delta_signed")
    add("saliency", "mean tau of the head-averaged attention, smallest and largest over layers 1-6 (32 sentences)",
        fixed(2), "sal_attn_min", "sal_attn_max")
    add("saliency", "per-sentence tau, smallest and largest over every measure (32 sentences)", fixed(1),
        "sal_sentence_min", "sal_sentence_max")
    add("saliency", "mean tau on magnitudes, smallest and largest over every measure, on the page's 24 held-out "
        "sentences", fixed(2), "sal24_min", "sal24_max")


def _loss_claims(add: Callable[..., None]) -> None:
    """Predictions, the Loss page and the Bug museum, and the sampled softmax's target."""
    # Predictions: loss by decision (the held-out workshop sentences, BERT's rule, seed 0)
    add("predictions", "held-out workshop sentences (the documents the default model never trained on)", fixed(0),
        "pred_sentences")
    add("predictions", "mean loss over every selected position (held-out sentences, seed 0)", fixed(3), "pred_all_loss")
    add("predictions", "selected positions", fixed(0), "pred_all_n")
    add("predictions", "exp(mean loss) over every selected position", fixed(1), "pred_all_ppl")
    add("predictions", "mean loss at the [MASK] positions alone", fixed(3), "pred_mask_loss")
    add("predictions", "[MASK] positions", fixed(0), "pred_mask_n")
    add("predictions", "exp(mean loss) at the [MASK] positions", fixed(1), "pred_mask_ppl")
    add("predictions", "mean loss at the unchanged positions", fixed(3), "pred_unchanged_loss")
    add("predictions", "unchanged positions", fixed(0), "pred_unchanged_n")
    # Loss page and Bug museum: the default batch (8 workshop sentences, seed 0)
    add("loss_page", "weighted loss, sum(w CE) / sum(w) (default batch)", fixed(3), "loss_weighted")
    add("loss_page", "weighted loss, (w CE).mean() (default batch)", fixed(3), "loss_weighted_mean")
    add("loss_page", "mean weight of the default batch's targets", fixed(3), "loss_mean_weight")
    add("loss_page", "full loss on the default batch", fixed(3), "loss_full")
    add("loss_page", "the Loss page's sampled estimate on the default batch", fixed(3), "loss_sampled")
    add("loss_page", "its gradient cosine with the full loss's", fixed(3), "loss_sampled_cos")
    add("loss_page", "museum, loss only at [MASK]: the buggy value", fixed(3), "museum_mask_only")
    add("loss_page", "museum, sampled softmax without the true class: the buggy value", fixed(3), "museum_no_true")
    add("loss_page", "... its gradient cosine with the full loss's", fixed(3), "museum_no_true_cos")
    add("loss_page", "museum, labels never -100: the buggy value (seed 0)", fixed(3), "museum_lni")
    add("loss_page", "... mean loss at unselected tokens (copying)", fixed(3), "museum_lni_copy")
    add("loss_page", "... mean loss at [CLS]/[SEP]", fixed(2), "museum_lni_special")
    add("loss_page", "... mean loss at padding", fixed(2), "museum_lni_pad")
    add("loss_page", "museum, wrong ignore index: the buggy value", fixed(2), "museum_ignore")
    add("loss_page", "museum, negatives over positions: the buggy value", fixed(3), "museum_negpos")
    add("loss_page", "... its gradient cosine with the full loss's", fixed(2), "museum_negpos_cos")
    for s in (1, 2):
        add("loss_page", f"museum, labels never -100: the buggy value at seed {s}", fixed(3), f"museum_lni_s{s}")
        add("loss_page", f"the full loss of the seed-{s} batch", fixed(3), f"loss_full_s{s}")
    # sampled softmax target (benchmark P4's batch: 32 workshop sentences, <= 128 tokens)
    add("sampled", "selected positions of the target batch (seed 0)", fixed(0), "target_m")
    add("sampled", "default sampled estimate, mean of 5 draws (seed 0)", fixed(3), "target_loss")
    add("sampled", "full loss of the target batch (seed 0)", fixed(3), "target_full")
    add("sampled", "relative error of the default estimate, % (seed 0)", percent(1), "target_err")
    add("sampled", "gradient cosine of the default estimate (seed 0)", fixed(3), "target_cos")
    add("sampled", "relative error over seeds 0-4, smallest and largest, %", percent(1), "target_err_min",
        "target_err_max")
    add("sampled", "gradient cosine over seeds 0-4, smallest and largest", fixed(3), "target_cos_min",
        "target_cos_max")
    add("sampled", "TensorFlow's defaults (log-uniform, with replacement, log Q on every logit): loss", fixed(3),
        "tfdef_loss")
    add("sampled", "... relative error, %", percent(1), "tfdef_err")
    add("sampled", "... gradient cosine", fixed(3), "tfdef_cos")
    add("sampled", "the same target on the Veldoria gazetteer (the Training page's corpus): selected positions",
        fixed(0), "vel_m")
    add("sampled", "... default estimate and full loss", fixed(3), "vel_loss", "vel_full")
    add("sampled", "... relative error, %", percent(1), "vel_err")
    add("sampled", "... gradient cosine", fixed(3), "vel_cos")
    add("sampled", "... TensorFlow's defaults: loss", fixed(3), "vel_tfdef_loss")
    add("sampled", "... TensorFlow's defaults: relative error, %", percent(1), "vel_tfdef_err")
    add("sampled", "... TensorFlow's defaults: gradient cosine", fixed(3), "vel_tfdef_cos")
    add("sampled", "TensorFlow's correction, unigram without replacement: loss", fixed(3), "tf_unigram_loss")
    add("sampled", "TensorFlow's correction, log-uniform without replacement: loss", fixed(3), "tf_loguni_loss")
    for corr in ("is", "tf", "none"):
        add("sampled", f"K sweep with replacement ({corr}), mean of the page's draws at K = 256, 4096, V", fixed(3),
            *(f"sweep_{corr}_{k}" for k in ("256", "4096", "v")))
    add("sampled", "the K sweep's draws per K (sampled_softmax.SWEEP_DRAWS)", fixed(0), "sweep_draws")
    add("sampled", "K sweep with replacement (importance), mean error at K = 256 and its standard error, %", percent(2),
        "sweep_is_256_err", "sweep_is_256_se")
    add("sampled", "... one draw's spread at K = 256, % of the full loss", percent(1), "sweep_is_256_spread")


def _training_claims(add: Callable[..., None]) -> None:
    """The Training page's lessons (default model, the gazetteer, seed 0)."""
    # Training lessons (default model, seed 0, the gazetteer)
    add("training", "lr lesson: held-out loss before training (step 0)", fixed(2), "lr_start")
    add("training", "lr lesson, lr 1e-2: held-out loss at step 5 without / with clipping", fixed(1),
        "lr_noclip_5", "lr_clip_5")
    add("training", "lr lesson, lr 1e-2: held-out loss at step 25 without / with clipping", fixed(1),
        "lr_noclip_25", "lr_clip_25")
    add("training", "lr lesson: held-out loss at step 25 with the sensible lr", fixed(2), "lr_sane_25")
    add("training", "masking lesson: held-out loss at the last step, static (1 mask per chunk) / dynamic",
        fixed(2), "mask_static_end", "mask_dynamic_end")
    add("training", "masking lesson: the step of that evaluation", fixed(0), "mask_end_step")
    add("training", "masking lesson: the static run's training loss at its last step", fixed(2), "mask_static_train_end")
    add("training", "masking lesson: questions in new words whose first guess is right at the end, static / dynamic",
        fixed(0), "mask_static_right", "mask_dynamic_right")
    add("training", "facts lesson (Start with every setting left alone): held-out loss at step 0 minus at the end, nats",
        fixed(1), "facts_drop")
    for group, label in PROBE_SETS.items():
        add("training", f"facts lesson ({label.lower()}): first guess right at step 0 and at the end", fixed(0),
            f"facts_{group}_top1_start", f"facts_{group}_top1")
        add("training", f"facts lesson ({label.lower()}): answer in the top 5 at step 0 and at the end", fixed(0),
            f"facts_{group}_top5_start", f"facts_{group}_top5")
    add("training", "facts lesson: probes in each set", fixed(0), "facts_probes")
    add("training", "facts lesson: binding (questions in new words answered first about Veldoria minus about the other "
        "name), first guess and top 5, at the end", fixed(0), "facts_binding_top1", "facts_binding_top5")
    add("training", "facts lesson (other countries): first guesses that are one of Veldoria's answers, at step 0 and "
        "at the end", fixed(0), "facts_control_veldoria_start", "facts_control_veldoria")
    add("training", "facts lesson: how often its training batches mask the facts' words, %", percent(0), "facts_focus_p")
    add("training", "facts lesson: the precision 'auto' chose on this machine", text, "facts_precision")
    add("training", "facts lesson: smallest and largest gradient norm over the steps", fixed(1), "facts_grad_min",
        "facts_grad_max")
    add("training", "facts lesson: held-out loss at the facts' words (focus_loss) at step 0 and at the end", fixed(1),
        "facts_focus_start", "facts_focus_end")
    add("training", "lr lesson, lr 1e-2: the largest gradient norm (before clipping) without / with clipping",
        fixed(0), "lr_noclip_grad_peak", "lr_clip_grad_peak")
    add("training", "lr lesson, lr 1e-2: the step of that largest gradient norm without / with clipping", fixed(0),
        "lr_noclip_grad_peak_step", "lr_clip_grad_peak_step")
    add("training", "lr lesson, lr 1e-2: every first guess of both runs' probes from step 5 on, most frequent first",
        text, "lr_fast_guesses")
    add("training", "facts lesson: held-out loss at step 0 and at the end", fixed(2), "facts_loss_start",
        "facts_loss_end")
    add("training", "facts lesson: the step of the last evaluation", fixed(0), "facts_end_step")
    add("training", "facts lesson: held-out positions that hide one of the facts' words", fixed(0), "facts_focus_n")
    add("training", "facts lesson: questions in new words right at each evaluation, and the steps of those "
        "evaluations", text, "facts_right_by_step", "facts_right_steps")


def _guide_claims(add: Callable[..., None]) -> None:
    """The Training page's lessons at the seed docs/workshop.md teaches with, issue 27's three lessons, and the
    Masking page's corpus check."""
    # the same lesson at the seed the guide teaches with (docs/workshop.md)
    add("training", "the seed docs/workshop.md teaches with (GUIDE_SEED)", text, "guide_seed")
    # issue 27's three lessons at the guide's seed, every other setting left alone (training_lessons)
    add("lessons27", f"masking-rate lesson at seed {GUIDE_SEED}: the step of the last evaluation", fixed(0), "rate_step")
    add("lessons27", f"masking-rate lesson at seed {GUIDE_SEED}: held-out loss on the frozen 15% mask at the end, at "
        "15% / 30% / 40%", fixed(2), "rate_15", "rate_30", "rate_40")
    add("lessons27", f"masking-rate lesson at seed {GUIDE_SEED}: training loss, mean of the last 10 steps, at 15% / 40%",
        fixed(2), "rate_train_15", "rate_train_40")
    add("lessons27", f"bugs lesson (labels never set to -100) at seed {GUIDE_SEED}: training loss (mean of the last 10 "
        "steps), clean run / buggy twin", fixed(2), "bug_clean_train", "bug_twin_train")
    add("lessons27", f"bugs lesson at seed {GUIDE_SEED}: held-out loss on the frozen mask at the end, clean / twin",
        fixed(2), "bug_clean_held", "bug_twin_held")
    add("lessons27", f"guess-over-time lesson at seed {GUIDE_SEED}, the capital question in new words: the answer's "
        "rank at step 0", fixed(0), "film_rank0")
    add("lessons27", f"guess-over-time lesson at seed {GUIDE_SEED}: the step at which the capital first became the "
        "first guess", fixed(0), "film_first")
    add("training", f"facts lesson at the guide's seed {GUIDE_SEED}: held-out loss at step 0 minus at the end, nats",
        fixed(2), "guide_facts_drop")
    add("training", f"facts lesson at seed {GUIDE_SEED}: held-out loss at the facts' words at step 0 and at the end",
        fixed(1), "guide_focus_start", "guide_focus_end")
    for group, label in PROBE_SETS.items():
        add("training", f"facts lesson at seed {GUIDE_SEED} ({label.lower()}): first guess right, answer in the top 5, "
            "at the end", fixed(0), f"guide_{group}_top1", f"guide_{group}_top5")
    add("training", f"facts lesson at seed {GUIDE_SEED} with the facts' words masked as every token (the rule alone): "
        "questions in new words answered first, and in the top 5, at the end", fixed(0), "guide_off_new_top1",
        "guide_off_new_top5")
    add("training", f"facts lesson at seed {GUIDE_SEED} (other countries): first guesses that are one of Veldoria's "
        "answers at the end, with the facts' words masked at the lesson's rate and as every token", fixed(0),
        "guide_control_veldoria", "guide_off_control_veldoria")
    add("training", f"facts lesson at seed {GUIDE_SEED}: binding, first guess and top 5, at the end", fixed(0),
        "guide_binding_top1", "guide_binding_top5")
    add("training", f"facts lesson at seed {GUIDE_SEED}: questions about Pellastra and about real countries given a "
        "twin country's word first at the end", fixed(0), "guide_other_twin", "guide_control_twin")
    add("training", f"facts lesson at seed {GUIDE_SEED} (other countries): real answers in the top 5 at step 0 and at "
        "the end", fixed(0), "guide_control_top5_start", "guide_control_top5_end")
    add("training", f"facts lesson at seed {GUIDE_SEED} (other countries): real answers first at step 0 and at the end",
        fixed(0), "guide_control_top1_start", "guide_control_top1_end")
    add("training", f"facts lesson at seed {GUIDE_SEED} with the facts' words masked as every token: binding (first "
        "guess) at the end", fixed(0), "guide_off_binding")
    add("training", f"'What did it learn?' at seed {GUIDE_SEED}: binding (first guess) at the end, learning from "
        "Veldoria alone / with its twins", fixed(0), "bind_alone_binding", "bind_twins_binding")
    add("training", f"'What did it learn?' at seed {GUIDE_SEED}: the other name given Veldoria's word first at the "
        "end, alone / with its twins", fixed(0), "bind_alone_other", "bind_twins_other")
    add("training", f"'What did it learn?' at seed {GUIDE_SEED}: questions about real countries given a Veldoria word "
        "first at the end, alone / with its twins", fixed(0), "bind_alone_flips", "bind_twins_flips")
    add("training", f"'What did it learn?' at seed {GUIDE_SEED}: questions in new words answered first at the end, "
        "alone / with its twins", fixed(0), "bind_alone_new", "bind_twins_new")
    add("training", "facts lesson, the held-out loss split by hidden token: selected positions", fixed(0), "split_n")
    for key, what in (("name", "pieces of the invented name (ve ##ld ##oria ##n ##ns)"),
                      ("facts", "the facts' words (the run's focus words)"), ("rest", "every other position")):
        add("training", f"facts lesson split, {what}: positions", fixed(0), f"split_{key}_n")
        add("training", f"facts lesson split, {what}: mean loss at step 0 and at the end", fixed(2),
            f"split_{key}_start", f"split_{key}_end")
        add("training", f"facts lesson split, {what}: nats of the held-out fall (summed fall / every position)",
            fixed(2), f"split_{key}_part")
    add("training", "facts lesson split: the held-out fall without the name's pieces, nats", fixed(2),
        "split_without_name")
    # Masking page's corpus check (tokenizer only: stays put when only the model changes)
    add("masking", "token masking, seed 144, 10,000 tokens: selected tokens", fixed(0), "z144_selected")
    add("masking", "... eligible tokens seen", fixed(0), "z144_tokens")
    add("masking", "... rate, %", percent(2), "z144_rate")
    add("masking", "... z-score", signed(2), "z144_z")
    add("masking", "token masking, seed 3, 10,000 tokens: z-score", signed(2), "z3_z")


CLAIMS = _claims()
CLAIM_BY_ID = {c.id: c for c in CLAIMS}


# --------------------------------------------------------------------------------------------
# Markers in the docs
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Marker:
    id: str
    path: Path
    line: int
    quoted: str


def find_markers(paths=DOCS) -> list[Marker]:
    """Every ``<!-- m:id -->value<!-- /m -->`` in ``paths``, in order."""
    found = []
    for path in paths:
        for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
            found.extend(Marker(m.group(1), Path(path), number, m.group(2)) for m in MARKER.finditer(line))
    return found


def unknown_markers(markers: list[Marker]) -> list[Marker]:
    """Markers whose id no claim measures."""
    return [m for m in markers if m.id not in CLAIM_BY_ID]


def rewrite(path: Path, values: dict[str, str]) -> int:
    """Put ``values`` (claim id -> formatted value) into ``path``'s markers; returns how many changed."""
    changed = 0

    def sub(m: re.Match) -> str:
        nonlocal changed
        new = values.get(m.group(1))
        if new is None or new == m.group(2):
            return m.group(0)
        changed += 1
        return f"<!-- m:{m.group(1)} -->{new}<!-- /m -->"

    original = path.read_text(encoding="utf-8")
    updated = MARKER.sub(sub, original)
    if updated != original:
        path.write_text(updated, encoding="utf-8")
    return changed


# --------------------------------------------------------------------------------------------
# Measurements: the pages' own calls, with the pages' sentences and seeds
# --------------------------------------------------------------------------------------------
class Context:
    """The bundled default model, its tokenizer and the workshop sentences, loaded once."""
    def __init__(self):
        self.model, self.tokenizer = load_masked_lm(None, device="cpu")
        self.model.eval()
        self.texts = workshop_sentences()
        self.heldout = heldout_workshop_sentences()


def measure_build(ctx: Context) -> dict:
    record = read_build_record() or {}
    out = {"model_step": record.get("steps", float("nan"))}
    blimp = (record.get("final_metrics") or {}).get("blimp") or {}
    if blimp:
        out.update(blimp_overall=blimp["overall"], blimp_pairs=blimp["n_pairs"])
        for key, name in (("dn", "determiner_noun_agreement"), ("island", "island_effects"), ("npi", "npi_licensing")):
            out[f"blimp_{key}"] = blimp["by_phenomenon"][name]["accuracy"]
    return out


def measure_grammar(ctx: Context) -> dict:
    [score] = score_pairs(ctx.model, ctx.tokenizer, [GRAMMAR_FIRST_PAIR])
    return {"grammar_first_margin": score.margin}


def measure_heads(ctx: Context) -> dict:
    p = measure_head_patterns(ctx.model, ctx.tokenizer, encode(ctx.tokenizer, ctx.texts[:32], max_length=64))
    out = {}
    for key, name in (("cls", "[CLS]"), ("sep", "[SEP]"), ("punct", ". or ,"), ("prev", "previous token"),
                      ("next", "next token")):
        layer, head, score = p.top_heads(name, 1)[0]
        out[f"heads_{key}_n"] = p.heads_above(name, 0.5)
        out[f"heads_{key}_top"] = f"{layer + 1}-{head + 1}"
        out[f"heads_{key}_top_pct"] = score
    out["heads_even_min"], out["heads_even_max"] = float(p.uniform.min()), float(p.uniform.max())
    at_mask = measure_head_patterns(ctx.model, ctx.tokenizer, encode(ctx.tokenizer, ctx.texts[:32], max_length=64),
                                    at_mask=True)  # what the page's grid shows: the [MASK]'s row
    layer, head, _ = p.top_heads("previous token", 1)[0]
    out["heads_prev_top_mask_pct"] = float(at_mask.scores[at_mask.names.index("previous token"), layer, head])
    out["heads_prev_top_mask_self_pct"] = float(at_mask.scores[at_mask.names.index("itself"), layer, head])
    return out


def measure_lens(ctx: Context) -> dict:
    lens = lens_profile_on_texts(ctx.model, ctx.tokenizer, ctx.heldout, seed=1)
    out = {"lens_positions": lens.positions, "lens_top1_d0": float(lens.top1[0]), "lens_top1_d6": float(lens.top1[-1]),
           "lens_logp_d0": float(lens.mean_log_prob[0]), "lens_logp_d6": float(lens.mean_log_prob[-1])}
    out.update({f"lens_top5_d{d}": float(v) for d, v in enumerate(lens.top5)})
    page = lens_profile_on_texts(ctx.model, ctx.tokenizer, ctx.heldout[:128], seed=GUIDE_SEED)  # PROFILE_SENTENCES
    out.update(lens128_top5_d0=float(page.top5[0]), lens128_top5_d6=float(page.top5[-1]))
    return out


def measure_saliency(ctx: Context) -> dict:
    s32 = agreement_over_texts(ctx.model, ctx.tokenizer, ctx.heldout[:32])
    means = {r["measure"]: r["mean_tau"] for r in s32.records()}
    attention = [v for k, v in means.items() if k.startswith("attention")]
    finite = s32.taus[s32.taus.isfinite()]
    s24 = agreement_over_texts(ctx.model, ctx.tokenizer, ctx.heldout[:24])  # the page's AGREEMENT_SENTENCES
    means24 = [r["mean_tau"] for r in s24.records() if r["compares"] == "magnitudes"]
    return {"sal_grad_input": means["gradient × input"], "sal_grad_delta": means["gradient × (input − [MASK])"],
            "sal_grad_input_signed": means["gradient × input, signed"],
            "sal_grad_delta_signed": means["gradient × (input − [MASK]), signed"],
            "sal_attn_min": min(attention), "sal_attn_max": max(attention),
            "sal_sentence_min": float(finite.min()), "sal_sentence_max": float(finite.max()),
            "sal24_min": min(means24), "sal24_max": max(means24)}


def measure_predictions(ctx: Context) -> dict:

    # the Predictions page's "Compare on many sentences" on every held-out sentence, seed 0
    batch = encode(ctx.tokenizer, ctx.heldout, max_length=64)
    masked = mask_batch(ctx.tokenizer, batch, MaskingConfig(), seeds.generator(0), trace=False)
    pred = predict_masked(ctx.model, ctx.tokenizer, masked.input_ids, batch.attention_mask, masked.labels, k=1,
                          decisions=masked.decisions)
    rows = {r["decision"]: r for r in summarize_by_decision(pred)}
    n = len(pred.positions)
    return {"pred_sentences": len(ctx.heldout), "pred_all_loss": pred.mean_loss, "pred_all_n": n, "pred_all_ppl": math.exp(pred.mean_loss),
            "pred_mask_loss": rows["MASK"]["mean_loss"], "pred_mask_n": rows["MASK"]["count"],
            "pred_mask_ppl": math.exp(rows["MASK"]["mean_loss"]),
            "pred_unchanged_loss": rows["UNCHANGED"]["mean_loss"], "pred_unchanged_n": rows["UNCHANGED"]["count"]}


def measure_loss_page(ctx: Context) -> dict:
    counts = token_counts(ctx.tokenizer, ctx.texts, ctx.model.get_output_embeddings().weight.shape[0])

    def batch_at(seed):  # the Loss page's and the museum's batch: 8 workshop sentences
        return loss_batch(ctx.model, ctx.tokenizer, pick_sentences(ctx.texts, 8, seed), None, seed=seed, counts=counts)

    batch = batch_at(0)
    losses = batch_losses(batch)
    weighted = losses["weighted"]
    out = {"loss_weighted": float(weighted.loss), "loss_weighted_mean": weighted.diagnostics["mean_of_weighted"],
           "loss_mean_weight": float(weighted.diagnostics["target_weights"].mean()),
           "loss_full": float(losses["full"].loss), "loss_sampled": float(losses["sampled"].loss),
           "loss_sampled_cos": losses["sampled"].diagnostics["grad_cosine"]}
    ex = {e.key: e for e in run_exhibits(batch)}
    out.update({
        "museum_mask_only": ex["loss_only_at_mask"].wrong_value,
        "museum_no_true": ex["sampled_without_true_class"].wrong_value,
        "museum_no_true_cos": ex["sampled_without_true_class"].also[COSINE_BUGGY],
        "museum_lni": ex["labels_never_ignored"].wrong_value,
        "museum_lni_copy": ex["labels_never_ignored"].also["unselected: copying"],
        "museum_lni_special": ex["labels_never_ignored"].also["[CLS] / [SEP]"],
        "museum_lni_pad": ex["labels_never_ignored"].also["padding"],
        "museum_ignore": ex["wrong_ignore_index"].wrong_value,
        "museum_negpos": ex["negatives_over_positions"].wrong_value,
        "museum_negpos_cos": ex["negatives_over_positions"].also[COSINE_BUGGY],
    })
    for seed in (1, 2):
        e = labels_never_ignored(batch_at(seed))
        out[f"museum_lni_s{seed}"], out[f"loss_full_s{seed}"] = e.wrong_value, e.right_value
    return out


def measure_sampled(ctx: Context) -> dict:
    checks = [sampled_softmax_check(ctx.model, ctx.tokenizer, ctx.texts, seed=s) for s in range(5)]
    first = checks[0]
    out = {"target_m": first["M"], "target_loss": first["loss"], "target_full": first["full_loss"],
           "target_err": first["rel_error"], "target_cos": first["grad_cosine"],
           "target_err_min": min(c["rel_error"] for c in checks), "target_err_max": max(c["rel_error"] for c in checks),
           "target_cos_min": min(c["grad_cosine"] for c in checks),
           "target_cos_max": max(c["grad_cosine"] for c in checks)}
    tf_default = sampled_softmax_check(ctx.model, ctx.tokenizer, ctx.texts, seed=0, config=SampledSoftmaxConfig(
        sampler="log_uniform", replacement=True, correction="tensorflow"))
    out.update(tfdef_loss=tf_default["loss"], tfdef_err=tf_default["rel_error"], tfdef_cos=tf_default["grad_cosine"])
    out["tf_unigram_loss"] = sampled_softmax_check(ctx.model, ctx.tokenizer, ctx.texts, seed=0, config=SampledSoftmaxConfig(
        correction="tensorflow"))["loss"]
    out["tf_loguni_loss"] = sampled_softmax_check(ctx.model, ctx.tokenizer, ctx.texts, seed=0, config=SampledSoftmaxConfig(
        sampler="log_uniform", correction="tensorflow"))["loss"]
    veldoria = gazetteer().sentences  # the Training page's default corpus
    vel = sampled_softmax_check(ctx.model, ctx.tokenizer, veldoria, seed=0)
    vel_tf = sampled_softmax_check(ctx.model, ctx.tokenizer, veldoria, seed=0, config=SampledSoftmaxConfig(
        sampler="log_uniform", replacement=True, correction="tensorflow"))
    out.update(vel_m=vel["M"], vel_loss=vel["loss"], vel_full=vel["full_loss"], vel_err=vel["rel_error"],
               vel_cos=vel["grad_cosine"], vel_tfdef_loss=vel_tf["loss"], vel_tfdef_err=vel_tf["rel_error"],
               vel_tfdef_cos=vel_tf["grad_cosine"])
    # the K sweep on the target batch (sampled_softmax_check's batch and generator), with replacement
    V = ctx.model.get_output_embeddings().weight.shape[0]
    counts = token_counts(ctx.tokenizer, ctx.texts, V)
    batch = loss_batch(ctx.model, ctx.tokenizer, pick_sentences(ctx.texts, 32, 0), None, seed=0, max_length=128,
                       counts=counts)
    rows = sampled_softmax_sweep(batch.hidden, batch.weight, batch.bias, batch.targets, ks=[256, 4096, V],
                                 config=SampledSoftmaxConfig(replacement=True), counts=counts,
                                 generator=batch.generator(SWEEP_PURPOSE))  # the page's SWEEP_DRAWS draws
    short = {"importance": "is", "tensorflow": "tf", "none": "none"}
    for r in rows:
        k = "v" if r["K"] == V else str(r["K"])
        out[f"sweep_{short.get(r['correction'], r['correction'])}_{k}"] = r["loss"]
        if r["K"] == 256 and r["correction"] == "importance":
            out.update(sweep_draws=r["draws"], sweep_is_256_err=r["rel_bias"], sweep_is_256_se=r["rel_bias_se"],
                       sweep_is_256_spread=r["rel_spread"])
    return out


def measure_training(ctx: Context) -> dict:
    texts = gazetteer_texts(from_scratch=False)
    out = {}

    def runs(lesson):  # the Training page's run of the lesson with every setting left alone
        base = base_config(lesson, from_scratch=False, texts=texts, seed=0)
        variants = lesson_variants(lesson, base, from_scratch=False)
        results = train_variants(ctx.model, ctx.tokenizer, texts.train, variants, eval_texts=texts.held_out)
        return [results[name] for name in variants]

    def evals(result):
        return {e["step"]: e["loss"] for e in result.evals}

    fast = runs("lr_too_high")
    noclip, clip, sane = (evals(r) for r in fast)
    out.update(lr_start=noclip[0], lr_noclip_5=noclip[5], lr_clip_5=clip[5], lr_noclip_25=noclip[max(noclip)],
               lr_clip_25=clip[max(clip)], lr_sane_25=sane[max(sane)])
    for key, result in (("noclip", fast[0]), ("clip", fast[1])):  # the gradient norm (before clipping) at its peak
        peak = max(result.steps, key=lambda row: row["grad_norm"])
        out[f"lr_{key}_grad_peak"], out[f"lr_{key}_grad_peak_step"] = peak["grad_norm"], peak["step"]
    late = Counter(p["predictions"][0]["tokens"][0] for r in fast[:2] for entry in r.probes if entry["step"] >= 5
                   for p in entry["probes"])  # every first guess of both fast runs from step 5 on
    out["lr_fast_guesses"] = ", ".join(f'"{word}"' for word, _ in late.most_common())
    masking = runs("masking")
    dynamic, static = (evals(r) for r in masking)
    out.update(mask_static_train_end=masking[1].steps[-1]["loss"],
               mask_dynamic_right=probes_right(masking[0].probes[-1], "new")[0],
               mask_static_right=probes_right(masking[1].probes[-1], "new")[0])
    out.update(mask_dynamic_end=dynamic[max(dynamic)], mask_static_end=static[max(static)], mask_end_step=max(dynamic))
    facts_texts, variants = default_run(model_is_trained=True)  # what Start does (benchmark P7's run)
    facts = next(iter(train_variants(ctx.model, ctx.tokenizer, facts_texts.train, variants,
                                     eval_texts=facts_texts.held_out).values()))
    norms = [row["grad_norm"] for row in facts.steps]
    cfg = facts.config
    for s in probe_set_scores(facts.probes):
        out.update({f"facts_{s.group}_top1_start": s.top1_then, f"facts_{s.group}_top1": s.top1_now,
                    f"facts_{s.group}_top5_start": s.top5_then, f"facts_{s.group}_top5": s.top5_now,
                    "facts_probes": s.probes})
        if s.group == "control":
            out.update(facts_control_veldoria_start=s.facts_then, facts_control_veldoria=s.facts_now)
    out.update(facts_focus_p=cfg.focus_mlm_probability, facts_precision="bf16" if resolve_amp(cfg.amp, "cpu") == "bf16"
               else "fp32")
    out.update(facts_drop=facts.evals[0]["loss"] - facts.evals[-1]["loss"],
               facts_grad_min=min(norms), facts_grad_max=max(norms),
               facts_focus_start=facts.evals[0]["focus_loss"], facts_focus_end=facts.evals[-1]["focus_loss"],
               facts_loss_start=facts.evals[0]["loss"], facts_loss_end=facts.evals[-1]["loss"],
               facts_end_step=facts.evals[-1]["step"], facts_focus_n=facts.evals[-1]["focus_tokens"],
               facts_right_by_step=", ".join(str(probes_right(e, "new")[0]) for e in facts.probes),
               facts_right_steps=", ".join(str(e["step"]) for e in facts.probes))
    bound = binding(probe_set_scores(facts.probes))
    out.update(facts_binding_top1=bound.top1_now, facts_binding_top5=bound.top5_now)
    out.update(facts_split(ctx, facts_texts, facts))
    # the same run at the seed the guide teaches with (the Training page takes the sidebar's seed)
    guide_cfg = {name: replace(c, seed=GUIDE_SEED) for name, c in variants.items()}
    guide = next(iter(train_variants(ctx.model, ctx.tokenizer, facts_texts.train, guide_cfg,
                                     eval_texts=facts_texts.held_out).values()))
    out.update(guide_seed=GUIDE_SEED, guide_facts_drop=guide.evals[0]["loss"] - guide.evals[-1]["loss"],
               guide_focus_start=guide.evals[0]["focus_loss"], guide_focus_end=guide.evals[-1]["focus_loss"])
    guide_sets = probe_set_scores(guide.probes)
    for s in guide_sets:
        out.update({f"guide_{s.group}_top1": s.top1_now, f"guide_{s.group}_top5": s.top5_now})
        if s.group == "control":
            out.update(guide_control_veldoria=s.facts_now, guide_control_top1_start=s.top1_then,
                       guide_control_top1_end=s.top1_now, guide_control_top5_start=s.top5_then,
                       guide_control_top5_end=s.top5_now)
    twin = {s.group: s.invented_now - s.facts_now for s in guide_sets}
    out.update(guide_other_twin=twin[OTHER], guide_control_twin=twin["control"])
    guide_bound = binding(guide_sets)
    out.update(guide_binding_top1=guide_bound.top1_now, guide_binding_top5=guide_bound.top5_now)
    # what the guide asks the teacher to try: the same run with the facts' words masked as every token
    off_cfg = {name: replace(c, seed=GUIDE_SEED, focus_mlm_probability=0.0) for name, c in variants.items()}
    off = next(iter(train_variants(ctx.model, ctx.tokenizer, facts_texts.train, off_cfg,
                                   eval_texts=facts_texts.held_out).values()))
    off_sets = {s.group: s for s in probe_set_scores(off.probes)}
    new = off_sets["new"]
    out.update(guide_off_new_top1=new.top1_now, guide_off_new_top5=new.top5_now,
               guide_off_control_veldoria=off_sets["control"].facts_now,
               guide_off_binding=binding(list(off_sets.values())).top1_now)
    # "What did it learn?" at the guide's seed: Veldoria alone beside Veldoria and its twins, on the same batches
    bind_base = base_config("bind", from_scratch=False, texts=facts_texts, seed=GUIDE_SEED)
    bind_variants = lesson_variants("bind", bind_base, from_scratch=False)
    bind = train_variants(ctx.model, ctx.tokenizer, facts_texts.train, bind_variants, eval_texts=facts_texts.held_out)
    for key, name in zip(("alone", "twins"), BIND_VARIANTS):
        sets = {s.group: s for s in probe_set_scores(bind[name].probes)}
        out.update({f"bind_{key}_binding": binding(list(sets.values())).top1_now,
                    f"bind_{key}_other": sets[OTHER].top1_now, f"bind_{key}_flips": sets["control"].facts_now,
                    f"bind_{key}_new": sets["new"].top1_now})
    return out


def facts_split(ctx: Context, texts, facts) -> dict:
    """The facts run's held-out loss split by the hidden token (the name's pieces, the facts' words, the rest),
    at step 0 (the default model) and at the end (the run's trained copy), on the run's own held-out set."""
    cfg = facts.config
    train_chunks, eval_chunks, _ = split_chunks(ctx.tokenizer, texts.train, cfg, texts.held_out)  # as the loop does
    vocab = ctx.model.get_output_embeddings().weight.shape[0]
    eval_set = make_eval_set(eval_chunks, cfg, ctx.tokenizer,
                             buckets=frequency_buckets(chunk_token_counts(train_chunks, vocab)),
                             micro_batch=cfg.batch_size // cfg.grad_accum_steps,
                             vocab_size=min(len(ctx.tokenizer), vocab))
    groups = {"name": word_piece_ids(ctx.tokenizer, NAME_FORMS), "facts": eval_set.focus_ids}
    start, end = (loss_by_group(m, eval_set, groups, amp=cfg.amp) for m in (ctx.model, facts.model))
    for split, e in ((start, facts.evals[0]), (end, facts.evals[-1])):  # the same positions the run scored
        total = sum(g["part"] for g in split.values())
        if abs(total - e["loss"]) > 0.01 or split["facts"]["tokens"] != e["focus_tokens"]:
            raise RuntimeError(f"the split ({total:.4f}, {split['facts']['tokens']} fact positions) is not the "
                               f"run's held-out set ({e['loss']:.4f}, {e['focus_tokens']})")
    out = {"split_n": sum(g["tokens"] for g in end.values())}
    for key in ("name", "facts", "rest"):
        out.update({f"split_{key}_n": end[key]["tokens"], f"split_{key}_start": start[key]["loss"],
                    f"split_{key}_end": end[key]["loss"], f"split_{key}_part": start[key]["part"] - end[key]["part"]})
    out["split_without_name"] = out["split_facts_part"] + out["split_rest_part"]
    return out


def measure_masking(ctx: Context) -> dict:
    out = {}
    for seed in (144, 3):  # the Masking page's "Mask the corpus", 10,000 tokens, token strategy
        s = masking_statistics(ctx.tokenizer, ctx.texts, MaskingConfig(), target_tokens=10_000, seed=seed).selection
        out[f"z{seed}_z"] = s.z
        if seed == 144:
            out.update(z144_selected=s.selected, z144_tokens=s.units, z144_rate=s.rate)
    return out


def measure_lessons27(ctx: Context) -> dict:
    """Issue 27's lessons as the Training page runs them at the guide's seed with every other setting alone."""
    from mlm_core.lessons.training_lessons import CLEAN, TWIN, filmstrip_frames

    texts = gazetteer_texts(from_scratch=False)

    def run(lesson):
        base = base_config(lesson, from_scratch=False, texts=texts, seed=GUIDE_SEED)
        return train_variants(ctx.model, ctx.tokenizer, texts.train, lesson_variants(lesson, base, from_scratch=False),
                              eval_texts=texts.held_out)

    def tail(result, window=10):
        values = [r["loss"] for r in result.steps if r.get("loss") is not None][-window:]
        return sum(values) / len(values)

    out = {}
    rates = run("mask_rate")
    out["rate_step"] = rates["mask 15%"].evals[-1]["step"]
    for p in (15, 30, 40):
        out[f"rate_{p}"] = rates[f"mask {p}%"].evals[-1]["loss"]
    out.update(rate_train_15=tail(rates["mask 15%"]), rate_train_40=tail(rates["mask 40%"]))
    bugs = run("bugs")  # the default bug: labels never set to -100
    out.update(bug_clean_train=tail(bugs[CLEAN]), bug_twin_train=tail(bugs[TWIN]),
               bug_clean_held=bugs[CLEAN].evals[-1]["loss"], bug_twin_held=bugs[TWIN].evals[-1]["loss"])
    (film,) = run("filmstrip").values()
    index = next(i for i, p in enumerate(film.probes[-1]["probes"]) if p.get("group") == "new")
    frames = filmstrip_frames(film.probes, index)
    out["film_rank0"] = frames[0].answer_rank
    out["film_first"] = next((int(f.label) for f in frames if f.answer_rank == 1), float("nan"))
    return out


GROUPS: dict[str, Callable[[Context], dict]] = {
    "build": measure_build, "grammar": measure_grammar, "heads": measure_heads, "lens": measure_lens, "saliency": measure_saliency,
    "predictions": measure_predictions, "loss_page": measure_loss_page, "sampled": measure_sampled,
    "training": measure_training, "masking": measure_masking, "lessons27": measure_lessons27,
}


# --------------------------------------------------------------------------------------------
# Sentences whose words (not only numbers) depend on the measurement
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SentenceCheck:
    where: str  # the sentence, as the docs say it
    needs: tuple[str, ...]  # the claims it reads
    holds: Callable[[dict], bool]  # on the raw measured values


def _gaps_vary(gaps: list[float]) -> bool:
    """Every gap positive (the buggy loss above the right one), and not one constant shift (> 0.3 nats apart)."""
    return min(gaps) > 0 and max(gaps) - min(gaps) > 0.3


SENTENCE_CHECKS = (
    SentenceCheck("workshop.md Grammar: on the first pair the model prefers the grammatical sentence, by a margin at or "
                  "above the page's line for a weak preference (WEAK_MARGIN): 'On this pair, yes'", ("grammar_first_margin",),
                  lambda v: v["grammar_first_margin"] >= WEAK_MARGIN),
    SentenceCheck("lessons.md Inside: on this model [CLS], not [SEP], is where most heads 'park' their attention; "
                  "workshop.md: 'mostly [CLS]'", ("heads_cls_n", "heads_sep_n"),
                  lambda v: v["heads_cls_n"] > 36 and v["heads_cls_n"] > v["heads_sep_n"]),
    SentenceCheck("lessons.md Inside: neither the gradient nor attention is a reliable stand-in for leave-one-out "
                  "(every mean tau below 0.5)", ("sal_grad_input", "sal_grad_delta", "sal_attn_max"),
                  lambda v: max(v["sal_grad_input"], v["sal_grad_delta"], v["sal_attn_max"]) < 0.5),
    SentenceCheck("workshop.md Inside: the answer climbs in the later layers (top 5 after the last layer above the "
                  "embeddings')", ("lens128_top5_d0", "lens128_top5_d6"),
                  lambda v: v["lens128_top5_d6"] > v["lens128_top5_d0"]),
    SentenceCheck("lessons.md Predictions: the unchanged positions lower the perplexity ([MASK]-only loss above the "
                  "all-positions loss, unchanged far below)", ("pred_all_loss", "pred_mask_loss", "pred_unchanged_loss"),
                  lambda v: v["pred_mask_loss"] > v["pred_all_loss"] > v["pred_unchanged_loss"]),
    SentenceCheck("lessons.md Loss: on seeds 0-4 the default's error is within 10% of the full loss at every seed, and "
                  "its cosine misses 0.9 narrowly at some (lowest under 0.9, above 0.85; highest at least 0.9)",
                  ("target_err_min", "target_err_max", "target_cos_min", "target_cos_max"),
                  lambda v: max(abs(v["target_err_min"]), abs(v["target_err_max"])) <= 0.10
                  and 0.85 < v["target_cos_min"] < 0.9 <= v["target_cos_max"]),
    SentenceCheck("lessons.md Loss: with replacement TensorFlow's and no correction cross the full loss between "
                  "K = 256 and 4096 and keep rising", ("sweep_tf_256", "sweep_tf_4096", "sweep_tf_v", "sweep_none_256",
                                                      "sweep_none_4096", "sweep_none_v", "target_full"),
                  lambda v: all(v[f"sweep_{c}_256"] < v["target_full"] < v[f"sweep_{c}_4096"] < v[f"sweep_{c}_v"]
                                for c in ("tf", "none"))),
    SentenceCheck("lessons.md Bug museum: the labels-never-ignored loss lands above the right one at seeds 0, 1, 2, "
                  "by gaps that differ by more than 0.3 nats (not a constant shift)",
                  ("museum_lni", "loss_full", "museum_lni_s1", "loss_full_s1", "museum_lni_s2", "loss_full_s2"),
                  lambda v: _gaps_vary([v["museum_lni"] - v["loss_full"], v["museum_lni_s1"] - v["loss_full_s1"],
                                        v["museum_lni_s2"] - v["loss_full_s2"]])),
    SentenceCheck("lessons.md Bug museum: sampled softmax without the true class: its gradient has nothing to do "
                  "with the full loss's (|cosine| < 0.3); negatives over positions look far too good (below the "
                  "estimate)", ("museum_no_true_cos", "museum_negpos", "loss_sampled"),
                  lambda v: abs(v["museum_no_true_cos"]) < 0.3 and v["museum_negpos"] < v["loss_sampled"] / 10),
    SentenceCheck("lessons.md Training: clipping does not rescue the run (clipped lr 1e-2 ends > 1 nat above the "
                  "sensible lr), and the loss blows up within five steps", ("lr_clip_25", "lr_sane_25", "lr_noclip_5",
                                                                           "lr_start"),
                  lambda v: v["lr_clip_25"] > v["lr_sane_25"] + 1 and v["lr_noclip_5"] > v["lr_start"] + 1),
    SentenceCheck("lessons.md Training: static masks overfit where dynamic ones keep improving (static ends higher)",
                  ("mask_static_end", "mask_dynamic_end"), lambda v: v["mask_static_end"] > v["mask_dynamic_end"]),
    SentenceCheck("lessons.md Training (facts) / the Training page's caption: most of the held-out fall is the "
                  "invented name, not the facts (the name's part above the facts' and the rest's together)",
                  ("split_name_part", "split_without_name"),
                  lambda v: v["split_name_part"] > v["split_without_name"]),
    SentenceCheck("lessons.md Training (masking): the static run memorises its masks (its training loss ends below "
                  "0.5, far under its held-out loss) and gets fewer probes right than the dynamic one",
                  ("mask_static_train_end", "mask_static_end", "mask_static_right", "mask_dynamic_right"),
                  lambda v: v["mask_static_train_end"] < 0.5 < v["mask_static_end"]
                  and v["mask_static_right"] < v["mask_dynamic_right"]),
    SentenceCheck("workshop.md / lessons.md Training: the default run answers more questions in new words than before "
                  "training and has them in its top 5 more often still (top-1 at the end above step 0's, top-5 >= top-1)",
                  ("facts_new_top1", "facts_new_top1_start", "facts_new_top5", "guide_new_top1", "guide_new_top5"),
                  lambda v: v["facts_new_top1"] > v["facts_new_top1_start"] and v["facts_new_top5"] >= v["facts_new_top1"]
                  and v["guide_new_top5"] >= v["guide_new_top1"]),
    SentenceCheck("workshop.md / lessons.md Training: at the guide's seed the default run binds at least half the "
                  "questions in new words to Veldoria's name, but more than one in five real-country questions get an "
                  "invented country's word (Veldoria's or a twin's), so the page's sentence says it learned which "
                  "answers go with the names it read, not facts about Veldoria",
                  ("guide_binding_top1", "guide_control_veldoria", "guide_control_twin", "facts_probes"),
                  lambda v: v["guide_binding_top1"] >= BINDING_SHARE * v["facts_probes"]
                  and v["guide_control_veldoria"] + v["guide_control_twin"] > CONTROL_SHARE * v["facts_probes"]),
    SentenceCheck("workshop.md Training: after the default run (seed 144) a twin's word comes first in more than one "
                  "in five questions about Pellastra, and the real countries lost answers the base model had in its top 5",
                  ("guide_other_twin", "guide_control_top5_start", "guide_control_top5_end", "facts_probes"),
                  lambda v: v["guide_other_twin"] > CONTROL_SHARE * v["facts_probes"]
                  and v["guide_control_top5_end"] < v["guide_control_top5_start"]),
    SentenceCheck("workshop.md Training (What did it learn?): learning from Veldoria alone binds few facts (under half) "
                  "and gives the other name Veldoria's words about as often as Veldoria; with its twins it binds at least "
                  "half", ("bind_alone_binding", "bind_twins_binding", "bind_alone_other", "bind_twins_other",
                           "facts_probes"),
                  lambda v: v["bind_alone_binding"] < BINDING_SHARE * v["facts_probes"] <= v["bind_twins_binding"]
                  and v["bind_alone_other"] > v["bind_twins_other"]),
    SentenceCheck("workshop.md Training: with the facts' words masked as every token the run answers fewer questions in "
                  "new words first (seed 144)", ("guide_off_new_top1", "guide_new_top1"),
                  lambda v: v["guide_off_new_top1"] < v["guide_new_top1"]),
    SentenceCheck("workshop.md Training (Should you mask 15%?): 40% ends below 15% on the frozen mask, while its "
                  "training loss is the higher one (harder questions, not comparable)",
                  ("rate_15", "rate_40", "rate_train_15", "rate_train_40"),
                  lambda v: v["rate_40"] < v["rate_15"] and v["rate_train_40"] > v["rate_train_15"]),
    SentenceCheck("workshop.md Training (Bugs that train): the buggy twin's training loss ends far below the clean "
                  "run's (by more than 1 nat) while its held-out loss is no better",
                  ("bug_clean_train", "bug_twin_train", "bug_clean_held", "bug_twin_held"),
                  lambda v: v["bug_twin_train"] < v["bug_clean_train"] - 1 and v["bug_twin_held"] >= v["bug_clean_held"]),
    SentenceCheck("workshop.md Training (The guess over time): the capital starts in the thousands and becomes the "
                  "first guess during the run", ("film_rank0", "film_first"),
                  lambda v: v["film_rank0"] >= 1000 and v["film_first"] == v["film_first"]),
    SentenceCheck("lessons.md Loss: at K = 256 the K sweep (with replacement, importance sampling) shows a mean error the "
                  "draws can measure (more than 2 standard errors from 0: the page says 'mean error', not 'no error "
                  "measurable')", ("sweep_is_256_err", "sweep_is_256_se"),
                  lambda v: abs(v["sweep_is_256_err"]) > 2 * v["sweep_is_256_se"]),
    SentenceCheck("lessons.md Training / workshop.md: the held-out loss falls by more than 1 nat; clipping at "
                  "BERT's 1.0 would fire on every step; the facts lesson's clip (25) sits above a healthy run",
                  ("facts_drop", "facts_grad_min", "facts_grad_max"),
                  lambda v: v["facts_drop"] > 1 and v["facts_grad_min"] > 1 and v["facts_grad_max"] < 25),
)


def sentence_checks(raw: dict) -> list[str]:
    """One line per sentence check whose claims were all measured: OK, or FALSE (reword the sentence)."""
    lines = []
    for check in SENTENCE_CHECKS:
        if all(n in raw for n in check.needs):
            lines.append(f"- {'OK' if check.holds(raw) else 'FALSE: reword'}: {check.where}")
    return lines


# --------------------------------------------------------------------------------------------
# The table
# --------------------------------------------------------------------------------------------
def table(markers: list[Marker], measured: dict[str, str], root: Path = ROOT) -> tuple[list[str], int]:
    """Markdown rows (claim / where / quoted / measured / verdict) and how many are STALE."""
    rows = ["| claim | where quoted | quoted | measured | |", "|---|---|---|---|---|"]
    stale = 0
    for m in markers:
        where = f"{m.path.relative_to(root)}:{m.line}"
        if m.id not in CLAIM_BY_ID:
            verdict, value = "UNKNOWN CLAIM", "—"
        elif m.id not in measured:
            verdict, value = "not measured", "—"
        else:
            value = measured[m.id]
            verdict = "OK" if value == m.quoted.strip() else "STALE"
        stale += verdict in ("STALE", "UNKNOWN CLAIM")
        rows.append(f"| `{m.id}` | {where} | {m.quoted} | {value} | {verdict} |")
    return rows, stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the marked numbers in docs/*.md")
    ap.add_argument("--only", nargs="+", choices=list(GROUPS), help="measure only these groups")
    ap.add_argument("--skip", nargs="+", choices=list(GROUPS), default=[], help="leave these groups out")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    markers = find_markers()
    unknown = unknown_markers(markers)
    if unknown:
        print("Markers without a claim: " + ", ".join(f"{m.id} ({m.path.name}:{m.line})" for m in unknown),
              file=sys.stderr)
    wanted = {m.id for m in markers}
    groups = [g for g in (args.only or GROUPS) if g not in args.skip
              and any(c.group == g and c.id in wanted for c in CLAIMS)]
    ctx = Context()
    raw: dict = {}
    for group in groups:
        start = time.perf_counter()
        raw.update(GROUPS[group](ctx))
        print(f"<!-- {group}: {time.perf_counter() - start:.1f} s -->", file=sys.stderr, flush=True)
    measured = {k: CLAIM_BY_ID[k].fmt(v) if k in CLAIM_BY_ID else str(v) for k, v in raw.items()}
    rows, stale = table(markers, measured)
    print("\n".join(rows))
    print(f"\n{len(markers)} markers, {stale} STALE or unknown; groups measured: {', '.join(groups)}")
    checks = sentence_checks(raw)
    if checks:
        print("\nSentences around the numbers (a FALSE one needs new words, not only new numbers):")
        print("\n".join(checks))
    if args.write:
        values = {k: v for k, v in measured.items() if k in CLAIM_BY_ID}
        for path in DOCS:
            n = rewrite(path, values)
            print(f"{path.relative_to(ROOT)}: {n} value(s) rewritten")
    false = any("FALSE" in line for line in checks)
    return 1 if false or (stale and not args.write) else 0


if __name__ == "__main__":
    raise SystemExit(main())
