"""Lesson export, for every page: what a page showed, as one JSON file or a zip to take home.

A lesson record holds the settings (sentence, seed, masking rule, model), the per-token decisions,
the losses, the training curves and any other tables, plus the link that reproduces the view.
``lesson_json`` writes it as one JSON document; ``lesson_zip`` adds a CSV per table, each chart as
Plotly JSON, and ``charts.html``: the charts, interactive, with Plotly's own camera button to save
each as a PNG in the browser (no server-side image export). Builders are pure: the same input gives
the same bytes.

>>> record = lesson_record("Masking", settings={"seed": 3}, losses={"full": 2.5})
>>> record["format"], record["page"], record["losses"]
('mlm-lab-lesson/1', 'Masking', {'full': 2.5})
"""

from __future__ import annotations

import csv
import dataclasses
import enum
import html as html_lib
import io
import json
import math
import re
import zipfile
from pathlib import PurePath
from typing import Any, Mapping

import plotly.graph_objects as go
import plotly.io as pio

FORMAT = "mlm-lab-lesson/1"
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same lesson gives the same zip, byte for byte


def to_jsonable(value: Any) -> Any:
    """Plain JSON values for anything a page holds: tensors, dataclasses, enums, NaN (→ null), figures."""
    if isinstance(value, enum.Enum):  # before int: Decision is an IntEnum, and its name is what learners read
        return value.name
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if hasattr(value, "to_plotly_json"):  # a plotly figure
        return json.loads(value.to_json())
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return to_jsonable(value.to_dict(orient="records"))
    if hasattr(value, "tolist"):  # torch tensors, numpy arrays and scalars
        return to_jsonable(value.tolist())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    return str(value)


def _rows(table: Any) -> list[dict[str, Any]]:
    """A table as a list of flat dicts: a list of dicts as is, a {name: value} mapping as name/value rows."""
    table = to_jsonable(table)
    if isinstance(table, dict):
        if all(isinstance(v, list) for v in table.values()) and table:  # columns
            length = max(len(v) for v in table.values())
            return [{k: (v[i] if i < len(v) else None) for k, v in table.items()} for i in range(length)]
        return [{"name": k, "value": v} for k, v in table.items()]
    if isinstance(table, list):
        return [row if isinstance(row, dict) else {"value": row} for row in table]
    return [{"value": table}]


def _csv(rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    out = io.StringIO()
    writer = csv.DictWriter(out, columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: json.dumps(v, ensure_ascii=False) if isinstance(v, (dict, list)) else v
                         for k, v in row.items()})
    return out.getvalue()


def safe_name(name: str, default: str = "item") -> str:
    """A file-name-safe version of ``name`` (letters, digits, - and _ only).

    >>> safe_name("Loss: full vs sampled!")
    'loss_full_vs_sampled'
    """
    name = re.sub(r"[^a-z0-9_-]+", "_", str(name).lower()).strip("_-")[:60]
    return name or default


def lesson_record(page: str, *, settings: Mapping[str, Any] | None = None, decisions: Any = None,
                  losses: Any = None, curves: Any = None, tables: Mapping[str, Any] | None = None,
                  link: str | None = None, notes: str | None = None, created: str | None = None) -> dict:
    """The lesson as one JSON-ready dict.

    ``settings``: sentence, seed, model, masking rule (a ``MaskingConfig`` is fine), training config…
    ``decisions``: one row per token (the Masking page's trace). ``losses``: {variant: value} or
    rows. ``curves``: one row per (variant, step). ``tables``: any other named tables.
    ``link``: the shared link that reproduces the view. ``created``: a timestamp, if wanted.
    Parts left as None are left out.
    """
    record: dict[str, Any] = {"format": FORMAT, "page": str(page)}
    if created is not None:
        record["created"] = str(created)
    if link:
        record["link"] = str(link)
    for name, part in (("settings", settings), ("decisions", decisions), ("losses", losses),
                       ("curves", curves), ("tables", tables), ("notes", notes)):
        if part is not None:
            record[name] = to_jsonable(part)
    return record


