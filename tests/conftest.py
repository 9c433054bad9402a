"""Shared test fixtures and helpers (the environment, offline and fp32, is set in the root conftest.py)."""

import re
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tokenizer():
    """The bundled bert-base-uncased WordPiece tokenizer (offline)."""
    from mlm_core.bundled import load_default_tokenizer

    return load_default_tokenizer()


@pytest.fixture(autouse=True)
def _chdir_root(monkeypatch):
    """AppTest paths (pages/x.py) are relative to the repository root."""
    monkeypatch.chdir(ROOT)


def plain(text) -> str:
    """What a reader sees of markdown that ``ui.markdown_text`` escaped: without its backslashes and word joiners
    (a page shows text from a learner, a link or an error message that way)."""
    return re.sub(r"\\(.)", r"\1", str(text)).replace("\u2060", "")


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


class TinyMLMs:
    """Tiny masked LMs of several families with large random weights, and random masked batches for them.

    The head and predict tests need no tokenizer: ids are drawn from a vocabulary of ``VOCAB``.
    """

    VOCAB = 97
    B, T = 3, 12

    def config(self, arch: str):
        import transformers as tf

        common = dict(vocab_size=self.VOCAB, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
        if arch == "bert":
            return tf.BertConfig(hidden_size=32, max_position_embeddings=64, **common)
        if arch == "distilbert":
            return tf.DistilBertConfig(vocab_size=self.VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                       max_position_embeddings=64)
        if arch in ("roberta", "xlm-roberta", "camembert"):
            cls = {"roberta": tf.RobertaConfig, "xlm-roberta": tf.XLMRobertaConfig, "camembert": tf.CamembertConfig}[arch]
            return cls(hidden_size=32, max_position_embeddings=64, pad_token_id=1, **common)
        if arch == "albert":
            return tf.AlbertConfig(embedding_size=16, hidden_size=32, max_position_embeddings=64, **common)
        if arch == "electra":  # a head head.py does not know: exercises the fallback
            return tf.ElectraConfig(embedding_size=16, hidden_size=32, max_position_embeddings=64, **common)
        raise ValueError(arch)

    def model(self, arch: str, seed: int = 0):
        """A tiny masked LM with large random weights, so logits differ a lot between tokens."""
        import torch
        from transformers import AutoModelForMaskedLM

        with torch.random.fork_rng(devices=[]):
            model = AutoModelForMaskedLM.from_config(self.config(arch))
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        return model.eval()

    def batch(self, seed: int = 0, rate: float = 0.3):
        """(input_ids, attention_mask, labels), each (B, T): one padded row, at least one selected position."""
        import torch

        from mlm_core.masking import IGNORE_INDEX

        B, T, V = self.B, self.T, self.VOCAB
        g = torch.Generator().manual_seed(seed)
        input_ids = torch.randint(5, V, (B, T), generator=g)  # (B, T)
        attention_mask = torch.ones(B, T, dtype=torch.long)
        attention_mask[1, -3:] = 0  # one padded row
        selected = torch.rand(B, T, generator=g) < rate
        selected[0, 1] = True  # at least one selected position
        selected[1, -3:] = False
        labels = torch.where(selected, torch.randint(5, V, (B, T), generator=g), IGNORE_INDEX)
        return input_ids, attention_mask, labels


@pytest.fixture(scope="session")
def tiny_mlms():
    """Tiny masked LMs and batches for the head, predict and models tests (``tiny_mlms.model("bert")``)."""
    return TinyMLMs()


@pytest.fixture
def run_page(apptest):
    """Factory: ``run_page("pages/inside.py", ...)`` → that page's AppTest after one run without an exception
    (the arguments are ``apptest``'s)."""

    def run(path: str, **kwargs):
        at = apptest(path, **kwargs).run()
        assert not at.exception, at.exception
        return at

    return run


def _head_rows(M=12, V=50, H=8, seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(M, H, generator=g)
    weight = torch.randn(V, H, generator=g)
    bias = torch.randn(V, generator=g) * 0.1
    targets = torch.randint(V, (M,), generator=g)
    return hidden, weight, bias, targets


@pytest.fixture(scope="session")
def head_rows():
    """Factory for the loss tests: ``head_rows(M, V, H, seed)`` → random ``hidden`` (M, H), ``weight`` (V, H),
    ``bias`` (V,) and ``targets`` (M,), the same numbers for the same arguments."""
    return _head_rows


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): on a shared
    2-core machine, two spinning OpenMP threads per process make every step several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny():
    """The tiny random BERT (built from a config, no weights) on the CPU, one per test module."""
    from mlm_core.models import load_masked_lm

    return load_masked_lm("tiny-random", device="cpu")


# the training and DDP tests' corpus: eight short sentences, four times
SMALL_CORPUS = ["The cat sat on the mat.", "A dog ran in the park.", "The sun is hot in the day.",
                "The night is cold and dark.", "A bird sang in a tall tree.", "We ate bread and cheese at noon.",
                "The river runs past the old mill.", "She reads a book by the window."] * 4
SMALL_WORDS = sorted({w.strip(".,").lower() for s in SMALL_CORPUS for w in s.split()} | {".", ","})


def small_tokenizer():
    """A WordPiece tokenizer over SMALL_CORPUS's words only: a ~50-token vocabulary keeps tests fast."""
    from transformers import BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *SMALL_WORDS]
    return BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})


def small_model(tokenizer, seed=0):
    """A 2-layer, 32-wide BERT masked LM for ``tokenizer``, seeded without touching the caller's RNG."""
    from transformers import BertConfig, BertForMaskedLM

    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return BertForMaskedLM(config).eval()


def probe_panels_label_every_candidate(layout: dict, k: int, font_px: int) -> list[float]:
    """Each probe panel's height in px; plotly labels every one of k categories when it is >= k · 1.2 · font."""
    from mlm_core.figures import label_row_px

    plot_px = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    panels = [(layout[name]["domain"][1] - layout[name]["domain"][0]) * plot_px
              for name in layout if name.startswith("yaxis")]
    assert panels and all(p >= k * label_row_px(font_px) for p in panels), panels
    return panels
