"""The lessons' long explanations, as markdown files a teacher can read and edit: ``lessons/text/<page>.md``.

A file holds named sections, each opened by an HTML comment on its own line, ``<!-- name -->``
(invisible where the file itself is shown as markdown). A page writes ``TEXT = LessonText("predictions")``,
then ``st.markdown(TEXT("intro"))``, or ``TEXT("pll", n=12)`` for a section with ``{n}`` in it
(``str.format``: a literal brace is written twice).

Lines are wrapped in the files for reading; a section comes back as one line per paragraph, as the
pages wrote it: a line joins the one before it unless it starts a list item (``- ``, ``1. ``) or a
blank line ends the paragraph (kept as one blank line).

>>> text = LessonText("predictions")
>>> text("pll").startswith("The **pseudo-log-likelihood** (Salazar et al. 2020")
True
>>> unwrap("One\\nparagraph.\\n\\n- an item\\n  that wraps\\n- another")
'One paragraph.\\n\\n- an item that wraps\\n- another'
"""

from __future__ import annotations

import functools
import re
import string
from pathlib import Path

from mlm_core.errors import InputError

TEXT_DIR = Path(__file__).resolve().parent / "text"
_SECTION = re.compile(r"^<!--\s*([a-z0-9_]+)\s*-->\s*$", re.MULTILINE)
_ITEM = re.compile(r"^(?:[-*] |\d+\. )")


def unwrap(text: str) -> str:
    """``text`` with its wrapped lines joined: one line per paragraph and per list item."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines: list[str] = []
        for line in block.splitlines():
            if lines and not _ITEM.match(line.strip()):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line.strip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


@functools.lru_cache(maxsize=None)
def sections(page: str) -> dict[str, str]:
    """Every section of ``lessons/text/<page>.md``, by name, unwrapped (read once per process)."""
    path = TEXT_DIR / f"{page}.md"
    if not path.is_file():
        raise InputError(f"There is no lesson text for the page {page!r} ({path.name}).")
    parts = _SECTION.split(path.read_text(encoding="utf-8"))  # [before, name, text, name, text, ...]
    found = {name: unwrap(body) for name, body in zip(parts[1::2], parts[2::2])}
    if len(found) != len(parts[1::2]):
        raise InputError(f"{path.name} names a section twice.")
    return found


def fields(text: str) -> set[str]:
    """The ``{names}`` a section needs.

    >>> sorted(fields("{n} of {total} ({share:.0%}), {{not a field}}"))
    ['n', 'share', 'total']
    """
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


class LessonText:
    """One page's lesson text: ``TEXT(name)`` is a section, ``TEXT(name, **values)`` one with its ``{fields}`` filled.

    Values are put in as they are: text a learner typed must be escaped by the page first (``ui.markdown_text``).
    """

    def __init__(self, page: str):
        self.page = page
        self.sections = sections(page)

    def __call__(self, name: str, **values) -> str:
        if name not in self.sections:
            raise KeyError(f"{self.page}.md has no section {name!r}")
        text = self.sections[name]
        return text.format(**values)
