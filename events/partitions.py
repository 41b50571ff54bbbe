"""Kafka's default partitioner for a whole batch of keys at once.

The relay sends thousands of records a round, each keyed by its eCom store and entity. aiokafka places a keyed
record with a pure-Python murmur2 (the Java client's `Utils.murmur2`), about 15–30 µs a key; this computes the same
hash for every key of a round in a few NumPy passes per key length, and the relay names each record's partition
itself. The placement is the default partitioner's exactly (held to it by tests/test_kafka_partitions.py), so a key
keeps its partition across versions of pia and beside other producers of the topic.
"""

from collections.abc import Sequence

import numpy as np

_SEED = 0x9747B28C
_M = np.uint32(0x5BD1E995)


def partitions_of(keys: Sequence[bytes], partitions: Sequence[int]) -> list[int]:
    """The partition aiokafka's DefaultPartitioner gives each key, out of the topic's partitions (sorted by id)."""
    chosen = (murmur2(keys) & np.uint32(0x7FFFFFFF)) % len(partitions)
    return [partitions[index] for index in chosen.tolist()]


def murmur2(keys: Sequence[bytes]) -> np.ndarray:
    """Kafka's murmur2 of each key, as unsigned 32-bit integers."""
    hashes = np.empty(len(keys), dtype=np.uint32)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        data = np.frombuffer(b"".join(keys[row] for row in rows.tolist()), dtype=np.uint8).reshape(len(rows), length)
        hashes[rows] = _of_one_length(data, length)
    return hashes


def _of_one_length(data: np.ndarray, length: int) -> np.ndarray:
    """murmur2 of each row of `data`, keys of `length` bytes each; NumPy's uint32 arithmetic wraps as Java's int."""
    whole = length // 4 * 4
    words = data[:, :whole].copy().view("<u4")  # the key's 4-byte words, little-endian, a row per key
    h = np.full(len(data), (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint32)
    for column in range(whole // 4):
        k = words[:, column] * _M
        k ^= k >> np.uint32(24)
        k *= _M
        h *= _M
        h ^= k
    tail = data[:, whole:].astype(np.uint32)
    if length % 4 >= 3:
        h ^= tail[:, 2] << np.uint32(16)
    if length % 4 >= 2:
        h ^= tail[:, 1] << np.uint32(8)
    if length % 4 >= 1:
        h ^= tail[:, 0]
        h *= _M
    h ^= h >> np.uint32(13)
    h *= _M
    h ^= h >> np.uint32(15)
    return h
