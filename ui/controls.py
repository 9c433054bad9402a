"""Widget groups that return plain values: the sentence or batch a lesson computes on, the example sentence
picker, token pills, the page's model (the sidebar's or one trained in this session), and "press to measure" results.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import streamlit as st
from streamlit.runtime import scriptrunner

from mlm_core.bundled import workshop_sentences
from mlm_core.data import Encoded, clip_text, encode, split_sentences
from mlm_core.errors import MLMLabError
from mlm_core.lessons.loss_lab import LossBatch, loss_batch, pick_sentences
from ui.share_state import Field
from mlm_core.measure import MeasurementBusyError, background_priority, measurement_turn, return_free_memory
from mlm_core.predict import with_mask_token
from mlm_core.server_budget import ServerBudget
from mlm_core.session_models import TrainedModels, trained_models_budget
from mlm_core.vocab import VocabCache, vocabularies_budget
from ui.chips import markdown_text, pill_labels
from ui.loaders import cached_corpus_counts
from ui.messages import language_note, show_error
from ui.session import client_id, session_alive_check
from ui.settings import KEYS, Settings

BATCH_SOURCES = ("Workshop corpus", "Your text")


def batch_sentences_controls(prefix: str, seed: int, *, n: int = 8, max_chars: int = 4_000) -> list[str]:
    """The batch a lesson page computes on: n workshop sentences chosen by the seed, or the learner's own."""
    source = st.radio("Batch", BATCH_SOURCES, horizontal=True, key=f"{prefix}_source",
                      help=f"The workshop batch is {n} consecutive corpus sentences, chosen by the seed.")
    if source == BATCH_SOURCES[0]:
        return pick_sentences(workshop_sentences(), n, seed)
    st.session_state.setdefault(f"{prefix}_text", st.session_state.get(KEYS.sentence) or "")
    text, clipped = clip_text(st.text_area("Your sentences (one batch row per sentence)", key=f"{prefix}_text",
                                           height=100), max_chars)
    if clipped:
        st.info(f"Only the first {max_chars:,} characters are used.")
    return split_sentences(text)[:n]


def encode_or_stop(tokenizer, text: str, *, max_tokens: int, clipped: bool = False) -> Encoded:
    """One sentence encoded for a page (at most ``max_tokens``), or a message and the end of this run; a note
    when the text was cut (``clipped``: already cut to the page's character limit)."""
    try:
        encoded = encode(tokenizer, text, max_length=max_tokens)
    except MLMLabError as exc:
        show_error(exc)
        st.stop()
    if clipped or encoded.truncated[0]:
        st.info(f"Only the first {max_tokens} tokens are used.")
    return encoded


def sentence_or_stop(tokenizer, text: str, *, max_chars: int, max_tokens: int, settings: Settings, model,
                     empty: str = "The sentence is empty: type one above.",
                     typed_blanks: bool = False) -> tuple[str, Encoded]:
    """The one sentence a page computes on: ``text`` clipped to ``max_chars``, the language note, then encoded (at most
    ``max_tokens``); the ``empty`` warning and the end of this run when there is no text. ``typed_blanks``: a typed
    ``[MASK]`` or ``<mask>`` becomes this tokenizer's mask token (``predict.with_mask_token``). Returns (text, encoded)."""
    text, clipped = clip_text(text, max_chars)
    if not text:
        st.warning(empty)
        st.stop()
    language_note(text, settings.model_name, model)
    encoded = encode_or_stop(tokenizer, with_mask_token(tokenizer, text) if typed_blanks else text,
                             max_tokens=max_tokens, clipped=clipped)
    return text, encoded


def token_pills(label: str, tokens: list[str], options: list[int], *, key: str, help: str | None = None) -> list[int]:
    """Pills to pick tokens by position (``options``), returned sorted; labels escaped (pills render markdown), a
    repeated token numbered (``chips.pill_labels``)."""
    labels = pill_labels(tokens, options)
    chosen = st.pills(label, options, selection_mode="multi", format_func=lambda i: markdown_text(labels[i]), key=key,
                      help=help)
    return sorted(chosen or [])


