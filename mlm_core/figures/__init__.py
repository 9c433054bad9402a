"""Figure builders: pure functions, data in, plotly figure out (one module per lesson)."""


def label_row_px(label_px: int) -> int:
    """The pixels plotly wants per line of text of ``label_px`` (plotly.js Lib.bigFont: 1.2 × the font).

    >>> label_row_px(20), label_row_px(12)
    (24, 14)
    """
    return round(1.2 * label_px)
