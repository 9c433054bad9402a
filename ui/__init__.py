"""The app's shared UI: what every page sets up, loads, draws and shares. Pages write ``import ui``.

One idea per module, in the order a page meets them:

- ``page``: ``page_setup`` (the run through app.py, the sidebar, the share box, the title)
- ``settings``: the shared settings' session-state ``KEYS``, their defaults and ``Settings``
- ``loaders``: models, tokenizers and corpus counts loaded once per server, behind the access rule
- ``controls``: widget groups that return plain values (sentence, batch, example picker, token pills, trained
  model, on-demand)
- ``chips``: token chips and their legend, markdown that shows text as typed (all escaped)
- ``presenter``: charts (``chart``: every page's), tables and CSS a room can read
- ``share``: share links (``st.query_params``) and the masking rule they carry
- ``share_state``: what a link holds (its fields, their checks, each page's ``PAGE_LINKS``), without streamlit
- ``session``: who is connected; ``messages``: errors in words; ``navigation``: Streamlit's old-style runner

The names below are the ones pages use (``ui.token_chips(...)``); the rest live in their module.
"""

from ui.chips import (
    DECISION_STYLE,
    chip_html,
    decision_legend,
    inline_code,
    markdown_text,
    pill_labels,
    token_chips,
    value_chips,
)
from ui.controls import (
    BASE_CHOICE,
    CUSTOM_SENTENCE,
    batch_sentences_controls,
    encode_or_stop,
    example_picker,
    loss_batch_controls,
    heavy_click,
    vocab_cache,
    on_demand,
    sentence_or_stop,
    token_pills,
    trained_model_choice,
    trained_models,
)
from ui.loaders import (
    cached_blimp,
    cached_corpus_counts,
    cached_lab_pairs,
    cached_pair_score,
    cached_model,
    cached_tiny_for_vocab,
    cached_tokenizer,
    model_or_stop,
    tokenizer_or_stop,
)
from ui.live_class import class_answers_rows, class_question, join_panel, live_pointer
from ui.messages import language_note, show_error
from ui.page import page_setup
from ui.presenter import (
    PRESENTER_CHART_FONT_PX,
    PRESENTER_CHART_HEIGHT,
    PRESENTER_CHART_TITLE_PX,
    PRESENTER_TITLE_CHARS,
    advanced,
    chart,
    chart_height,
    metric_row,
    plotly_config,
    room_figure,
    room_large,
    table,
    wrap_title,
)
from ui.session import client_id, guess_client, session_alive_check
from ui.settings import DEFAULT_MODEL, KEYS, MAX_MODEL_NAME_CHARS, Settings
from ui.share import LINK_KEYS, share_link, share_url, shared_masking_config, sync_query_params

__all__ = [
    "BASE_CHOICE", "CUSTOM_SENTENCE", "DECISION_STYLE", "DEFAULT_MODEL", "KEYS", "LINK_KEYS",
    "MAX_MODEL_NAME_CHARS", "PRESENTER_CHART_FONT_PX", "PRESENTER_CHART_HEIGHT", "PRESENTER_CHART_TITLE_PX",
    "PRESENTER_TITLE_CHARS", "Settings", "advanced", "batch_sentences_controls", "cached_blimp",
    "cached_corpus_counts", "cached_lab_pairs", "cached_model", "cached_pair_score", "cached_tiny_for_vocab",
    "cached_tokenizer", "chart", "chart_height", "chip_html", "class_answers_rows", "class_question", "client_id",
    "decision_legend",
    "encode_or_stop", "join_panel", "live_pointer",
    "example_picker", "guess_client", "inline_code", "language_note", "loss_batch_controls", "markdown_text",
    "metric_row", "model_or_stop", "heavy_click", "vocab_cache", "on_demand", "page_setup", "pill_labels", "plotly_config", "room_figure",
    "room_large", "sentence_or_stop", "session_alive_check", "share_link", "share_url", "shared_masking_config",
    "show_error", "sync_query_params", "table", "token_chips", "token_pills", "tokenizer_or_stop",
    "trained_model_choice", "trained_models", "value_chips", "wrap_title",
]