def loss_batch_controls(prefix: str, settings: Settings, model, tokenizer, rule, *, n: int, max_chars: int) -> LossBatch:
    """The batch the Loss page and the Bug museum compute on (one batch for the same seed, text and masking rule):
    the batch picker, then ``mlm_core.lessons.loss_lab.loss_batch``; a message and the end of the run if it cannot be made."""
    texts = batch_sentences_controls(prefix, settings.seed, n=n, max_chars=max_chars)
    if not texts:
        st.warning("There is no text: type at least one sentence, or use the workshop corpus.")
        st.stop()
    counts = cached_corpus_counts(settings.model_name, model.get_output_embeddings().weight.shape[0], tokenizer)
    try:
        return loss_batch(model, tokenizer, texts, rule, seed=settings.seed, counts=counts)
    except MLMLabError as exc:
        show_error(exc)
        st.stop()


STALE_MEASUREMENT = "The model, sizes or seed changed since this was measured: press the button again."


def heavy_click(compute: Callable[[], Any]) -> Any:
    """``compute()``, a click that computes a lot (a measurement, a sweep, a corpus, a vocabulary), run as the server
    wants it: in its turn in the server's one queue of heavy clicks (``mlm_core.measure.measurement_turn``, one place
    per client; while it waits the page says how many are ahead), in a thread of its own at a background priority
    (``measure.background_priority``: a fresh thread, so the OpenMP workers torch starts for it inherit the priority,
    and nothing needs raising back, which a server not run as root may not do), skipped when the session has gone
    by its turn, and with the memory it freed given back to the system (``measure.return_free_memory``). The thread
    may draw on the page (a progress bar): it carries the page run's context. A full queue or a second place for the
    same client is a warning, and the page run ends there; any other exception comes back to the caller."""
    notice = st.empty()
    client, alive, context = client_id(), session_alive_check(), scriptrunner.get_script_run_ctx()
    out: dict[str, Any] = {}

    def waiting(ahead: int) -> None:
        notice.info(f"Waiting for your turn: {ahead} heavy computation{'s' if ahead != 1 else ''} ahead of you on "
                    "this server (they take turns, so that every page stays quick and measured times stay "
                    "honest).", icon="⏳")

    def work() -> None:
        try:
            with measurement_turn(client, on_wait=waiting):
                notice.empty()
                if alive is not None and not alive():  # the tab closed while it waited: nobody to show it to
                    out["gone"] = True
                    return
                with background_priority():
                    out["value"] = compute()
        except BaseException as exc:  # noqa: BLE001 - handed back to the page's thread
            out["error"] = exc
        finally:
            return_free_memory()

    thread = threading.Thread(target=work, name="mlmlab-heavy-click", daemon=True)
    if context is not None:
        scriptrunner.add_script_run_ctx(thread, context)
    thread.start()
    thread.join()
    error = out.get("error")
    if isinstance(error, MeasurementBusyError):
        notice.empty()
        show_error(error, "warning")
        st.stop()
    if error is not None:
        raise error
    if out.get("gone"):
        st.stop()
    return out["value"]


def on_demand(label: str, key: str, spinner: str, inputs, compute):
    """A button that runs ``compute()`` as a heavy click (``heavy_click``) and keeps its result in the session
    with the ``inputs`` it was computed for; returns the kept result (or None), with a note when the inputs have
    changed since. A problem we can explain is shown and the last result stays."""
    state = st.session_state
    if st.button(label, key=f"{key}_run"):
        with st.spinner(spinner):
            try:
                state[key] = (inputs, heavy_click(compute))
            except MLMLabError as exc:
                show_error(exc)
    kept = state.get(key)
    if kept is None:
        return None
    measured_for, result = kept
    if measured_for != inputs:
        st.caption(STALE_MEASUREMENT)
    return result


CUSTOM_SENTENCE = "✏️ your own sentence"  # the example picker's choice when the sentence is none of its examples


