"""Root test set-up, for every pytest run (``pytest``, ``pytest mlm_core``, ``pytest tests/x.py``): offline,
quiet, fp32, and the repository root importable. Fixtures live in tests/conftest.py."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("MLMLAB_MODEL", "tiny-random")
# Training's default precision ("auto") is measured per machine: bf16 where bf16 matmuls are faster.
# Tests that compare exact numbers must not depend on the machine, so the suite pins fp32;
# tests/test_precision.py unsets this to test the choice itself.
os.environ.setdefault("MLMLAB_AMP", "off")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
# What the server sets for itself (ui.page.configure_server), so in-process tests run as the server does; the
# browser tests' server gets none of it from here (tests/browser/conftest.py's Server drops it): it sets its own.
from ui.settings import SERVER_ENVIRONMENT  # noqa: E402

os.environ.update(SERVER_ENVIRONMENT)
