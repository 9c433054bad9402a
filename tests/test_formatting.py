"""Numbers for people (``mlm_core.formatting``); the doctests cover signed, significant and metric_delta."""

from mlm_core.formatting import readable


def test_readable_numbers():
    assert readable(3.3185198307037354) == "3.319"
    assert readable(0.07634123) == "0.07634" and readable(30522) == "30,522" and readable(float("nan")) == "NaN"
    assert readable(12.0) == "12" and readable(-1.23456) == "-1.235" and readable(True) == "yes"
