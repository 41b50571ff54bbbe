"""events.partitions places keys as aiokafka's default partitioner does (its pure-Python murmur2, the Java client's
Utils.murmur2), for any keys of any lengths, mixed in one batch, and any number of partitions."""

from aiokafka.partitioner import DefaultPartitioner, murmur2
from hypothesis import given
from hypothesis import strategies as st

from events import partitions

KEYS = st.lists(st.binary(max_size=120), max_size=60)


@given(keys=KEYS)
def test_each_hash_is_kafkas_murmur2(keys: list[bytes]) -> None:
    assert partitions.murmur2(keys).tolist() == [murmur2(key) for key in keys]


@given(keys=KEYS, count=st.integers(1, 64), first=st.integers(0, 3))
def test_each_key_goes_where_the_default_partitioner_puts_it(keys: list[bytes], count: int, first: int) -> None:
    topic_partitions = list(range(first, first + count))  # ids as a topic's metadata lists them, sorted
    placed = partitions.partitions_of(keys, topic_partitions)
    assert placed == [DefaultPartitioner()(key, topic_partitions, topic_partitions) for key in keys]


def test_the_relays_keys_of_every_length_in_one_batch() -> None:
    """Keys as the relay writes them (eCom store id, entity id), with and without an entity, each length's last
    bytes (the tail of 1–3 bytes) included."""
    keys = [f"01a2{'x' * width}:{entity}".encode() for width in range(8) for entity in ("", "1001", "01a22854-b51b")]
    assert partitions.murmur2(keys).tolist() == [murmur2(key) for key in keys]
    assert len({len(key) % 4 for key in keys}) == 4
