"""The bundled default masked LM (issue #11): shipped weights, their cloze gain, fallbacks, clean sources."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from mlm_core import default_model as dm
from mlm_core.bundled import load_default_tokenizer
from mlm_core.head import HeadFallbackWarning
from scripts import default_mlm_data as bd

ROOT = Path(__file__).resolve().parent.parent
ASSET = ROOT / "assets" / "default_mlm"
CLOZE = ROOT / "assets" / "cloze.tsv"


@pytest.fixture(scope="module")
def cloze_rows():
    if not CLOZE.is_file():
        pytest.fail("assets/cloze.tsv is missing")
    rows = dm.read_cloze(CLOZE)
    assert len(rows) >= 100
    assert all(s.count("[MASK]") == 1 and answers for s, answers in rows)
    return rows


@pytest.fixture(scope="module")
def shipped():
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    model, tokenizer, info = dm.load_default_masked_lm(asset_dir=ASSET)
    return model, tokenizer, info


def test_shipped_weights_load_offline(shipped):
    model, tokenizer, info = shipped
    assert info["trained"] is True, info.get("warning")
    assert "warning" not in info
    assert not model.training
    assert info["label"] == dm.TRAINED_LABEL
    assert info["params"] > 20_000_000
    assert 0 < info["asset_bytes"] == (ASSET / dm.WEIGHTS_FILE).stat().st_size
    assert info["cloze_top5"] is not None and info["heldout_perplexity"] is not None
    # the output layer stays tied to the (package) word embeddings
    assert model.cls.predictions.decoder.weight.data_ptr() == model.bert.embeddings.word_embeddings.weight.data_ptr()
    record = json.loads((ASSET / dm.BUILD_FILE).read_text(encoding="utf-8"))
    for key in ("sources", "seed", "steps", "stages", "metrics_before", "final_metrics", "versions"):
        assert key in record
    assert {"workshop", "wordnet"} <= set(record["sources"]) <= set(bd.SOURCES_DOC)
    assert all(src.get("licence") for src in record["sources"].values())


def test_asset_holds_only_fp16_deltas():
    from safetensors import safe_open

    with safe_open(str(ASSET / dm.WEIGHTS_FILE), "pt") as f:
        keys = list(f.keys())
        assert keys and all(f.get_slice(k).get_dtype() == "F16" for k in keys)
    assert "bert.embeddings.word_embeddings.weight" not in keys  # rebuilt from the package


def test_shipped_beats_untrained_head_on_cloze(shipped, cloze_rows):
    model, tokenizer, _ = shipped
    untrained, _ = dm.untrained_masked_lm()
    trained = dm.cloze_eval(model, tokenizer, cloze_rows, k=5)
    base = dm.cloze_eval(untrained, tokenizer, cloze_rows, k=5)
    print(f"cloze top-1/top-5: untrained {base['top1']:.3f}/{base['top5']:.3f}, shipped {trained['top1']:.3f}/{trained['top5']:.3f}")
    assert trained["top5"] >= base["top5"] + 0.30
    assert trained["top1"] > base["top1"]


def test_sample_prediction_is_sensible(shipped):
    model, tokenizer, _ = shipped
    top = [t for t, _ in dm.fill_mask(model, tokenizer, "I drink a cup of [MASK] every morning.", k=5)]
    assert {"tea", "coffee", "milk", "water"} & set(top), top


def test_missing_asset_falls_back(tmp_path):
    model, tokenizer, info = dm.load_default_masked_lm(asset_dir=tmp_path / "nothing_here")
    assert info["trained"] is False
    assert info["label"] == dm.UNTRAINED_LABEL
    assert "No trained weights" in info["warning"]
    assert info["cloze_top5"] is None
    assert not model.training
    assert tokenizer.mask_token == "[MASK]"


@pytest.mark.parametrize("content", [b"", b"this is not a safetensors file", b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"])
def test_corrupt_asset_falls_back(tmp_path, content):
    (tmp_path / dm.WEIGHTS_FILE).write_bytes(content)
    (tmp_path / dm.BUILD_FILE).write_text("{}", encoding="utf-8")
    model, _, info = dm.load_default_masked_lm(asset_dir=tmp_path)
    assert info["trained"] is False
    assert "could not be read" in info["warning"]
    assert not model.training


def test_wrong_shape_or_unknown_tensor_falls_back(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"cls.predictions.bias": torch.zeros(7, dtype=torch.float16)}, str(tmp_path / dm.WEIGHTS_FILE))
    _, _, info = dm.load_default_masked_lm(asset_dir=tmp_path)
    assert info["trained"] is False and "shape" in info["warning"]
    save_file({"not.a.tensor": torch.zeros(3, dtype=torch.float16)}, str(tmp_path / dm.WEIGHTS_FILE))
    _, _, info = dm.load_default_masked_lm(asset_dir=tmp_path)
    assert info["trained"] is False and "unknown tensor" in info["warning"]


def test_env_var_points_the_loader_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv(dm.ASSET_ENV, str(tmp_path))
    assert dm.default_asset_dir() == tmp_path
    _, _, info = dm.load_default_masked_lm()
    assert info["trained"] is False and str(tmp_path) in info["warning"]


def test_cloze_eval_counts_hits(shipped):
    model, tokenizer, _ = shipped
    rows = [("The cat sat on the [MASK].", ["zzzznotaword"]), ("I drink a cup of [MASK] every morning.", ["tea", "coffee", "milk", "water"])]
    out = dm.cloze_eval(model, tokenizer, rows, k=5)
    assert out["n"] == 2 and out["rows"][0]["hitk"] is False
    assert out["top5"] == pytest.approx(0.5)


def test_is_copy_flags_repeated_sentence_words_only():
    s = "She poured milk into her [MASK] and stirred it."
    assert dm.is_copy(s, ["coffee", "tea"], "milk")  # a word of the sentence, not an answer
    assert dm.is_copy(s, ["coffee"], "MILK")  # case does not matter
    assert not dm.is_copy(s, ["coffee", "tea"], "coffee")  # an answer
    assert not dm.is_copy(s, ["coffee"], "juice")  # a wrong guess, but not a copy
    assert not dm.is_copy(s, ["coffee"], "mask")  # the [MASK] itself is not a word of the sentence
    assert not dm.is_copy(s, ["coffee"], "##k")  # word pieces never match whole words
    # a repeated word that the row accepts is a right answer, not a copy
    assert not dm.is_copy("The bees flew from flower to [MASK].", ["flower", "flowers"], "flower")
    assert dm.sentence_words("It's a [MASK], isn't it?") == {"it", "s", "a", "isn", "t"}


class _ScriptedMLM(torch.nn.Module):
    """A stand-in masked LM whose logits at every position are one fixed row per sentence.

    Its head is none that ``head.masked_lm_logits`` knows, so that computes the full logits and
    gathers the [MASK] rows: the path every unknown model takes.
    """

    config = SimpleNamespace(model_type="scripted")
    device = torch.device("cpu")

    def __init__(self, tokenizer, guesses):
        super().__init__()
        self.tok = tokenizer
        self.guesses = guesses  # one token per sentence, in order
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.calls = 0

    def forward(self, input_ids, attention_mask=None):
        out = torch.zeros(input_ids.shape[0], input_ids.shape[1], len(self.tok))  # (B, T, V)
        for b in range(input_ids.shape[0]):
            out[b, :, self.tok.convert_tokens_to_ids(self.guesses[self.calls + b])] = 10.0
        self.calls += input_ids.shape[0]
        return SimpleNamespace(logits=out)


def test_cloze_eval_copy_rate_on_a_hand_made_case():
    tokenizer = load_default_tokenizer()
    rows = [
        ("She poured milk into her [MASK].", ["coffee", "tea"]),  # guessed milk: a copy
        ("The sun rises in the [MASK].", ["east"]),  # guessed east: right
        ("He opened the door with a [MASK].", ["key"]),  # guessed door: a copy
        ("The cat sat on the [MASK].", ["mat", "cat"]),  # guessed cat: accepted, so no copy
    ]
    model = _ScriptedMLM(tokenizer, ["milk", "east", "door", "cat"])
    with pytest.warns(HeadFallbackWarning):
        out = dm.cloze_eval(model, tokenizer, rows, k=5)
    assert [r["copy"] for r in out["rows"]] == [True, False, True, False]
    assert out["copy_rate"] == pytest.approx(0.5)
    assert out["top1"] == pytest.approx(0.5)


def test_standard_error_is_binomial():
    assert dm.standard_error(0.5, 100) == pytest.approx(0.05)
    assert dm.standard_error(0.235, 149) == pytest.approx(0.0347, abs=1e-4)  # the ~4 points of issue 19
    assert dm.standard_error(0.0, 10) == 0.0


def test_build_scores_read_the_record():
    record = {"steps": 5000, "wall_time_s": 7200, "final_metrics": {
        "cloze_n": 100, "cloze_top1": 0.36, "cloze_top5": 0.7, "cloze_copy_rate": 0.08,
        "everyday_n": 75, "everyday_top5": 0.6, "dev_top1": 0.4, "heldout_loss": 3.1}}
    scores = dm.build_scores(record)
    assert scores["cloze_top1_se"] == pytest.approx(0.048)  # computed when the record has no SE
    assert scores["copy_rate"] == 0.08 and scores["everyday_top5"] == 0.6 and scores["hours"] == 2.0
    assert scores["steps"] == 5000 and "dev_top5" not in scores and "heldout_mask_loss" not in scores
    assert dm.build_scores(None) == {}
    record["final_metrics"].update(heldout_mask_loss=3.4, heldout_mask_perplexity=29.96)  # exported since [MASK]-only
    assert dm.build_scores(record)["heldout_mask_perplexity"] == 29.96
    record["init_asset"] = {"build": {"steps": 1000, "wall_time_s": 3600}}  # started from an earlier build
    assert dm.build_scores(record)["steps"] == 6000 and dm.build_scores(record)["hours"] == 3.0
    # issue 43 §4.4: the steps run in those hours apart from the exported checkpoints' steps
    record["stages"] = [{"start_step": 0, "end_step": 6500}]
    assert dm.build_scores(record)["steps_run"] == 7500 and dm.build_scores(record)["steps"] == 6000


def test_shipped_info_carries_the_build_scores(shipped):
    _, _, info = shipped
    record = json.loads((ASSET / dm.BUILD_FILE).read_text(encoding="utf-8"))
    assert info["scores"]["cloze_top5"] == record["final_metrics"]["cloze_top5"]
    assert info["scores"]["cloze_top1_se"] > 0 and info["scores"]["steps"] >= record["steps"]


# --------------------------------------------------------------------------- clean build sources
_W = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def _runs(rows, n=8):
    """Every n-word run (whole sentence when shorter) of every cloze sentence, mask filled with each answer."""
    runs = set()
    for sentence, answers in rows:
        for answer in answers:
            ws = _W.findall(sentence.replace("[MASK]", f" {answer} ").lower())
            size = min(n, len(ws))
            runs.update(tuple(ws[i : i + size]) for i in range(len(ws) - size + 1))
    return runs


def _overlaps(documents, runs):
    """Documents (joined, so runs across sentence boundaries count) sharing a run with the cloze set."""
    sizes = {len(r) for r in runs}
    found = []
    for doc in documents:
        ws = _W.findall(" ".join(doc).lower())
        for size in sizes:
            if any(tuple(ws[i : i + size]) in runs for i in range(len(ws) - size + 1)):
                found.append(" ".join(doc)[:120])
                break
    return found


def test_workshop_corpus_shares_no_run_with_the_cloze_set(cloze_rows):
    docs = bd.read_workshop_documents()  # raw, before the build's filter: the corpus itself is clean
    assert len(docs) > 50
    assert _overlaps(docs, _runs(cloze_rows)) == []


def _all_eval_rows(cloze_rows):
    """The reported cloze set plus the dev and everyday sets: none of them may be trained on."""
    return cloze_rows + dm.read_cloze(ROOT / "assets" / "cloze_dev.tsv") + dm.read_cloze(ROOT / "assets" / "cloze_everyday.tsv")


def test_wordnet_source_as_built_shares_no_run_with_the_cloze_set(cloze_rows):
    if not (bd.WORDNET_DIR / "data.noun").is_file():
        pytest.skip("wordnet-base is not installed here (it is only needed to build the model)")
    rows = _all_eval_rows(cloze_rows)
    sources, stats = bd.build_sources(rows)
    assert stats["wordnet"]["sentences"] > 100_000
    runs = _runs(rows)
    for name, docs in sources.items():
        assert _overlaps(docs, runs) == [], name


def test_workshop_corpus_shares_no_run_with_the_dev_and_everyday_sets(cloze_rows):
    rows = _all_eval_rows(cloze_rows)
    assert len(rows) >= len(cloze_rows) + 200
    assert _overlaps(bd.read_workshop_documents(), _runs(rows[len(cloze_rows):])) == []


def _tiny_npm_tarball(path, files):
    import io
    import tarfile

    with tarfile.open(path, "w:gz") as tf:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_npm_sources_are_read_into_sentences(tmp_path):
    sotu = _tiny_npm_tarball(tmp_path / "sotu.tgz", {
        "package/data/1790_george_washington_n.txt": "Fellow-Citizens: I meet you with pleasure. (Applause.) Is it "
        "not so? We\u2019ll see\u2014soon. The end.",
        "package/data/1790_george_washington_n.json": "{}",
        "package/README.md": "Not data. Never read.",
    })
    docs = bd.read_sotu_documents(sotu, per_doc=2)
    assert docs == [["Fellow-Citizens: I meet you with pleasure.", "Is it not so?"], ["We'll see - soon.", "The end."]]
    moby = _tiny_npm_tarball(tmp_path / "moby.tgz", {
        "package/data/chapter_1.json": json.dumps({"chapter": "1", "text": "Call me Ishmael. Some years ago I went.\n\nA new paragraph."}),
    })
    assert bd.read_moby_documents(moby) == [["Call me Ishmael.", "Some years ago I went."], ["A new paragraph."]]


def test_npm_sources_as_built_share_no_run_with_the_eval_sets(cloze_rows):
    """Checked where the build's npm tarballs are present (they are fetched only to build the model)."""
    tgz = {k: Path("/tmp/mlmlab_npm") / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
           for k, (name, version) in bd.NPM_SOURCES.items()}
    if not all(p.is_file() for p in tgz.values()):
        pytest.skip("the npm sources are not fetched here (only the build needs them)")
    rows = _all_eval_rows(cloze_rows)
    extra = {"sotu": bd.read_sotu_documents(tgz["sotu"]), "moby": bd.read_moby_documents(tgz["moby"])}
    sources, stats = bd.build_sources(rows, wordnet_dir=Path("/nonexistent"), extra=extra)
    assert stats["sotu"]["sentences"] > 50_000 and stats["moby"]["sentences"] > 5_000
    runs = _runs(rows)
    for name in ("sotu", "moby"):
        assert _overlaps(sources[name], runs) == [], name


