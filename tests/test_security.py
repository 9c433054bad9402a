"""Loading safety and HTML escaping, checked by scanning the code (issue: reliability and security)."""

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import plain

ROOT = Path(__file__).resolve().parent.parent
# The project's own code only: its top-level script and package folders, never a virtual environment or other
# checkout that a user keeps inside the clone (README makes .venv there; its site-packages hold non-UTF-8 files).
PROJECT_CODE = ("app.py", "pages", "ui", "mlm_core", "scripts", "benchmarks")
CODE = sorted(p for name in PROJECT_CODE for p in ([ROOT / name] if name.endswith(".py") else (ROOT / name).rglob("*.py")))


def calls(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def keyword_value(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def call_name(call: ast.Call) -> str:
    f = call.func
    parts = []
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def test_code_was_found():
    names = {p.name for p in CODE}
    assert {"app.py", "chips.py", "masking.py"} <= names


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_remote_code_and_no_unsafe_torch_load(path):
    for call in calls(path):
        remote = keyword_value(call, "trust_remote_code")
        assert not (isinstance(remote, ast.Constant) and remote.value is True), f"{path}:{call.lineno} trust_remote_code=True"
        name = call_name(call)
        if name.endswith("torch.load") or name == "load" and "torch" in path.read_text():
            only = keyword_value(call, "weights_only")
            assert not (isinstance(only, ast.Constant) and only.value is False), f"{path}:{call.lineno} weights_only=False"
        assert not name.endswith("pickle.load") and not name.endswith("pickle.loads"), f"{path}:{call.lineno} pickle"


@pytest.mark.parametrize("path", CODE, ids=lambda p: str(p.relative_to(ROOT)))
def test_checkpoints_are_written_as_safetensors(path):
    for call in calls(path):
        name = call_name(call)
        assert not name.endswith("torch.save"), f"{path}:{call.lineno}: write checkpoints with safetensors"
        if name.endswith("save_pretrained"):
            safe = keyword_value(call, "safe_serialization")
            assert not (isinstance(safe, ast.Constant) and safe.value is False), f"{path}:{call.lineno}"


HTML_FILES = [p for p in CODE if re.search(r"unsafe_allow_html\s*=\s*True|st\.html\(", p.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("path", HTML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_that_write_html_escape_text(path):
    """Every file that renders raw HTML escapes text with html.escape (token and user text is never trusted)."""
    assert "html.escape" in path.read_text(encoding="utf-8") or "escape(" in path.read_text(encoding="utf-8")


def test_masking_page_shows_angle_brackets_once_escaped(run_page):
    """The token ``<`` reads ``<`` in the step-through line and in its chip, never ``&lt;`` (issue 16, item 12)."""
    import ui

    # [CLS] if a < : the fourth token is "<"
    at = run_page("pages/masking.py", state={ui.KEYS.sentence: "if a < b and c > d then stop", "masking_step": 4})
    line = next(m.value for m in at.markdown if m.value.startswith("**Token 4 of"))
    assert "`<`" in line and "&lt;" not in line and "&amp;" not in line
    chips = next(m.value for m in at.markdown if 'class="mlm-chips"' in m.value and "if" in m.value)
    assert "&lt;" in chips and "&amp;" not in chips  # escaped once (chip or "was:"): the browser shows <


# --------------------------------------------------------------------------- denial of service (issue 16, item 8)
def test_long_session_text_is_cut_before_it_is_cleaned(monkeypatch):
    """A pasted book (here 200k characters) costs the link code max_chars character checks, not 200k."""
    import types
    import unicodedata

    from ui import share_state

    looked_at = []
    counting = types.SimpleNamespace(category=lambda c: looked_at.append(c) or unicodedata.category(c))
    monkeypatch.setattr(share_state, "unicodedata", counting)
    field = next(f for f in share_state.FIELDS if f.name == "sentence")
    value = field.coerce("the cat sat\x07 on the mat. " * 8_000)
    assert 0 < len(value) <= field.max_chars and "\x07" not in value
    assert len(looked_at) <= 3 * field.max_chars  # the cut (2x, for dropped characters) first, then parse's check


# --------------------------------------------------------------------------- who may load which model (issue 16, items 5 and 6)
def test_access_rules_for_students_teachers_and_links(monkeypatch):
    from mlm_core.errors import ModelLoadError
    from mlm_core.model_access import check_access

    monkeypatch.delenv("MLMLAB_ALLOW_ANY_MODEL", raising=False)
    monkeypatch.setenv("MLMLAB_ALLOWED_MODELS", "bert-base-uncased, roberta-base")
    cached = ["someone/cached-mlm"]
    for name in (None, "default", "tiny-random", "bert-base-uncased", "someone/cached-mlm"):
        check_access(name, trusted=False, cached=cached)  # students and links get these
        check_access(name, trusted=False, from_link=True, cached=cached)
    for name in ("someone/bomb", "./my-model", "/etc"):
        with pytest.raises(ModelLoadError, match="MLMLAB_ALLOWED_MODELS"):
            check_access(name, trusted=False, cached=cached)
        with pytest.raises(ModelLoadError, match="link names"):
            check_access(name, trusted=True, from_link=True, cached=cached)  # even the teacher's own tabs
        check_access(name, trusted=True, cached=cached)  # the teacher, on the server's machine
    monkeypatch.setenv("MLMLAB_ALLOW_ANY_MODEL", "1")
    check_access("someone/bomb", trusted=False)
    with pytest.raises(ModelLoadError):
        check_access("x" * 300, trusted=True)


@pytest.fixture
def student(monkeypatch):
    """Sessions of this test connect from another machine (a classroom server)."""
    import ui

    monkeypatch.delenv("MLMLAB_ALLOW_ANY_MODEL", raising=False)
    monkeypatch.delenv("MLMLAB_ALLOWED_MODELS", raising=False)
    monkeypatch.setattr(ui.session, "session_is_local", lambda: False)


@pytest.fixture
def loads(monkeypatch):
    """The names load_masked_lm was asked for (tiny-random is loaded for anything else)."""
    from mlm_core import models

    asked, real = [], models.load_masked_lm

    def spy(name=None, **kwargs):
        asked.append(name)
        return real(name, **kwargs)

    monkeypatch.setattr(models, "load_masked_lm", spy)
    return asked


def test_student_cannot_make_the_server_load_an_arbitrary_model(student, loads, run_page):
    import ui

    at = run_page("pages/predictions.py", state={ui.KEYS.custom_model: "student/bomb"})
    assert any("not available on this shared server" in e.value for e in at.error)
    assert "student/bomb" not in loads
    labels = at.selectbox(key=ui.KEYS.model).options
    assert not any("needs download" in label for label in labels)  # the picker offers no downloads either


def test_a_link_never_loads_a_model_the_server_does_not_offer(apptest, loads):
    import ui

    at = apptest("pages/masking.py")
    at.query_params["model"] = "student/bomb"  # the teacher's own (local) session opens the link
    at.query_params["seed"] = "7"
    at.run()
    assert not at.exception
    assert at.session_state[ui.KEYS.model] != "student/bomb" and at.session_state[ui.KEYS.seed] == 7
    assert any("student/bomb" in i.value and "does not offer" in i.value for i in at.info)
    assert "student/bomb" not in loads


@pytest.mark.parametrize("name", ["x" * 300, "~nosuchuser_mlmlab/x"])
@pytest.mark.parametrize("page", ["pages/predictions.py", "pages/quiz.py"])
def test_hostile_model_names_show_a_message_not_a_traceback(page, name, run_page):
    import ui

    at = run_page(page, state={ui.KEYS.custom_model: name})
    assert any("not a model" in e.value for e in at.error)
    assert at.text_input(key=ui.KEYS.custom_model).max_chars == ui.MAX_MODEL_NAME_CHARS


# --------------------------------------------------------------------------- malformed uploads on every page (issue 16, item 9)
@pytest.mark.parametrize("page, state, uploader, file", [
    ("pages/bug_museum.py", {}, "museum_upload", ("batch.json", b"[" * 50_000 + b"]" * 50_000, "application/json")),
    ("pages/tokenizer.py", {"tokenizer_source": "upload"}, "tokenizer_upload",
     ("notes.jsonl", b'{"text": "a", "n": ' + b"9" * 5_000 + b"}", "application/json")),
    ("pages/training.py", {"training_source": "Upload a file"}, "training_upload",
     ("notes.csv", b'text\n"' + b"x\n" * 70_000, "text/csv")),
], ids=["museum-deep-json", "tokenizer-long-number", "training-open-quote"])
def test_malformed_uploads_show_a_clear_message(apptest, page, state, uploader, file):
    import ui

    at = apptest(page)
    for key, value in state.items():
        at.session_state[key] = value
    at.run()
    assert not at.exception
    at.file_uploader(key=uploader).set_value(file).run()
    assert not at.exception
    shown = [plain(e.value) for e in (*at.error, *at.warning)]  # as the reader sees the escaped message
    assert any(file[0] in text and ("nested too deeply" in text or "number too long" in text or "never closed" in text)
               for text in shown), shown


def test_mask_the_corpus_with_spans_is_bounded(apptest, monkeypatch):
    """Span masking, p = 1, 100k tokens took 10 s of pure Python per click (issue 16, item 8): bounded."""
    from mlm_core.lessons import masking_view

    asked, real = [], masking_view.masking_statistics

    def spy(*args, target_tokens, **kwargs):
        asked.append(target_tokens)
        return real(*args, target_tokens=1_000, **kwargs)  # the size asked for is what this test checks

    monkeypatch.setattr(masking_view, "masking_statistics", spy)
    at = apptest("pages/masking.py")
    at.session_state["masking_strategy"] = "span"
    at.session_state["masking_p"] = 1.0
    at.session_state["masking_stats_tokens"] = 100_000
    at.run()
    at.button(key="masking_stats_run").click().run()
    assert not at.exception
    assert asked and max(asked) <= 20_000  # pages/masking.py MAX_SPAN_TOKENS
    at.session_state["masking_strategy"] = "token"
    at.run()
    at.button(key="masking_stats_run").click().run()
    assert asked[-1] == 100_000  # the vectorised strategies keep the full range


def test_server_listens_on_this_machine_only_and_caps_messages():
    """Classroom mode is one flag (--server.address 0.0.0.0); by default nobody else can connect (item 11)."""
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))["server"]
    assert config["address"] == "127.0.0.1"
    assert 1 <= config["maxMessageSize"] <= 10 and config["maxUploadSize"] <= 5
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "--server.address 0.0.0.0" in readme and "MLMLAB_ALLOWED_MODELS" in readme


# --------------------------------------------------------------------------- a fresh server's first students (found by the load test)
FIRST_LOADS = """
import sys, threading, traceback
sys.path.insert(0, {root!r})
import mlm_core  # the first page run imports it (through ui)
from mlm_core.bundled import load_default_tokenizer
from mlm_core.models import load_masked_lm
from mlm_core.vocab import MIN_VOCAB_SIZE, train_tokenizer
jobs = {{
    "tokenizer": load_default_tokenizer,
    "default model": lambda: load_masked_lm(None, device="cpu"),
    "tiny model": lambda: load_masked_lm("tiny-random", device="cpu"),
    "vocabulary": lambda: train_tokenizer(["the cat sat on the mat"] * 20, MIN_VOCAB_SIZE),
}}
errors = []
def run(name):
    try:
        jobs[name]()
    except Exception:
        errors.append(name + ": " + traceback.format_exc(limit=1).strip().splitlines()[-1])
threads = [threading.Thread(target=run, args=(name,)) for name in [*jobs, *jobs]]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ERRORS:", errors)
"""


def test_first_loads_in_many_sessions_at_once_all_succeed(tmp_path):
    """Four students open pages on a fresh server: tokenizer, models and a vocabulary load at once.

    Before: transformers' lazily loaded classes failed in most threads ("cannot import name
    'AutoTokenizer' from 'transformers'"). A child process, so that nothing is imported yet.
    """
    import os
    import subprocess
    import sys

    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", FIRST_LOADS.format(root=str(ROOT))], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ERRORS: []" in proc.stdout, proc.stdout[-2000:]


# --------------------------------------------------------------------------- link and typed text is text (issue 29 item 5)
EVIL = "evil.example"
HOSTILE_LINK = {"seed": f"![](http://{EVIL}/x.png)", "p": f"[Quiz answers](http://{EVIL}/a)",
                "strategy": f"<img src=http://{EVIL}/y>", "model": f"[m](http://{EVIL}/m)", "view": f"www.{EVIL}"}
_UNESCAPED_LINK = re.compile(r"(?<!\\)\]\((?!\))|(?<!\\)!(?<!\\)\[|(?<!\\)<(?:img|a)\b|https?(?<!\\):|(?<!\\)" + re.escape(EVIL))


def markdown_bodies(at) -> list[str]:
    """Everything of an AppTest page that Streamlit renders as markdown: texts, boxes, labels, options."""
    bodies = []
    for kind in ("markdown", "caption", "info", "warning", "error", "success", "toast", "title", "header", "subheader"):
        bodies += [str(e.value) for e in at.get(kind)]
    bodies += [str(e.label) for e in at.get("expander")]
    for kind in ("radio", "pills", "segmented_control"):
        for widget in at.get(kind):
            bodies += [str(o) for o in getattr(widget, "options", [])]
    return bodies


def assert_shown_as_text(bodies: list[str]) -> None:
    """No link or image survives: the payload is there only with its punctuation escaped (and, where
    markdown-it is installed, rendering the bodies creates no <a> or <img> pointing at it)."""
    assert any(EVIL.replace(".", r"\.") in b for b in bodies), "the link's values are shown"
    for body in bodies:
        if "unsafe" in body or body.lstrip().startswith("<div"):  # the escaped HTML chips: tested elsewhere
            continue
        assert not _UNESCAPED_LINK.search(body), body
    for body in bodies:  # GitHub-flavoured autolinks are found after escapes are undone: none may be left
        undone = re.sub(r"\\(.)", r"\1", body)
        assert not re.search(r"(?i)https?://|www\.|[\w.+-]+@[\w-]+\.", undone), body
    try:
        from markdown_it import MarkdownIt
    except ImportError:  # pragma: no cover - the CommonMark check above still ran
        return
    rendered = MarkdownIt("commonmark").render("\n\n".join(bodies))
    assert not re.search(r"<(a|img)\b[^>]*" + re.escape(EVIL), rendered), rendered


@pytest.mark.parametrize("page", ["pages/masking.py", "pages/quiz.py", "pages/inside.py"])
def test_link_values_are_shown_as_text_never_as_links_or_images(apptest, page):
    """Issue 29 item 5: ?seed=![](http://…/x) made every browser that opened the link fetch a remote image, and
    ?p=[Quiz answers](http://…) put a clickable link in the app's own info box. The notice now shows them as
    the characters they are."""
    import ui

    at = apptest(page, query=HOSTILE_LINK).run()
    assert not at.exception
    notice = next(i.value for i in at.info if "cannot use" in i.value)
    joiner = ui.chips.WORD_JOINER
    assert rf"\!\[\]\(http\:{joiner}//evil\.example/x\.png\)" in notice and r"\[Quiz answers\]\(http\:" in notice
    assert_shown_as_text(markdown_bodies(at))


def test_typed_text_and_model_names_are_shown_as_text(apptest):
    """What a learner types reaches error boxes, captions and labels too: a model name, a sentence's tokens."""
    import ui

    at = apptest("pages/predictions.py", state={ui.KEYS.custom_model: f"[m](http://{EVIL}/m)"}).run()
    assert not at.exception and at.error
    assert_shown_as_text(markdown_bodies(at))
    at = apptest("pages/inside.py", state={"inside_sentence": f"The [MASK] ![](http://{EVIL}/p.png) sat."}).run()
    assert not at.exception
    bodies = markdown_bodies(at)
    assert not any(re.search(r"(?<!\\)!(?<!\\)\[", b) for b in bodies if not b.lstrip().startswith("<div"))
