"""Lesson export: the JSON and zip builders are pure, strict JSON, and hold every part they were given."""

import csv
import io
import json
import zipfile

import plotly.graph_objects as go
import plotly.io as pio
import pytest
import torch

from mlm_core import Decision, MaskingConfig, encode, mask_batch
from mlm_core.lessons.export import (
    FORMAT, lesson_json, lesson_record, lesson_zip, masking_settings, safe_name, to_jsonable, zip_contents,
)
from mlm_core.lessons.masking_view import token_trace


def strict_loads(data: bytes):
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(data.decode("utf-8"), parse_constant=refuse)


@pytest.fixture(scope="module")
def masking_lesson(tokenizer):
    """What the Masking page exports: settings, the per-token trace, and a chart."""
    config = MaskingConfig(mlm_probability=0.4)
    encoded = encode(tokenizer, "The café sat on the mat — naïvely.")
    result = mask_batch(tokenizer, encoded, config, torch.Generator().manual_seed(3))
    row = {name: value[0] for name, value in vars(result).items() if name != "draws"}
    row["draws"] = {name: value[0] for name, value in result.draws.items()}
    trace = token_trace(encoded.tokens[0], {"special_tokens_mask": encoded.special_tokens_mask[0]}, row, config,
                        tokenizer.convert_ids_to_tokens)
    figure = go.Figure(go.Bar(x=list(result.counts()), y=list(result.counts().values())))
    return dict(settings=masking_settings(sentence="The café sat on the mat — naïvely.", seed=3, model=None,
                                          config=config),
                decisions=trace, losses={"full": 2.5, "weighted": float("nan")},
                curves=[{"variant": "full", "step": s, "loss": torch.tensor(3.0 - s)} for s in range(3)],
                link="http://localhost:8501/masking?seed=3&p=0.4"), figure


def test_to_jsonable():
    value = {"t": torch.tensor([[1, 2]]), "f": torch.tensor(0.5), "d": Decision.RANDOM, "nan": float("nan"),
             "inf": float("-inf"), "cfg": MaskingConfig(), 3: (1, {2})}
    out = to_jsonable(value)
    assert out["t"] == [[1, 2]] and out["f"] == 0.5 and out["d"] == "RANDOM"
    assert out["nan"] is None and out["inf"] is None
    assert out["cfg"]["mlm_probability"] == 0.15 and out["cfg"]["strategy"] == "token"
    assert out["3"] == [1, [2]]
    json.dumps(out, allow_nan=False)


def test_lesson_record_and_json(masking_lesson):
    parts, _ = masking_lesson
    record = lesson_record("Masking", **parts)
    assert record["format"] == FORMAT and record["page"] == "Masking"
    assert set(record) == {"format", "page", "link", "settings", "decisions", "losses", "curves"}
    data = lesson_json("Masking", **parts)
    loaded = strict_loads(data)
    assert loaded == record
    assert loaded["losses"] == {"full": 2.5, "weighted": None}
    assert loaded["settings"]["masking"]["mlm_probability"] == 0.4
    assert loaded["settings"]["sentence"] == "The café sat on the mat — naïvely."
    assert "café" in data.decode("utf-8")  # UTF-8, not \u escapes
    assert [row["decision"] for row in loaded["decisions"]][0] == "SPECIAL"  # [CLS], as the chips show it
    assert len(loaded["decisions"]) == len(parts["decisions"])
    assert loaded["curves"][2] == {"variant": "full", "step": 2, "loss": 1.0}
    assert lesson_json("Masking", **parts) == data  # pure: same input, same bytes
    assert "created" not in loaded and lesson_record("Loss", created="2026-01-01")["created"] == "2026-01-01"


def test_lesson_zip(masking_lesson):
    parts, figure = masking_lesson
    data = lesson_zip("Masking", figures={"Decision counts": figure, "Decision counts!": figure.to_dict()}, **parts)
    names = zip_contents(data)
    assert names == ["README.txt", "lesson.json", "decisions.csv", "losses.csv", "curves.csv",
                     "charts/decision_counts.json", "charts/decision_counts_2.json", "charts.html"]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert strict_loads(archive.read("lesson.json")) == strict_loads(lesson_json("Masking", **parts))
        decisions = list(csv.DictReader(io.StringIO(archive.read("decisions.csv").decode("utf-8"))))
        assert len(decisions) == len(parts["decisions"]) and "rule" in decisions[0]
        losses = list(csv.DictReader(io.StringIO(archive.read("losses.csv").decode("utf-8"))))
        assert losses == [{"name": "full", "value": "2.5"}, {"name": "weighted", "value": ""}]
        chart = pio.from_json(archive.read("charts/decision_counts.json").decode("utf-8"))
        assert list(chart.data[0].x) == list(figure.data[0].x)
        page = archive.read("charts.html").decode("utf-8")
        assert "toImageButtonOptions" in page and '"filename": "decision_counts"' in page
        assert page.count("<h2>") == 2
        assert "localhost:8501/masking?seed=3" in archive.read("README.txt").decode("utf-8")
    assert lesson_zip("Masking", figures={"Decision counts": figure}, **parts) == \
        lesson_zip("Masking", figures={"Decision counts": figure}, **parts)  # byte for byte


def test_lesson_zip_small_parts():
    data = lesson_zip("Training", curves={"step": [1, 2, 3], "loss": [3.0, 2.0, 1.5]},
                      tables={"Per variant!": [{"variant": "full", "loss": 1.5}]}, html=False,
                      figures={"loss": go.Figure()})
    assert zip_contents(data) == ["README.txt", "lesson.json", "curves.csv", "per_variant.csv", "charts/loss.json"]
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        rows = list(csv.DictReader(io.StringIO(archive.read("curves.csv").decode())))
        assert rows[1] == {"step": "2", "loss": "2.0"}
    assert zip_contents(lesson_zip("Home")) == ["README.txt", "lesson.json"]


def test_safe_name():
    assert safe_name("Loss: full vs sampled!") == "loss_full_vs_sampled"
    assert safe_name("../../etc/passwd") == "etc_passwd"
    assert safe_name("💥") == "item" and safe_name("", "chart") == "chart"
