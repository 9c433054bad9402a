"""The model panel's view-model (issue 25 §2): how the bundled model was trained, read from its build record, and
what it does on everyday sentences, measured; and the held-out sentences corpus-level numbers are measured on."""

from __future__ import annotations

import json
import re

import pytest

from mlm_core.bundled import ASSETS_DIR, heldout_workshop_sentences, is_heldout_document, workshop_documents
from mlm_core.default_model import read_build_record
from mlm_core.lessons import model_card
from mlm_core.models import load_masked_lm


def _record(**stages_and_more):
    return {"steps": 100, "masking": {"strategy": "whole_word", "mlm_probability": 0.15, "mask": 0.8, "random": 0.1},
            **stages_and_more}


def test_the_story_names_each_objective_from_the_record():
    """No page mentioned the unlikelihood ("anti-copy") stage; the panel now reads it from the stages' commands."""
    plain = model_card.training_story(_record(stages=[{"command": "build --steps 100", "start_step": 0, "end_step": 100}]))
    assert "Masked-language modelling" in plain[0] and "whole-word masking, 15%" in plain[0]
    assert not any("anti-copy\" penalty" in s for s in plain) and any("No stage" in s for s in plain)
    penalised = model_card.training_story(_record(stages=[
        {"command": "build --steps 60", "start_step": 0, "end_step": 60},
        {"command": "build --anti-copy 2.0", "start_step": 60, "end_step": 80},
        {"command": "build --anti-copy 2.0", "start_step": 80, "end_step": 100}]))
    penalty = next(s for s in penalised if "anti-copy" in s)
    assert "steps 60 to 100" in penalty and "weight 2" in penalty and "Welleck" in penalty
    earlier = model_card.training_story(_record(stages=[], init_asset={"build": {"steps": 4400}}))
    assert any("earlier build (4,400 steps)" in s and "does not list" in s for s in earlier)
    earlier = model_card.training_story(_record(stages=[], init_asset={"build": {"steps": 4400, "stages": [
        {"command": "x --anti-copy 2"}]}}))
    assert any("earlier build (4,400 steps), which trained with the anti-copy penalty too" in s for s in earlier)
    chain = model_card.training_story(_record(stages=[], init_asset={"build": {"steps": 1000, "stages": [
        {"command": "x --anti-copy 0"}], "lineage": [{"steps": 4400, "stages": [{"command": "x --anti-copy 2"}]},
                                                 {"steps": 1267, "stages": [{"command": "x"}]}]}}))
    assert any("earlier build (6,667 steps in all, over a chain of 3 builds, each started from the one before), at least one of which trained with the anti-copy penalty" in s
               for s in chain)  # a penalty two builds back is still named (default_model.lineage)
    assert model_card.training_story(None) == []


def test_the_story_of_the_shipped_asset_matches_its_build_json():
    record = read_build_record()
    if not record:
        pytest.skip("no build record in assets/default_mlm")
    story = " ".join(model_card.training_story(record))
    weights = [float(w) for s in record.get("stages", []) for w in re.findall(r"--anti-copy[ =]([0-9.]+)", s["command"])]
    assert ("anti-copy\" penalty" in story) == any(w > 0 for w in weights)
    strategy = record["masking"]["strategy"].replace("_", "-")
    assert f"{strategy} masking" in story and f"{strategy} masking" in model_card.heldout_masking(record)


def test_repeat_scores_only_when_the_record_has_them():
    assert model_card.repeat_scores({"final_metrics": {"copy_rate": 0.1}}) is None
    scores = model_card.repeat_scores({"final_metrics": {"repeat_top1": 0.3, "repeat_top5": 0.6, "repeat_n": 42}})
    assert scores == {"n": 42, "top1": 0.3, "top5": 0.6}
    assert "42 sentences" in model_card.repeat_sentence(scores) and "top-1 30%" in model_card.repeat_sentence(scores)


def test_copy_sentences_are_unseen_and_the_check_is_the_models_first_guess():
    from tests.test_corpus import overlaps
    from tests.test_gazetteer import runs_of

    assert all(s.count("[MASK]") == 1 for s in model_card.COPY_SENTENCES)
    runs = runs_of(model_card.COPY_SENTENCES, 4)  # no run of 4 words shared with the corpora the build trains on
    for name in ("workshop_corpus.txt", "daily_life_corpus.txt", "daily_life_corpus_2.txt"):
        found = overlaps((ASSETS_DIR / name).read_text(encoding="utf-8"), runs)
        assert not found, (name, [runs[r] for r in found])
    model, tokenizer = load_masked_lm("tiny-random", device="cpu")
    checks = model_card.copy_checks(model, tokenizer)
    assert [c.sentence for c in checks] == list(model_card.COPY_SENTENCES)
    from mlm_core.default_model import fill_mask, is_copy
    for c in checks[:3]:  # the batched first guess is fill_mask's (one sentence at a time)
        assert c.guess == fill_mask(model, tokenizer, c.sentence, k=1)[0][0]
        assert c.copies == is_copy(c.sentence, [], c.guess)
    said = model_card.copy_sentence([model_card.CopyCheck("Bees make [MASK].", "bees", True),
                                     model_card.CopyCheck("Fish swim in the [MASK].", "water", False)])
    assert "in 1 of 2" in said and "→ **bees**" in said
    assert "none of its first guesses" in model_card.copy_sentence([model_card.CopyCheck("a [MASK].", "b", False)])
    assert "bert-base-uncased" in model_card.HUB_NOTE and "online" in model_card.HUB_NOTE


def test_heldout_sentences_are_the_builds_heldout_documents():
    """Issue 25 §3.5: corpus-level numbers used workshop_sentences()[:256], 254 of them in the default model's training
    documents. The held-out ones are the build's own rule (scripts/default_mlm_data.is_heldout)."""
    from scripts import default_mlm_data

    documents = workshop_documents()
    assert [is_heldout_document(d) for d in documents] == [default_mlm_data.is_heldout(d) for d in documents]
    held = heldout_workshop_sentences()
    assert held and len(held) == sum(len(d) for d in documents if default_mlm_data.is_heldout(d))
    record = read_build_record() or {}
    stats = (record.get("source_stats") or {}).get("workshop_heldout")
    if stats:
        assert len(held) == stats["sentences"]


def test_the_story_says_when_the_output_layer_was_untied():
    frozen = model_card.training_story(_record(settings={"emb_lr": 0.0, "output_lr": 0.0},
                                               trained="...; word embeddings (tied output layer) frozen"))
    assert any("the output layer BERT ties to them) stayed" in s for s in frozen)
    untied = model_card.training_story(_record(settings={"emb_lr": 0.0, "output_lr": 2e-5},
                                               trained="...; word embeddings frozen; output layer untied from them"))
    said = next(s for s in untied if "output layer" in s)
    assert "copy of them of its own and trained at learning rate 2e-05" in said and "stayed as the encoder" in said
    assert not any("ties to them) stayed" in s for s in untied)
