"""kafka-python against `brook broker` (run by tests/broker_txn.rs with the bootstrap
address as argv[1]): an idempotent producer (kafka-python 3's default) writes each
record once with dense offsets; a transactional producer commits, aborts and commits;
a second producer with the same transactional id fences the first; read_committed
sees the committed records only, read_uncommitted all. Exits non-zero (an assertion
or an exception) on any difference."""

import sys

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError

bootstrap = sys.argv[1]
topic = "py-txn"

admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
admin.close()

producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
futures = [producer.send(topic, value=b"i%d" % i, partition=i % 2) for i in range(40)]
producer.flush()
offsets = {}
for f in futures:
    meta = f.get(timeout=10)
    offsets.setdefault(meta.partition, []).append(meta.offset)
producer.close()
for p in range(2):
    assert offsets[p] == list(range(20)), (p, offsets[p])

writer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="py-writer")
writer.init_transactions()
for prefix, commit in ((b"c", True), (b"a", False), (b"d", True)):
    writer.begin_transaction()
    for i in range(4):
        writer.send(topic, value=prefix + b"%d" % i, partition=i % 2)
    if commit:
        writer.commit_transaction()
    else:
        writer.flush()
        writer.abort_transaction()

# A second producer with the same transactional id fences the first.
writer.begin_transaction()
writer.send(topic, value=b"zombie", partition=0)
writer.flush()
fresh = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="py-writer")
fresh.init_transactions()
try:
    writer.commit_transaction()
    raise AssertionError("the fenced producer committed")
except KafkaError as e:
    print("fenced:", type(e).__name__, e)
fresh.begin_transaction()
fresh.send(topic, value=b"fresh", partition=1)
fresh.commit_transaction()
fresh.close()

partitions = [TopicPartition(topic, p) for p in range(2)]
idempotent = [b"i%d" % i for i in range(40)]
committed = idempotent + [b"c%d" % i for i in range(4)] + [b"d%d" % i for i in range(4)] + [b"fresh"]
everything = committed + [b"a%d" % i for i in range(4)] + [b"zombie"]
for isolation, want in (("read_committed", committed), ("read_uncommitted", everything)):
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        isolation_level=isolation,
        consumer_timeout_ms=3000,
    )
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    got = sorted(m.value for m in consumer)
    consumer.close()
    assert got == sorted(want), (isolation, got)
print("ok")
