"""The pages' explanations in mlm_core/lessons/text/*.md (issue 28 §2): every section a page asks for exists and
gets exactly the fields it needs, no section is left unused, and the view-models' sentences say what was measured."""

import ast
from pathlib import Path

import pytest

from mlm_core.lessons import efficiency, grammar, museum
from mlm_core.lessons.prose import TEXT_DIR, LessonText, fields, sections

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (sorted((ROOT / "pages").glob("*.py")) + sorted((ROOT / "mlm_core" / "lessons").glob("*.py"))
           + sorted((ROOT / "ui").glob("*.py")))  # ui.training_run draws the Training page's run


def _names(node) -> list[str]:
    """The section names a ``TEXT(...)`` argument can take: "a" if ... else "b" asks for both; f"strategy_{s}" for
    every section whose name starts "strategy_" (written "strategy_*")."""
    if isinstance(node, ast.IfExp):
        return _names(node.body) + _names(node.orelse)
    if isinstance(node, ast.JoinedStr):
        return [node.values[0].value + "*"]
    return [node.value]


def _matches(name: str, section: str) -> bool:
    return section.startswith(name[:-1]) if name.endswith("*") else section == name


def _text_calls():
    """(file, page, section, keyword names or None where ``**values`` passes more) for every ``TEXT(...)`` call."""
    calls = []
    for path in SOURCES:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        page = next((node.value.args[0].value for node in ast.walk(tree)
                     if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                     and getattr(node.value.func, "id", "") == "LessonText"), None)
        if page is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "TEXT":
                names = None if any(k.arg is None for k in node.keywords) else {k.arg for k in node.keywords}
                for name in _names(node.args[0]):
                    calls.append((path.name, page, name, names))
    return calls


CALLS = _text_calls()


def test_the_pages_read_their_explanations_from_lessons_text():
    pages = {page for _, page, _, _ in CALLS}
    assert {"predictions", "inside", "masking", "quiz", "tokenizer", "losses", "bug_museum", "efficiency",
            "grammar", "home"} <= pages
    assert pages == {path.stem for path in TEXT_DIR.glob("*.md")}  # no text file without its page


@pytest.mark.parametrize("source, page, name, names", CALLS, ids=[f"{c[0]}:{c[2]}" for c in CALLS])
def test_each_section_exists_and_gets_its_fields(source, page, name, names):
    text = sections(page)
    found = [section for section in text if _matches(name, section)]
    assert found, f"{source} asks {page}.md for a section {name!r} it does not have"
    for section in found:
        need = fields(text[section])
        if names is not None:  # one call for several sections passes what any of them needs
            assert (need <= names) if name.endswith("*") else (need == names), f"{page}.md's {section!r} needs {need}"
        if not fields(text[section]):
            assert LessonText(page)(section) == text[section]  # a literal brace would have to be doubled


def test_no_section_is_left_unused():
    unused = [(page, section) for page in {p for _, p, _, _ in CALLS} for section in sections(page)
              if not any(p == page and _matches(name, section) for _, p, name, _ in CALLS)]
    assert not unused, unused


def test_efficiency_says_why_the_loop_is_missing():
    rows = [{"path": "vectorised", "time_ms": 2.0, "speedup": 1.0, "loss_diff": 0.0, "masked": 300,
             "logits_values": 10},
            {"path": "gathered", "time_ms": 1.0, "speedup": 2.0, "loss_diff": 1e-7, "masked": 300, "logits_values": 5}]
    notes = efficiency.paths_notes(rows, repeats=3, positions=2048)
    assert len(notes) == 2 and f"more than {efficiency.LOOP_MAX_ROWS} selected rows" in notes[0]
    assert "2.0× faster" in notes[1] and "300 of 2048 positions" in notes[1] and "1.0e-07" in notes[1]
    slow = rows + [{"path": "loop", "time_ms": 8.0, "speedup": 0.25, "loss_diff": 0.0, "masked": 300,
                    "logits_values": 10}]
    (note,) = efficiency.paths_notes(slow, repeats=3, positions=2048)
    assert "The loop is 4.0× slower than the vectorised loss here." in note


def test_the_audit_table_names_the_exhibit_that_explains_a_failure():
    from mlm_core.lessons.audit import AuditCheck

    exhibit = museum.Exhibit(title="Labels never set to -100", wrong_value=1.0, right_value=2.0, unit="loss",
                             why="", key="labels_never_ignored")
    checks = [AuditCheck("labels", False, "0 of 10", "10 of 10", exhibit="labels_never_ignored"),
              AuditCheck("rate", True, "15%", "15%")]
    rows = museum.audit_rows(checks, [exhibit])
    assert [r["explained by exhibit"] for r in rows] == ["Labels never set to -100", ""]
    assert [r["result"] for r in rows] == ["❌ fail", "✅ pass"]
    assert [m["label"] for m in museum.exhibit_metrics(exhibit)] == ["❌ buggy code", "✅ correct code"]


def test_the_grammar_pairs_say_where_they_come_from():
    assert grammar.pair_source_note(True) == "Pairs are drawn from BLiMP (MLMLAB_BLIMP_DIR)."
    note = grammar.pair_source_note(False, "MLM Lab's pairs (verb number)")
    assert "not bundled" in note and note.endswith(" This one: MLM Lab's pairs (verb number).")
    assert "GPT-2 " in grammar.markers_note() and "RoBERTa-large" in grammar.markers_note()
