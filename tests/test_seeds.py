"""seeds.generator: one rule, numpy's SeedSequence; deterministic, independent streams, no global RNG."""

import math

import numpy as np
import pytest
import torch

from mlm_core.seeds import generator, seed_for


def test_same_arguments_same_stream_and_no_global_state():
    torch_state, np_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    a = torch.rand(5, generator=generator(144, "mask", 2, 7))
    b = torch.rand(5, generator=generator(144, "mask", 2, 7))
    assert torch.equal(a, b)
    assert torch.equal(torch.get_rng_state(), torch_state) and (np.random.get_state()[1] == np_state).all()


def test_it_is_numpys_seed_sequence_with_purpose_and_index_as_spawn_key():
    expected = np.random.SeedSequence(148, spawn_key=(3, 5)).generate_state(1, dtype=np.uint64)[0]
    assert seed_for(148, 3, 5) == int(expected) & ((1 << 63) - 1)


def test_nearby_seeds_purposes_and_indices_give_different_streams():
    seeds = {seed_for(s, p, i) for s in range(20) for p in ("order", "mask", 1, 2) for i in range(20)}
    assert len(seeds) == 20 * 4 * 20
    assert all(0 <= s < 2**63 for s in seeds)
    assert seed_for(0, "mask") != seed_for(0, "mask", 0)  # an index is part of the stream's name
    assert seed_for(-1, 0) == seed_for(2**64 - 1, 0)  # negative seeds as 64-bit two's complement


def test_first_draws_of_consecutive_seeds_look_uniform():
    n = 2000
    first = torch.tensor([float(torch.rand(1, generator=generator(s, "order"))) for s in range(n)])
    assert abs(float(first.mean()) - 0.5) < 5 * math.sqrt(1 / 12 / n)  # 5 standard errors
    lag = float(torch.corrcoef(torch.stack([first[:-1], first[1:]]))[0, 1])
    assert abs(lag) < 5 / math.sqrt(n)  # neighbouring seeds are not correlated


def test_bad_parts_are_refused():
    for bad in (1.5, None, True):
        with pytest.raises(TypeError):
            seed_for(0, bad)


def test_without_a_purpose_it_is_the_learners_own_stream_plain_torch():
    """generator(seed) is torch.Generator().manual_seed(seed): a notebook reproduces the Masking page's masks."""
    for seed in (0, 144, 2**31 - 1):
        assert torch.equal(torch.rand(8, generator=generator(seed)),
                           torch.rand(8, generator=torch.Generator().manual_seed(seed)))
    assert not torch.equal(torch.rand(8, generator=generator(0)), torch.rand(8, generator=generator(0, "mask")))
    with pytest.raises(TypeError):
        generator(0, None, 1)  # an index without a purpose names no stream


def test_the_masking_pages_masks_are_plain_torchs(tokenizer):
    from mlm_core import MaskingConfig, encode, mask_batch
    from mlm_core.data import mask_sentence

    masked = mask_sentence(tokenizer, "The cat sat on the mat.", MaskingConfig(mlm_probability=0.5), seed=144)
    encoded = encode(tokenizer, "The cat sat on the mat.", max_length=128)
    plain = mask_batch(tokenizer, encoded, MaskingConfig(mlm_probability=0.5), torch.Generator().manual_seed(144))
    assert torch.equal(masked.result.input_ids, plain.input_ids) and torch.equal(masked.result.labels, plain.labels)


def test_training_streams_are_named_purposes_of_the_one_rule():
    from mlm_core.training import Stream

    assert seed_for(3, Stream.ORDER, 1) == seed_for(3, "train_order", 1)  # a Stream is its name
    assert len({seed_for(3, s, 0) for s in Stream}) == len(Stream)
