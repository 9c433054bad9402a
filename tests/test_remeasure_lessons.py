"""scripts/remeasure_lessons.py: every marked number in the docs has a measurement (no measurement is run here)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("remeasure_lessons", ROOT / "scripts" / "remeasure_lessons.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


rm = _script()


def test_every_marker_in_the_docs_has_a_claim():
    markers = rm.find_markers()
    assert len(markers) > 50  # docs/lessons.md and docs/workshop.md are marked
    assert {m.path.name for m in markers} == {"lessons.md", "workshop.md"}
    assert rm.unknown_markers(markers) == [], "a marked number without a claim in scripts/remeasure_lessons.py"


def test_every_marker_is_well_formed():
    """An opening marker without its closing one on the same line would never be checked."""
    for path in rm.DOCS:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert line.count("<!-- m:") == len(rm.MARKER.findall(line)) == line.count("<!-- /m -->"), \
                f"{path.name}:{number}"


def test_every_claim_has_a_measurement_group():
    assert len({c.id for c in rm.CLAIMS}) == len(rm.CLAIMS)  # ids are unique
    assert {c.group for c in rm.CLAIMS} <= set(rm.GROUPS)


def test_sentence_checks_read_only_claims_that_exist():
    for check in rm.SENTENCE_CHECKS:
        assert set(check.needs) <= set(rm.CLAIM_BY_ID), check.where
    assert rm.sentence_checks({}) == []  # nothing measured: nothing claimed


def test_markers_stay_out_of_page_code():
    """Pages compute their numbers at run time; only the docs carry marked numbers."""
    for path in list((ROOT / "pages").glob("*.py")) + list((ROOT / "mlm_core").rglob("*.py")):
        assert "<!-- m:" not in path.read_text(encoding="utf-8"), path


def test_numbers_are_written_as_the_docs_write_them():
    assert rm.fixed(3)(-0.0861) == "−0.086" and rm.fixed(0)(10001) == "10,001"
    assert rm.percent(1)(-0.0213) == "−2.1" and rm.percent(0)(0.936) == "94"
    assert rm.signed(2)(3.241) == "+3.24" and rm.signed(2)(-0.001) == "−0.00"


def test_write_replaces_only_marked_values(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("loss <!-- m:loss_full -->2.553<!-- /m --> vs 2.553 and <!-- m:heads_cls_n -->47<!-- /m --> heads\n",
                   encoding="utf-8")
    assert rm.rewrite(doc, {"loss_full": "2.387", "heads_cls_n": "47"}) == 1
    assert doc.read_text(encoding="utf-8") == (
        "loss <!-- m:loss_full -->2.387<!-- /m --> vs 2.553 and <!-- m:heads_cls_n -->47<!-- /m --> heads\n")
    markers = rm.find_markers([doc])
    assert [(m.id, m.line, m.quoted) for m in markers] == [("loss_full", 1, "2.387"), ("heads_cls_n", 1, "47")]


def test_table_marks_stale_and_unknown_values(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- m:loss_full -->2.553<!-- /m --> <!-- m:nope -->1<!-- /m --> <!-- m:heads_cls_n -->48<!-- /m -->\n",
                   encoding="utf-8")
    rows, stale = rm.table(rm.find_markers([doc]), {"loss_full": "2.387", "heads_cls_n": "48"}, root=tmp_path)
    verdicts = [re.split(r"\s*\|\s*", row)[-2] for row in rows[2:]]
    assert verdicts == ["STALE", "UNKNOWN CLAIM", "OK"] and stale == 2
