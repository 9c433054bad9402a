"""The settings every page shares: their session-state keys (one place, no typos), defaults and value.

A page gets a ``Settings`` from ``ui.page_setup``; the other shared entries are read and written
under ``KEYS.<name>`` (the share link holds several of them: ``ui.share.LINK_KEYS``).
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MODEL = "default"  # the widget value for the bundled offline model (model_name None)
MAX_MODEL_NAME_CHARS = 200  # mlm_core.model_access.MAX_NAME_CHARS: longer names are refused anyway
DEFAULT_SEED = 0
# What the server sets in its own environment at its first page run (ui.page.configure_server), whatever the
# shell it was started from holds; benchmarks/tokenizer_stress.py and the browser tests run with it too.
SERVER_ENVIRONMENT = {"TOKENIZERS_PARALLELISM": "false"}


class KEYS:
    """Names of the session-state entries several pages share (one place, no typos)."""

    model = "model_name"  # sidebar: "default", "tiny-random", a hub id or a local folder
    custom_model = "custom_model"  # sidebar: text of the "other model" box
    seed = "seed"  # sidebar: the seed every page uses
    presenter = "presenter"  # sidebar: large tokens and charts for a projector
    sentence = "sentence"  # the current sentence, shared by Masking, Predictions and Quiz
    masking = "masking"  # the Masking page's last result: dict(tokens, encoded, result, config, seed)
    trained_tokenizer = "trained_tokenizer"  # Tokenizer page → Training page: a mlm_core.vocab.TrainedVocab
    training_run = "training_run"  # the Training page's mlm_core.jobs.Run; the sidebar shows it on every page
    trained_models = "trained_models"  # models trained in this session: mlm_core.session_models.TrainedModels
    trained_choice = "trained_choice"  # Predictions / Inside the model: "base" or a trained model's key
    model_failed = "_model_failed"  # (name, message): the sidebar's model that could not be loaded
    model_in_use = "_model_in_use"  # the last sidebar model that loaded (None: the bundled default)


STICKY_KEYS = (KEYS.presenter,)  # kept across page switches too, but never put in a link


@dataclass(frozen=True)
class Settings:
    """The sidebar's values, as every page uses them."""

    model_name: str | None  # None = the bundled default model
    seed: int
    presenter: bool
