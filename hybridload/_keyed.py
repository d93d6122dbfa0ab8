"""Keyed randomness, the one place it is derived: every draw is a pure function of a key (seed,
then epoch, sample index, block), never of worker, lane, time or rank, so a sample, batch or
order is the same in every lane, rerun and resume; the values are pinned by ``tests/test_keyed.py``
because saved states hold positions in them. `derive_key` (splitmix64 chained over the parts)
keys the keyed orders; `seed_sequence`, `keyed_generator` and `KeyedGenerators` (numpy
``SeedSequence`` and PCG64) key the recipe's, erasing's, the batch hook's and the shard order's draws.

The one draw outside it: ``order="randperm"`` is ``torch.randperm`` seeded with ``seed + epoch``,
so the order is ``DistributedSampler``'s to the index (docs/guide/guarantees.md, "The epoch order").
"""

from __future__ import annotations

import numpy as np

M64 = (1 << 64) - 1
SEED_BITS = M64
_KEY_TAG = 0x6B65796564  # "keyed": keeps `derive_key`'s keys apart from other users of (seed, epoch)

_C1, _C2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def mix64(z: int) -> int:
    """splitmix64's finalizer on a Python int (taken modulo 2**64)."""
    z &= M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def mix64_array(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, elementwise on a uint64 array, in place (wraps modulo 2**64)."""
    z ^= z >> _S30
    z *= _C1
    z ^= z >> _S27
    z *= _C2
    z ^= z >> _S31
    return z


def derive_key(*parts: int) -> int:
    """A 64-bit key from integers (seed, epoch, a block number, ...); any ints, negative too."""
    h = mix64(_KEY_TAG)
    for part in parts:
        h = mix64(h ^ mix64(int(part) & M64) ^ (int(part) >> 64 & M64))
    return h


def seed_sequence(seed: int, *key: int, spawn_key: tuple[int, ...] = ()) -> np.random.SeedSequence:
    """The SeedSequence of (``seed`` as 64 bits, ``*key``) on stream ``spawn_key``."""
    return np.random.SeedSequence((int(seed) & SEED_BITS, *(int(k) for k in key)), spawn_key=spawn_key)


def keyed_generator(seed: int, *key: int, spawn_key: tuple[int, ...] = ()) -> np.random.Generator:
    """A PCG64 generator on `seed_sequence`."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, *key, spawn_key=spawn_key)))


# numpy's SeedSequence and PCG64 seeding over many keys at once: one vectorized hash per batch
# instead of 21 us a sample, a tenth of the kernel's time outside the decode and the resize.
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _POOL = 0xCA01F9DD, 0x4973F715, 4
_M32, _M128 = 0xFFFFFFFF, (1 << 128) - 1
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645


def _words(n: int) -> list[int]:
    """SeedSequence's coercion of one non-negative int: little-endian 32-bit words, 0 -> [0]."""
    out = [n & _M32]
    while n > _M32:
        n >>= 32
        out.append(n & _M32)
    return out


def _pool_of(entropy: list[np.ndarray], n: int) -> list[np.ndarray]:
    """SeedSequence's ``mix_entropy``: its 4-word pool, for ``n`` keys at once (uint32 arrays)."""
    hc = [_INIT_A]

    def hashmix(v: np.ndarray) -> np.ndarray:
        v = v ^ np.uint32(hc[0])
        hc[0] = (hc[0] * _MULT_A) & _M32
        v = v * np.uint32(hc[0])
        return v ^ (v >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r: np.ndarray = x * np.uint32(_MIX_L) - y * np.uint32(_MIX_R)  # uint32, wrapping (numpy's stubs say float)
        return r ^ (r >> np.uint32(16))

    zero = np.zeros(n, dtype=np.uint32)
    pool = [hashmix(entropy[i] if i < len(entropy) else zero) for i in range(_POOL)]
    for src in range(_POOL):
        for dst in range(_POOL):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for extra in entropy[_POOL:]:
        for dst in range(_POOL):
            pool[dst] = mix(pool[dst], hashmix(extra))
    return pool


def pcg64_states(seed: int, prefix: tuple[int, ...], last) -> list[tuple[int, int]]:
    """The (state, inc) of `keyed_generator` ``(seed, *prefix, k)``'s PCG64 for every ``k`` of ``last``, at once."""
    keys = np.asarray(last, dtype=np.uint64)
    if keys.size and int(keys.max()) > _M32:  # a key of two words: numpy's own, one by one
        out = []
        for k in keys.tolist():
            st = np.random.PCG64(seed_sequence(seed, *prefix, k)).state["state"]
            out.append((int(st["state"]), int(st["inc"])))
        return out
    head = [w for v in (int(seed) & SEED_BITS, *prefix) for w in _words(int(v))]
    n = len(keys)
    entropy = [np.full(n, w, dtype=np.uint32) for w in head] + [keys.astype(np.uint32)]
    pool = _pool_of(entropy, n)
    hc, words = _INIT_B, []
    for i in range(8):  # generate_state(4, uint64): 8 words from the pool, in turn
        v = pool[i % _POOL] ^ np.uint32(hc)
        hc = (hc * _MULT_B) & _M32
        v = v * np.uint32(hc)
        words.append((v ^ (v >> np.uint32(16))).astype(np.uint64))
    w64 = [words[2 * j] | (words[2 * j + 1] << np.uint64(32)) for j in range(4)]
    out = []
    for a, b, c, d in zip(*(w.tolist() for w in w64)):
        inc = ((((c << 64) | d) << 1) | 1) & _M128  # pcg_setseq_128_srandom_r
        state = ((inc + ((a << 64) | b)) * _PCG_MULT + inc) & _M128
        out.append((state, inc))
    return out


class KeyedGenerators:
    """The generators ``keyed_generator(seed, *prefix, k)`` for the keys ``last``, on one bit
    generator re-seeded per key (`generator(j)`: the ``j``-th key's, its draws the same):
    not shared between threads, and each generator valid until the next call."""

    def __init__(self, seed: int, prefix: tuple[int, ...], last):
        self._states = pcg64_states(seed, prefix, last)
        self._bits = np.random.PCG64()
        self._gen = np.random.Generator(self._bits)

    def generator(self, j: int) -> np.random.Generator:
        state, inc = self._states[j]
        self._bits.state = {
            "bit_generator": "PCG64",
            "state": {"state": state, "inc": inc},
            "has_uint32": 0,
            "uinteger": 0,
        }
        return self._gen
