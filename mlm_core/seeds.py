"""One rule for making random streams from a seed: ``generator(seed, purpose, *index)``.

numpy's ``SeedSequence`` does the mixing: the learner's seed is its entropy and ``(purpose, *index)``
its spawn key, numpy's own idiom for independent child streams, so nearby seeds, purposes and
indices give unrelated draws. A purpose is a short name ("order", "mask") or a small integer.

Not every stream of the app comes from this rule yet: ``training`` (``training.config.run_seed``)
and ``classroom`` keep their splitmix64 mixers, because switching them would change the curves and
quiz sentences a seed already gives (``tests/test_golden.py``, docs/workshop.md). New code uses
this rule.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch

_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1  # torch.Generator.manual_seed takes any 64-bit value; 63 bits stay positive everywhere


def _word(value: int | str) -> int:
    """A non-negative 64-bit integer for SeedSequence: ints as two's complement, names by their hash."""
    if isinstance(value, str):
        return int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest(), "little")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"seeds, purposes and indices are whole numbers or names, got {value!r}")
    return int(value) & _MASK64


def seed_for(seed: int, purpose: int | str, *index: int) -> int:
    """The 63-bit seed of one stream: the same arguments always give the same number.

    >>> seed_for(0, "mask", 3) == seed_for(0, "mask", 3), seed_for(0, "mask", 3) == seed_for(0, "mask", 4)
    (True, False)
    """
    sequence = np.random.SeedSequence(_word(seed), spawn_key=(_word(purpose), *(_word(i) for i in index)))
    return int(sequence.generate_state(1, dtype=np.uint64)[0]) & _MASK63


def generator(seed: int, purpose: int | str, *index: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for one use of ``seed``: ``purpose`` names the use, ``index`` the step or row.

    >>> a = torch.rand(3, generator=generator(144, "order", 0))
    >>> torch.equal(a, torch.rand(3, generator=generator(144, "order", 0)))
    True
    """
    return torch.Generator().manual_seed(seed_for(seed, purpose, *index))
