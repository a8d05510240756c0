"""A kafka-python group member of `billing` that only keeps its membership (run by
tests/broker_groups.rs, which SIGKILLs it): session timeout 1 s."""

import sys

from group_join import subscribe_when_known
from kafka import KafkaConsumer

bootstrap, topic = sys.argv[1], sys.argv[2]
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    group_id="billing",
    enable_auto_commit=False,
    auto_offset_reset="earliest",
    session_timeout_ms=1000,
    heartbeat_interval_ms=200,
)
subscribe_when_known(consumer, topic)
while True:
    consumer.poll(timeout_ms=200)
