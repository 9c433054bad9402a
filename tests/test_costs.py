"""mlm_core.costs: the one cost calculator gives the Tokenizer page, the Efficiency page and the benchmarks the same numbers."""

import pytest

from mlm_core.costs import (bert_step_flops, encoder_flops_per_token, head_cost, head_flops_per_row, logits_size,
                            masked_positions)
from mlm_core.errors import InputError


@pytest.mark.parametrize("B, T, V", [(32, 128, 30522), (4, 64, 1000), (3, 30, 8000), (1, 8, 250)])
def test_head_cost_and_logits_size_agree(B, T, V):
    cost, size = head_cost(V, batch_size=B, seq_len=T), logits_size(B, T, V)
    assert cost.masked_positions == size["masked"] == masked_positions(B, T)
    assert cost.logits_bytes_full == size["full_bytes"] and cost.logits_bytes_gathered == size["gathered_bytes"]
    assert cost.with_vocab(2 * V) == head_cost(2 * V, batch_size=B, seq_len=T)


def test_step_flops_are_built_from_the_per_token_and_per_row_counts():
    f = bert_step_flops(hidden=8, layers=3, intermediate=32, vocab=50, seq_len=4, tokens=20, head_rows=5)
    assert f["encoder"] == 3.0 * 3 * encoder_flops_per_token(8, 32, 4) * 20
    assert f["head"] == 3.0 * head_flops_per_row(8, 50) * 5
    assert head_cost(50, hidden_size=8).flops_per_position == head_flops_per_row(8, 50, transform=False) == 2 * 8 * 50


def test_one_rounding_rule_for_m():
    # B·T·p rounded once: 3 × 30 × 0.15 = 13.5 → 14 (round half to even); the Tokenizer page's old
    # 0.15 × 3 × 30 = 13.499999999999998 gave 13.
    assert masked_positions(3, 30) == 14 == head_cost(100, batch_size=3, seq_len=30).masked_positions
    with pytest.raises(InputError):
        head_cost(100, mlm_probability=1.5)
    with pytest.raises(InputError):
        head_cost(100).with_vocab(0)
