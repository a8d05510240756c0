"""A kafka-python group member against `brook broker` (run by tests/broker_groups.rs
with bootstrap, topic and the number of records to expect): consumes in group
`py-billing` from the committed offsets (earliest if none), commits, checks that
ListGroups and DescribeGroups show it as the group's one member, and leaves.
Prints "consumed N" and "first <value>"; fails if more or fewer records arrive."""

import sys

from group_join import subscribe_when_known
from kafka import KafkaAdminClient, KafkaConsumer

bootstrap, topic, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = KafkaConsumer(
    bootstrap_servers=bootstrap,
    group_id="py-billing",
    enable_auto_commit=False,
    auto_offset_reset="earliest",
    session_timeout_ms=3000,
    heartbeat_interval_ms=200,
    consumer_timeout_ms=4000,
)
subscribe_when_known(consumer, topic)
got = []
for m in consumer:
    got.append((m.partition, m.offset, m.value.decode()))
    consumer.commit()
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
if hasattr(admin, "describe_groups"):
    # kafka-python 3: dicts of the responses' fields.
    listed = [g["group_id"] for g in admin.list_groups()]
    described = admin.describe_groups(["py-billing"])["py-billing"]
    state, members, protocol = (
        described["group_state"], described["members"], described["protocol_data"])
else:
    # kafka-python 2: tuples.
    listed = [g[0] for g in admin.list_consumer_groups()]
    [described] = admin.describe_consumer_groups(["py-billing"])
    state, members, protocol = described.state, described.members, described.protocol
assert "py-billing" in listed, listed
assert (state, len(members), protocol) == ("Stable", 1, "range"), described
admin.close()
consumer.close()
assert len(got) == want, (len(got), want, got)
first = min(got, key=lambda g: int(g[2].split()[1]))
print("consumed %d" % len(got))
print("first %s" % first[2])