def test_cloze_filter_catches_runs_and_short_sentences():
    filt = bd.ClozeFilter([("We walked along the quiet river at the end of the [MASK].", ["day"]),
                           ("Pass the [MASK], please.", ["salt"])])
    assert filt.hits("Yesterday we walked along the quiet river at the end of it.")  # 8-word run without the mask
    assert filt.hits("Please pass the salt, please, she said.")  # the whole short sentence
    assert not filt.hits("We walked along the river.")
    docs, dropped = filt.clean_documents([["They said we walked along the quiet", "river at the end of the day."]])
    assert dropped == 1 and len(docs[0]) == 1  # a run across a sentence boundary is caught too


# --------------------------------------------------------------------------- the Predictions page's model panel
def test_predictions_panel_shows_the_build_record(run_page):
    """The panel says how good the bundled model is: the build record's numbers, with standard errors."""
    import ui

    # the tests' default is the tiny random BERT
    at = run_page("pages/predictions.py", state={ui.KEYS.model: ui.DEFAULT_MODEL})
    record = json.loads((ASSET / dm.BUILD_FILE).read_text(encoding="utf-8"))
    scores = dm.build_scores(record)
    shown = {m.label: m.value for m in at.metric}
    assert shown["cloze top-1"] == f"{scores['cloze_top1']:.0%} ± {scores['cloze_top1_se']:.0%}"
    assert shown["cloze top-5"].startswith(f"{scores['cloze_top5']:.0%} ± ")
    rates = scores["copy_rates"].values()  # issue 43 §4.3: the range over the build's sets, not one set's rate
    assert shown["copies a word"] == f"{100 * min(rates):.0f}–{100 * max(rates):.0f}%"
    # issue 43 §4.4: the steps run in the build's hours, and apart from them the exported checkpoints' steps
    assert any(f"{scores['steps_run']:,} training steps run in {scores['hours']} h" in c.value
               and f"descend from {scores['steps']:,} of them" in c.value for c in at.caption)
    assert any("bert-base-uncased" in m.value and "online" in m.value for m in at.markdown)  # model_card.HUB_NOTE
    # issue 26 review: the panel shows what nothing chose the model by, BLiMP and the unseen everyday set
    blimp = record["final_metrics"]["blimp"]
    assert shown["BLiMP (PLL)"] == f"{100 * blimp['overall']:.1f}% ± {100 * blimp['overall_se']:.1f}%"
    assert shown["unseen everyday top-5"] == f"{record['final_metrics']['unseen_top5']:.0%}"
    assert shown["copies a word (unseen)"] == f"{record['final_metrics']['unseen_copy_rate']:.0%}"
    assert any("sets the checkpoint was not chosen on" in c.value and "not untouched" in c.value
               for c in at.caption)  # which row a teacher should quote, and how far to trust it
