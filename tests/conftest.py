"""Shared test set-up: offline, quiet, and the repository root importable."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLMLAB_MODEL", "tiny-random")
# Training's default precision ("auto") is measured per machine: bf16 where bf16 matmuls are faster.
# Tests that compare exact numbers must not depend on the machine, so the suite pins fp32;
# tests/test_precision.py unsets this to test the choice itself.
os.environ.setdefault("MLMLAB_AMP", "off")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled bert-base-uncased WordPiece tokenizer (offline)."""
    from mlm_core.bundled import load_default_tokenizer

    return load_default_tokenizer()


@pytest.fixture(autouse=True)
def _chdir_root(monkeypatch):
    """AppTest paths (pages/x.py) are relative to the repository root."""
    monkeypatch.chdir(ROOT)


TINY_MODEL = "tiny-random"  # every page test runs on the tiny random BERT, built from a config (no weights)


@pytest.fixture
def apptest(monkeypatch):
    """Factory: ``apptest("pages/masking.py", state={...}, query={...})`` → an AppTest of that page (not yet run).

    The page starts on the tiny random BERT (``MLMLAB_MODEL``, the sidebar's default), with ``state``
    in its session and ``query`` in its address; 120 s timeout unless ``timeout`` says otherwise.
    """
    monkeypatch.setenv("MLMLAB_MODEL", TINY_MODEL)

    def make(path: str, timeout: float = 120, *, state: dict | None = None, query: dict | None = None):
        at = AppTest.from_file(str(ROOT / path), default_timeout=timeout)
        for key, value in (state or {}).items():
            at.session_state[key] = value
        at.query_params.update(query or {})
        return at

    return make


@pytest.fixture
def run_page(apptest):
    """Factory: ``run_page("pages/inside.py", ...)`` → that page's AppTest after one run without an exception
    (the arguments are ``apptest``'s)."""

    def run(path: str, **kwargs):
        at = apptest(path, **kwargs).run()
        assert not at.exception, at.exception
        return at

    return run