def _dumps(record: Any) -> bytes:
    return json.dumps(record, indent=2, ensure_ascii=False, allow_nan=False).encode("utf-8")


def lesson_json(page: str, **parts: Any) -> bytes:
    """The lesson record (``lesson_record``'s arguments) as UTF-8 JSON bytes, ready for st.download_button."""
    return _dumps(lesson_record(page, **parts))


def charts_html(figures: Mapping[str, Any], *, title: str = "MLM Lab charts") -> str:
    """One self-contained HTML page with every chart, interactive, plotly.js included once (works offline).

    Each chart's camera button saves a PNG named after the chart.
    """
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html_lib.escape(title)}</title></head>"
             f"<body style='font-family:sans-serif;max-width:1100px;margin:auto'><h1>{html_lib.escape(title)}</h1>"]
    for i, (name, fig) in enumerate(figures.items()):
        figure = fig if isinstance(fig, go.Figure) else go.Figure(fig)
        config = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "filename": safe_name(name), "scale": 2}}
        parts.append(f"<h2>{html_lib.escape(str(name))}</h2>")
        parts.append(pio.to_html(figure, include_plotlyjs=(i == 0), full_html=False, config=config,
                                 div_id=f"chart-{i}"))
    parts.append("</body></html>")
    return "\n".join(parts)


_README = """MLM Lab lesson export ({page})

lesson.json   everything below in one file (format {format})
*.csv         each table: {tables}
charts/*.json each chart as Plotly JSON (plotly.io.from_json reads it back)
charts.html   the charts, interactive; open it in any browser, offline. Each chart's camera
              button (top right) saves it as a PNG.
{link}"""


def lesson_zip(page: str, *, figures: Mapping[str, Any] | None = None, html: bool = True, **parts: Any) -> bytes:
    """The lesson as a zip: lesson.json, a CSV per table, the charts (JSON and one HTML page), a README.

    Takes ``lesson_record``'s arguments plus ``figures`` ({name: plotly figure or its dict}).
    ``html=False`` leaves out charts.html (which holds plotly.js, about 1 MB compressed).
    """
    record = lesson_record(page, **parts)
    tables: dict[str, list[dict]] = {}
    for name in ("decisions", "losses", "curves"):
        if name in record:
            tables[name] = _rows(record[name])
    for name, table in (record.get("tables") or {}).items():
        tables[safe_name(name, "table")] = _rows(table)
    figures = dict(figures or {})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        def write(name: str, data: str | bytes) -> None:
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)

        link = f"\nOpen this link to see the same view again:\n{record['link']}\n" if record.get("link") else ""
        write("README.txt", _README.format(page=record["page"], format=FORMAT,
                                           tables=", ".join(f"{n}.csv" for n in tables) or "none", link=link))
        write("lesson.json", _dumps(record))
        for name, rows in tables.items():
            write(f"{name}.csv", _csv(rows))
        names: dict[str, int] = {}
        for name, fig in figures.items():
            base = safe_name(name, "chart")
            names[base] = names.get(base, 0) + 1
            suffix = "" if names[base] == 1 else f"_{names[base]}"
            spec = fig.to_json() if hasattr(fig, "to_json") else json.dumps(to_jsonable(fig))
            write(f"charts/{base}{suffix}.json", spec)
        if figures and html:
            write("charts.html", charts_html(figures, title=f"MLM Lab — {record['page']}"))
    return buffer.getvalue()


def masking_settings(*, sentence: str | None = None, seed: int | None = None, model: str | None = None,
                     config: Any = None, **more: Any) -> dict[str, Any]:
    """The settings block most pages export: the sentence, the seed, the model and the masking rule."""
    settings = {"sentence": sentence, "seed": seed, "model": model or "default (bundled)", "masking": config}
    settings.update(more)
    return {k: v for k, v in settings.items() if v is not None}


def zip_contents(zip_bytes: bytes) -> list[str]:
    """The file names inside a lesson zip (for tests and for a page that lists what it exported)."""
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as archive:
        return archive.namelist()
