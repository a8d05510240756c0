"""Subscribing a kafka-python group member so that its first join already knows the
topic's partitions (imported by the group members' scripts beside it).

Why: kafka-python 3.0.12 can lose the assignment of a rejoin that a metadata change
started. The leader's assignment makes its metadata and assignment snapshots equal,
so `need_rejoin()` turns false while the SyncGroup is still in flight; if `poll`'s
timeout ends inside that window (about 2 ms per rejoin against a local broker), the
next `poll` sees nothing to join and never applies the SyncGroup's assignment: the
member stays in the group with no partitions for good. Subscribing before the
topic's partitions are known makes exactly such a rejoin: the first join assigns
nothing ("No partition metadata"), the metadata that arrives next starts a second.
Seen in 2 of 40 runs of kafka_python_analytics.py before this, 0 of 40 after."""


def subscribe_when_known(consumer, topic):
    """Subscribes `consumer` to `topic` and blocks until a metadata response listing
    the topic has reached the group coordinator's snapshot (`topics()` always asks
    the broker)."""
    consumer.subscribe([topic])
    consumer.topics()
