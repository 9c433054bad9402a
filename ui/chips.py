"""Token and user text on a page: coloured HTML chips, their legend, and markdown that shows text as typed.

Token text is never trusted as HTML: every chip escapes it (``html.escape``), and text for
``st.markdown`` has its markdown punctuation backslash-escaped.
"""

from __future__ import annotations

import html
import re

import streamlit as st

from mlm_core.figures.masking import DECISION_STYLE  # the one style table of the decisions


# The ASCII punctuation that can start something in markdown (CommonMark lets a backslash escape each):
# links and images [ ] ( ) !, autolinks < > : . @ (http://…, www.…, a@b.c), emphasis * _ ~, code `,
# headings and lists # + -, tables |, HTML entities &, and Streamlit's :emoji:, :red[colour], $math$.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$&@^])")
_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029]+")
# GitHub-flavoured autolinks (http://…, https://…, www.…, a@b.c) are found in the text after escapes are
# undone, so a backslash does not stop them: a word joiner (U+2060, invisible) inside each does.
_AUTOLINKS = re.compile(r"(?i)(https?:)(?=//)|\b(www)(?=\.)|(@)")
WORD_JOINER = "\u2060"


def markdown_text(text: str) -> str:
    """Token, link or user text for ``st.markdown`` / ``st.info`` / ``st.caption`` / a widget label, shown
    as typed: every markdown punctuation character backslash-escaped, line breaks as spaces (a new line
    could start a heading, a list or a table), and an invisible word joiner inside ``http://``, ``www.``
    and ``@``, which GitHub-flavoured markdown would turn into links whatever the escapes.
    ``![](http://x/y)`` stays those characters: no image, no link.

    ``st.markdown`` without ``unsafe_allow_html`` never renders HTML, so ``html.escape`` here would show
    ``&lt;`` for ``<`` (the escape is applied twice).

    >>> print(markdown_text("![](http://x/y) [a](www.x) a@b.c").replace(WORD_JOINER, "|"))
    \\!\\[\\]\\(http\\:|//x/y\\) \\[a\\]\\(www|\\.x\\) a\\@|b\\.c
    """
    text = _AUTOLINKS.sub(lambda m: m.group(0) + WORD_JOINER, _LINE_BREAKS.sub(" ", str(text)))
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)


def inline_code(text: str) -> str:
    """``text`` as a markdown code span, whatever backticks it holds (code spans show text verbatim)."""
    text = str(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def pill_labels(tokens: list[str], positions) -> dict[int, str]:
    """A label for each position's pill: the token, with its occurrence number where the sentence repeats it.

    Pills are told apart by their text, so a repeated token needs a number: the (1), the (2).

    >>> pill_labels(["[CLS]", "the", "cat", "saw", "the", "dog", "[SEP]"], [1, 2, 3, 4, 5])
    {1: 'the (1)', 2: 'cat', 3: 'saw', 4: 'the (2)', 5: 'dog'}
    """
    seen: dict[str, int] = {}
    labels = {}
    for i in positions:
        seen[tokens[i]] = seen.get(tokens[i], 0) + 1
        labels[i] = tokens[i] if tokens.count(tokens[i]) == 1 else f"{tokens[i]} ({seen[tokens[i]]})"
    return labels


def chip_html(token: str, decision: str = "NOT_SELECTED", original: str | None = None,
              highlight: bool = False, title: str | None = None) -> str:
    """One token as an escaped HTML chip; ``##`` pieces are drawn joined to the chip before them.

    Token, "was:" and tooltip text are escaped: a token is text from the learner or the vocabulary, never HTML.

    >>> out = chip_html("<img src=x onerror=alert(1)>", "MASK", original="<b>", title='"><script>')
    >>> "<img" in out or "<b>" in out or "<script>" in out
    False
    >>> "&lt;img src=x onerror=alert(1)&gt;" in out and "was: &lt;b&gt;" in out
    True
    """
    background, border, label = DECISION_STYLE.get(decision, DECISION_STYLE["NOT_SELECTED"])
    piece = token.startswith("##") and len(token) > 2
    text = token[2:] if piece else token
    margin = "margin-left:-3px;border-left:2px dotted #868e96;border-top-left-radius:0;border-bottom-left-radius:0;" if piece else "margin-left:6px;"
    outline = "box-shadow:0 0 0 3px #1c7ed6;" if highlight else ""
    sub = f'<div class="mlm-sub" style="font-size:11px;color:#495057">was: {html.escape(original)}</div>' if original else ""
    tip = f' title="{html.escape(title, quote=True)}"' if title else ""
    return (
        f'<span class="mlm-chip-wrap" style="display:inline-block;vertical-align:top;margin-bottom:6px;{margin}"{tip}>'
        f'<span class="mlm-chip" style="display:inline-block;padding:3px 7px;border-radius:6px;'
        f'font-family:monospace;font-size:15px;background:{background};border:1px solid {border};{outline}">'
        f'{"##" if piece else ""}{html.escape(text)}</span>{sub}</span>'
    )


def token_chips(tokens: list[str], decisions: list[str] | None = None, originals: list[str | None] | None = None,
                highlight: int | None = None, titles: list[str] | None = None) -> None:
    """Render tokens as chips coloured by decision (escaped: token text is never trusted as HTML)."""
    parts = []
    for i, token in enumerate(tokens):
        decision = decisions[i] if decisions else "NOT_SELECTED"
        original = originals[i] if originals else None
        parts.append(chip_html(token, decision, original, highlight == i, titles[i] if titles else None))
    st.markdown(f'<div class="mlm-chips" style="line-height:2.2">{"".join(parts)}</div>', unsafe_allow_html=True)


def decision_legend() -> None:
    """The colour key of the chips."""
    items = [chip_html(label, name) for name, (_, _, label) in DECISION_STYLE.items()]
    st.markdown(f'<div class="mlm-legend"><div class="mlm-chips">{"".join(items)}</div></div>', unsafe_allow_html=True)


def value_chips(tokens: list[str], values: list[float | None], *, highlight: int | None = None,
                titles: list[str] | None = None, scale: float | None = None) -> None:
    """Tokens as escaped chips shaded by a value: green for positive, red for negative, grey where None.

    Shades are scaled to the largest |value| of the row, or to ``scale`` (rows drawn to be compared share one).
    """
    finite = [abs(v) for v in values if v is not None and v == v]
    top = scale if scale else (max(finite) if finite and max(finite) > 0 else 1.0)
    parts = []
    for i, (token, value) in enumerate(zip(tokens, values)):
        if value is None or value != value:
            background = "#f1f3f5"
        else:
            share = min(1.0, abs(value) / top)
            rgb = "47,158,68" if value >= 0 else "224,49,49"
            background = f"rgba({rgb},{0.08 + 0.6 * share:.2f})"
        outline = "box-shadow:0 0 0 3px #1c7ed6;" if highlight == i else ""
        tip = f' title="{html.escape(titles[i], quote=True)}"' if titles else ""
        parts.append(
            f'<span class="mlm-chip-wrap" style="display:inline-block;margin:0 0 6px 6px"{tip}>'
            f'<span class="mlm-chip" style="display:inline-block;padding:3px 7px;border-radius:6px;font-family:monospace;'
            f'font-size:15px;background:{background};border:1px solid #ced4da;{outline}">{html.escape(token)}</span></span>')
    st.markdown(f'<div class="mlm-chips" style="line-height:2.2">{"".join(parts)}</div>', unsafe_allow_html=True)
