"""One rule for making random streams from a seed: ``generator(seed)`` and ``generator(seed, purpose, *index)``.

- ``generator(seed)``, no purpose, is **the learner's own stream**: exactly
  ``torch.Generator().manual_seed(seed)``. Every mask a learner sees for a seed (the Masking page, the
  Quiz, the Predictions, Loss and Bug museum pages' batches) is drawn from it, so a notebook with plain
  torch reproduces them: ``mask_tokens(..., generator=torch.Generator().manual_seed(seed))``.
- ``generator(seed, purpose, *index)`` is every **derived stream** (a training run's chunk order and
  masks, a quiz's sentence, the sampled softmax's negatives, a demo's draws). numpy's ``SeedSequence``
  does the mixing: the seed is its entropy and ``(purpose, *index)`` its spawn key, numpy's own idiom
  for independent child streams, so nearby seeds, purposes and indices give unrelated draws. A purpose
  is a short name ("order", "negatives"); the index says which step, row or epoch.

Nothing here touches the global RNG. Where a library draws from it (dropout, in
``training.loop``), the loop forks it and seeds it with ``seed_for(seed, purpose, *index)``.
"""

from __future__ import annotations

import functools
import hashlib

import numpy as np
import torch

MAX_SEED = 2**31 - 1  # the largest seed a learner may choose (the sidebar's seed box, a link's seed=)
_MASK64 = (1 << 64) - 1
_MASK63 = (1 << 63) - 1  # torch.Generator.manual_seed takes any 64-bit value; 63 bits stay positive everywhere


@functools.lru_cache(maxsize=256)
def _name_word(name: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(name, digest_size=8).digest(), "little")


def _word(value: int | str) -> int:
    """A non-negative 64-bit integer for SeedSequence: ints as two's complement, names by their hash."""
    if isinstance(value, str):
        return _name_word(value.encode("utf-8"))  # a str-valued enum's value, not its repr
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"seeds, purposes and indices are whole numbers or names, got {value!r}")
    return int(value) & _MASK64


def seed_for(seed: int, purpose: int | str, *index: int) -> int:
    """The 63-bit seed of one derived stream: the same arguments always give the same number.

    >>> seed_for(0, "mask", 3) == seed_for(0, "mask", 3), seed_for(0, "mask", 3) == seed_for(0, "mask", 4)
    (True, False)
    """
    sequence = np.random.SeedSequence(_word(seed), spawn_key=(_word(purpose), *(_word(i) for i in index)))
    return int(sequence.generate_state(1, dtype=np.uint64)[0]) & _MASK63


def generator(seed: int, purpose: int | str | None = None, *index: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for ``seed``: the learner's own stream, or one derived stream of it.

    Without ``purpose`` it is ``torch.Generator().manual_seed(seed)``, so a learner reproduces the
    Masking page's masks with plain torch; with one (and an ``index``: the step, row or epoch) the
    seed goes through ``seed_for`` first.

    >>> plain = torch.rand(3, generator=torch.Generator().manual_seed(144))
    >>> torch.equal(torch.rand(3, generator=generator(144)), plain)
    True
    >>> a = torch.rand(3, generator=generator(144, "order", 0))
    >>> torch.equal(a, torch.rand(3, generator=generator(144, "order", 0))), torch.equal(a, plain)
    (True, False)
    """
    if purpose is None:
        if index:
            raise TypeError("an index names a step of a derived stream: give its purpose too")
        _word(seed)  # the same check as a derived stream's: a whole number
        return torch.Generator().manual_seed(int(seed))
    return torch.Generator().manual_seed(seed_for(seed, purpose, *index))
