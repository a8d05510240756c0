"""kafka-python's read_committed consumer against `brook broker` (run by
tests/broker_aborted.rs with the bootstrap address and a topic as argv): reads
partition 0 from the beginning until it is caught up, then prints one JSON line: the
records it got as [offset, value] and its position. The broker sends the batches as
stored with the aborted-transactions list; the client does the filtering."""

import json
import sys
import time

from kafka import KafkaConsumer, TopicPartition

bootstrap, topic = sys.argv[1], sys.argv[2]
tp = TopicPartition(topic, 0)
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    group_id=None,
    enable_auto_commit=False,
    isolation_level="read_committed",
    fetch_max_wait_ms=100,
)
consumer.assign([tp])
consumer.seek_to_beginning(tp)
end = consumer.end_offsets([tp])[tp]
got = []
deadline = time.time() + 20
# Polls until the position reaches the end (the last stable offset) and a last poll
# brings nothing more.
while time.time() < deadline:
    batch = consumer.poll(timeout_ms=200)
    for records in batch.values():
        got.extend([r.offset, r.value.decode()] for r in records)
    if not batch and consumer.position(tp) >= end:
        break
print(json.dumps({"records": got, "position": consumer.position(tp), "end": end}))
consumer.close()