def example_picker(examples: list[str], *, key: str, sentence_key: str, container=None, on_pick=None) -> None:
    """The "Pick an example" select box, in step with the sentence it fills (``st.session_state[sentence_key]``).

    It shows the example the sentence is (also when a shared link brought the sentence), or
    "your own sentence" when it is none of them; picking an example puts it into the sentence
    (then ``on_pick()`` is called, if given).
    """
    state = st.session_state
    text = (state.get(sentence_key) or "").strip()
    state[key] = next((e for e in examples if e == text), CUSTOM_SENTENCE)

    def use_example():
        if state[key] != CUSTOM_SENTENCE:
            state[sentence_key] = state[key]
            if on_pick is not None:
                on_pick()

    (container or st).selectbox("Pick an example", [*examples, CUSTOM_SENTENCE], key=key, on_change=use_example)


BASE_CHOICE = "base"  # the sidebar's model, in the trained-model picker


@st.cache_resource(show_spinner=False)
def server_budget() -> ServerBudget:
    """Every session's trained models together (``mlm_core.server_budget.ServerBudget``): one per server."""
    return trained_models_budget()


@st.cache_resource(show_spinner=False)
def vocab_server_budget() -> ServerBudget:
    """Every session's trained vocabularies together (``mlm_core.vocab.vocabularies_budget``): one per server."""
    return vocabularies_budget()


def vocab_cache(key: str) -> VocabCache:
    """This session's trained vocabularies (kept under ``key``), within the server's budget for every session's;
    what that budget took from this session is said once, here."""
    state = st.session_state
    cache = state.get(key)
    if cache is None:
        cache = state[key] = VocabCache(budget=vocab_server_budget(), client=client_id())
    for note in cache.take_notes():
        st.info(markdown_text(note), icon="🧩")
    return cache


def trained_models():
    """This session's trained models (``mlm_core.session_models.TrainedModels``), a finished Training run's included.

    The store lives in the session, so the copies go with it; the shared cached models are never replaced.
    It counts against the server's budget for every session's trained models; when that budget dropped
    one of this session's, the page says so.
    """
    state = st.session_state
    store = state.get(KEYS.trained_models)
    if store is None:
        store = state[KEYS.trained_models] = TrainedModels(budget=server_budget(), client=client_id())
    run = state.get(KEYS.training_run)
    notes = store.add_run(run) if run is not None and getattr(run, "keep_trained", False) else []
    for note in notes + store.take_notes():  # the run's copies are taken once it has finished, then nothing
        st.toast(markdown_text(note), icon="🧠")
        st.info(markdown_text(note), icon="🧠")
    return store


def trained_model_choice(model, tokenizer):
    """The page's model: the sidebar's, or one trained in this session. Returns ``(model, tokenizer, entry)``.

    The picker shows only when the session has trained models; ``entry`` is the chosen
    ``TrainedModel`` or None. A share link never carries the choice: a trained model lives in the
    session that trained it, so its id means nothing to anyone else.
    """
    state = st.session_state
    state.setdefault(KEYS.trained_choice, BASE_CHOICE)
    entries = {e.key: e for e in trained_models().entries()}
    if state.get(KEYS.trained_choice, BASE_CHOICE) not in (BASE_CHOICE, *entries):
        st.info("The trained model chosen here is one this session no longer keeps (it keeps the last few), "
                "so the sidebar's model is shown instead.", icon="🧠")
        state[KEYS.trained_choice] = BASE_CHOICE
    if not entries:
        return model, tokenizer, None
    labels = {BASE_CHOICE: f"{(getattr(model, 'mlmlab_info', None) or {}).get('label', 'The sidebar model')} (sidebar)",
              **{key: f"Trained: {e.label}" for key, e in entries.items()}}
    st.selectbox("Model on this page", list(labels), key=KEYS.trained_choice, format_func=labels.get,
                 help="Models you trained on the Training page stay in your session (the last few), beside "
                 "the sidebar's model. They are yours only: a shared link shows others the sidebar's model.")
    entry = trained_models().get(state[KEYS.trained_choice])  # get: now its most recent use
    return (model, tokenizer, None) if entry is None else (entry.model, entry.tokenizer, entry)
