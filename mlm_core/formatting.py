"""Numbers for people: every page writes a loss, a difference or a share the same way.

``significant`` keeps a number (for tables that sort), ``readable`` and ``signed`` make text,
``row_decimals`` gives numbers shown side by side one precision, ``metric_delta`` is ``signed``
for ``st.metric``'s delta (an ASCII minus, which points its arrow down), ``metric_change`` a count's
change for it, and ``percent_text`` a probability.
"""

from __future__ import annotations

import math


def significant(value: float, digits: int = 4) -> float:
    """``value`` rounded to ``digits`` significant digits, still a number (for tables that sort).

    >>> significant(3.3185198307037354), significant(0.000123456)
    (3.319, 0.0001235)
    """
    x = float(value)
    return x if not math.isfinite(x) or x == 0 else float(f"{x:.{digits}g}")


def readable(value, digits: int = 4) -> str:
    """A number for people: ``digits`` significant digits, thousands separators, NaN as "NaN".

    >>> readable(3.3185198307037354), readable(0.076341), readable(30522), readable(123456.7), readable(float("nan"))
    ('3.319', '0.07634', '30,522', '123,457', 'NaN')
    """
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def row_decimals(values, digits: int = 4) -> int:
    """Decimals for numbers shown side by side: the largest gets ``digits`` significant digits, all get its decimals.

    ``readable`` per number mixes precisions in a row ("2.24" beside "4.523": trailing zeros dropped,
    a different count of digits before the point); ``f"{x:.{row_decimals(row)}f}"`` writes them alike.

    >>> row_decimals([2.2400, 4.5231, 2.0901]), row_decimals([10.33, 0.873]), row_decimals([0.25, 0.5]), row_decimals([])
    (3, 2, 3, 3)
    >>> [f"{x:.{row_decimals([2.24, 4.5231, 2.09])}f}" for x in (2.24, 4.5231, 2.09)]
    ['2.240', '4.523', '2.090']
    """
    finite = [abs(float(v)) for v in values if math.isfinite(float(v)) and float(v) != 0]
    if not finite:
        return digits - 1
    before_point = max(1, math.floor(math.log10(max(finite))) + 1)
    return max(0, digits - before_point)


def signed(value: float, spec: str = ".2f") -> str:
    """A signed number for people: "+1.24" or "−1.24" (a true minus sign); what rounds to zero reads "0.00", never "−0.00".

    ``spec`` is a format spec without the sign (".2f", ".3g", ".1%").

    >>> signed(1.2449), signed(-1.2449), signed(-0.004), signed(0.0), signed(-0.0004, ".1%"), signed(0.031, ".0%")
    ('+1.24', '−1.24', '0.00', '0.00', '0.0%', '+3%')
    """
    x = float(value)
    text = format(abs(x), spec)
    if math.isnan(x):
        return "NaN"
    if not any(c in "123456789" for c in text.split("e")[0]) and math.isfinite(x):
        return text  # rounds to zero: no sign
    return ("+" if x > 0 else "−") + text


def metric_delta(value: float, spec: str = ".2f") -> str:
    """``signed`` for ``st.metric``'s delta: an ASCII "-", which Streamlit reads to point its arrow down.

    >>> metric_delta(-0.139, ".3g"), metric_delta(-0.0001), metric_delta(0.25, ".0%")
    ('-0.139', '0.00', '+25%')
    """
    return signed(value, spec).replace("−", "-")


def metric_change(now: int, then: int, step: int, *, fewer_is_better: bool = False) -> dict:
    """A count's change as `st.metric`'s delta (its keyword arguments): "+3 since step 0", green when it went the right way, red the
    wrong way, and grey without an arrow when it did not change (a green "+0" reads as progress, an arrow as a
    change).

    >>> metric_change(3, 0, 0), metric_change(5, 0, 0, fewer_is_better=True)["delta_color"]
    ({'delta': '+3 since step 0', 'delta_color': 'normal', 'delta_arrow': 'auto'}, 'inverse')
    >>> metric_change(2, 2, 0)
    {'delta': 'no change since step 0', 'delta_color': 'off', 'delta_arrow': 'off'}
    """
    if now == then:
        return {"delta": f"no change since step {step}", "delta_color": "off", "delta_arrow": "off"}
    return {"delta": f"{now - then:+d} since step {step}", "delta_color": "inverse" if fewer_is_better else "normal",
            "delta_arrow": "auto"}


def percent_text(p: float) -> str:
    """A probability as people read it: 42%, 0.31%, or 3.3e-05 when it is tiny (an untrained model).

    >>> percent_text(0.42), percent_text(0.0031), percent_text(3.3e-05)
    ('42.0%', '0.31%', '3.3e-05')
    """
    return f"{p:.1%}" if p >= 0.01 else (f"{p:.2%}" if p >= 1e-4 else f"{p:.1e}")


def probability_text(q: float) -> str:
    """12.3% for visible probabilities, 3.1e-05 for the tiny ones an untrained model gives (never "0.0%").

    >>> probability_text(0.1234), probability_text(0.000067)
    ('12.3%', '6.7e-05')
    """
    return f"{q:.1%}" if q >= 0.001 else f"{q:.1e}"
