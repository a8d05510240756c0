"""kafka-python against `brook broker` (run by tests/broker.rs with the bootstrap
address as argv[1]): create a topic with 3 partitions, produce with acks=all, read
every record back read_uncommitted and read_committed, and look offsets up. Exits
non-zero (an assertion) on any difference."""

import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

bootstrap = sys.argv[1]
topic = "py-sales"
n = 90

admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
admin.close()

# A plain producer (kafka-python 3 turns idempotence on by default):
# kafka_python_txn.py covers idempotent and transactional ones.
producer = KafkaProducer(
    bootstrap_servers=bootstrap, acks="all", linger_ms=5, enable_idempotence=False
)
acked = []
for i in range(n):
    future = producer.send(topic, key=b"k%d" % i, value=b"sale %d" % i, partition=i % 3)
    acked.append(future)
producer.flush()
offsets = {}
for f in acked:
    meta = f.get(timeout=10)
    offsets.setdefault(meta.partition, []).append(meta.offset)
producer.close()
for p in range(3):
    assert offsets[p] == list(range(n // 3)), (p, offsets[p])

expected = sorted((i % 3, i // 3, b"k%d" % i, b"sale %d" % i) for i in range(n))
partitions = [TopicPartition(topic, p) for p in range(3)]
for isolation in ("read_uncommitted", "read_committed"):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        consumer_timeout_ms=10000,
    )
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got = []
    for m in consumer:
        got.append((m.partition, m.offset, m.key, m.value))
        if len(got) == n:
            break
    assert sorted(got) == expected, (isolation, len(got))
    assert consumer.end_offsets(partitions) == {tp: n // 3 for tp in partitions}
    assert consumer.beginning_offsets(partitions) == {tp: 0 for tp in partitions}
    found = consumer.offsets_for_times({partitions[0]: 0})
    assert found[partitions[0]].offset == 0, found
    consumer.close()

print("kafka-python: %d records produced and read back" % n)
