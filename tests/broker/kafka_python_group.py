"""A kafka-python group member against `brook broker` (run by tests/broker_groups.rs
with bootstrap, topic and the number of records to expect): consumes in group
`py-billing` from the committed offsets (earliest if none), commits, and leaves.
Prints "consumed N" and "first <value>"; fails if more or fewer records arrive."""

import sys

from kafka import KafkaConsumer

bootstrap, topic, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = KafkaConsumer(
    topic,
    bootstrap_servers=bootstrap,
    group_id="py-billing",
    enable_auto_commit=False,
    auto_offset_reset="earliest",
    session_timeout_ms=3000,
    heartbeat_interval_ms=200,
    consumer_timeout_ms=4000,
)
got = []
for m in consumer:
    got.append((m.partition, m.offset, m.value.decode()))
    consumer.commit()
consumer.close()
assert len(got) == want, (len(got), want, got)
first = min(got, key=lambda g: int(g[2].split()[1]))
print("consumed %d" % len(got))
print("first %s" % first[2])
