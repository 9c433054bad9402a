"""Models and tokenizers loaded once per server (``st.cache_resource``), behind the classroom's access rule.

Cached objects are shared by every session: pages must never change them (a training run trains its
own copy). The access check runs for every session before the cache is asked.
"""

from __future__ import annotations

import os

import pandas as pd
import streamlit as st

from mlm_core import grammar
from mlm_core.bundled import load_default_tokenizer, workshop_sentences
from mlm_core.losses import token_counts
from mlm_core.model_access import any_model_allowed, check_access, is_builtin
from mlm_core import models  # models.load_masked_lm, so that a test's spy on it sees every load
from ui import session
from ui.messages import show_error
from ui.settings import DEFAULT_MODEL, Settings


def check_model_access(model_name: str | None, *, from_link: bool = False) -> None:
    """ModelLoadError unless this session may load the model (mlm_core.model_access: students on a
    classroom server get the default, tiny-random, cached models and MLMLAB_ALLOWED_MODELS)."""
    if is_builtin(model_name) or (model_name and model_name == os.environ.get("MLMLAB_MODEL")):
        return  # always there, or the teacher's own choice of default
    cached = [m["name"] for m in models.available_models() if m["offline"] and m["name"]]
    check_access(model_name, trusted=session.session_is_local() or any_model_allowed(), from_link=from_link,
                 cached=cached)


@st.cache_resource(show_spinner="Loading the model…", max_entries=4)
def _load_model(model_name: str | None):
    return models.load_masked_lm(model_name)


def cached_model(model_name: str | None):
    """(model, tokenizer) for a name, loaded once per server; pages must never change the model.

    The access check runs for every session before the cache is asked: a folder the teacher loaded
    is not thereby open to every student.
    """
    check_model_access(model_name)
    return _load_model(model_name)


@st.cache_resource(show_spinner="Loading the tokenizer…", max_entries=4)
def _load_default_tokenizer():
    return load_default_tokenizer()


def cached_tokenizer(model_name: str | None):
    """The tokenizer of a model; the offline ones without loading any weights."""
    if model_name in (None, DEFAULT_MODEL, "tiny-random"):
        return _load_default_tokenizer()
    return cached_model(model_name)[1]


@st.cache_resource(show_spinner="Building a tiny model for your vocabulary…", max_entries=4)
def cached_tiny_for_vocab(_vocab, vocab_key: str):
    """A tiny random BERT sized to a vocabulary trained on the Tokenizer page (keyed by ``vocab_key``)."""
    return models.load_masked_lm("tiny-random", tokenizer=_vocab.tokenizer)


@st.cache_resource(show_spinner="Counting tokens in the workshop corpus…", max_entries=4)
def cached_corpus_counts(model_name: str | None, vocab_size: int, _tokenizer):
    """Token counts (V,) of the workshop corpus, the Loss and Bug museum pages' class weights and proposal."""
    return token_counts(_tokenizer, workshop_sentences(), vocab_size)


def model_or_stop(settings: Settings):
    """(model, tokenizer) of the sidebar's model, or a clear message, the models that work offline now, and the
    end of this page run: every page loads its model this way."""
    try:
        return cached_model(settings.model_name)
    except Exception as exc:  # a bad id, no internet, a corrupt checkpoint: say so, never a traceback
        show_error(exc)
        st.markdown("These models work offline right now:")
        st.dataframe(pd.DataFrame([m for m in models.available_models() if m["offline"]]), hide_index=True)
        st.stop()


def tokenizer_or_stop(settings: Settings):
    """The sidebar model's tokenizer, or a clear message and the end of this page run."""
    try:
        return cached_tokenizer(settings.model_name)
    except Exception as exc:
        show_error(exc)
        st.stop()


@st.cache_resource(show_spinner="Reading BLiMP…", max_entries=2)
def _read_blimp(folder: str):
    return tuple(grammar.read_blimp(folder))


def cached_blimp():
    """BLiMP's pairs when ``MLMLAB_BLIMP_DIR`` names a copy of its data folder (read once per server), else None."""
    folder = grammar.blimp_folder()
    return _read_blimp(str(folder)) if folder is not None else None


@st.cache_resource(show_spinner=False)
def cached_lab_pairs():
    """MLM Lab's own minimal pairs (``assets/grammar_pairs.tsv``)."""
    return tuple(grammar.read_lab_pairs())


@st.cache_data(max_entries=256, show_spinner="Scoring both sentences…")
def cached_pair_score(model_key: str, pair: tuple[str, str], _model, _tokenizer, word_l2r: bool = False):
    """``grammar.score_pairs`` of one pair, kept per model (``model_key``: the sidebar's model or a trained one);
    ``word_l2r``: PLL-word-l2r instead."""
    return grammar.score_pairs(_model, _tokenizer, [pair], word_l2r=word_l2r)[0]
