"""The `analytics` group's one member for tests/broker_story.rs (bootstrap, topic):
kafka-python, reads from the committed offsets (earliest if none), prints
"record P OFFSET VALUE" per record and commits after printing each batch; prints
"assigned P,..." when it gets partitions. When stdin reaches its end it commits,
leaves the group and prints "closed"."""

import sys
import threading

from group_join import subscribe_when_known
from kafka import KafkaConsumer

bootstrap, topic = sys.argv[1], sys.argv[2]
closed = threading.Event()


def wait_for_stdin_end():
    sys.stdin.read()
    closed.set()


threading.Thread(target=wait_for_stdin_end, daemon=True).start()
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    group_id="analytics",
    enable_auto_commit=False,
    auto_offset_reset="earliest",
    session_timeout_ms=6000,
    heartbeat_interval_ms=500,
)
subscribe_when_known(consumer, topic)
assigned = None
while not closed.is_set():
    batches = consumer.poll(timeout_ms=100)
    now = sorted(tp.partition for tp in consumer.assignment())
    if now != assigned:
        assigned = now
        print("assigned %s" % ",".join(map(str, now)), flush=True)
    if batches:
        for tp, records in batches.items():
            for m in records:
                print("record %d %d %s" % (m.partition, m.offset, m.value.decode()))
        sys.stdout.flush()
        consumer.commit()
consumer.commit()
consumer.close()
print("closed", flush=True)
