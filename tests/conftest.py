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


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled bert-base-uncased WordPiece tokenizer (offline)."""
    from mlm_core.bundled import load_default_tokenizer

    return load_default_tokenizer()


@pytest.fixture(autouse=True)
def _chdir_root(monkeypatch):
    """AppTest paths (pages/x.py) are relative to the repository root."""
    monkeypatch.chdir(ROOT)


@pytest.fixture
def apptest():
    """Factory: ``apptest("pages/masking.py")`` → an AppTest of that page (not yet run), 120 s timeout."""
    from streamlit.testing.v1 import AppTest

    def make(path: str, timeout: float = 120):
        return AppTest.from_file(str(ROOT / path), default_timeout=timeout)

    return make
