"""kafka-python's KafkaAdminClient against `brook broker` (run by
tests/broker_admin.rs with the bootstrap address as argv[1]): DescribeConfigs of a
topic (only what was set counts as modified, as Kafka reports it) and of the broker,
CreatePartitions, DeleteTopics, and OffsetDelete of an empty group. Exits non-zero
(an assertion) on any difference."""

import sys

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic
from kafka.structs import OffsetAndMetadata

bootstrap = sys.argv[1]
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
admin.create_topics(
    [
        NewTopic("py-admin", 2, 1, topic_configs={"retention.ms": "60000"}),
        NewTopic("py-gone", 1, 1),
    ]
)

topic = ConfigResource(ConfigResourceType.TOPIC, "py-admin")
modified = admin.describe_configs([topic])["topic"]["py-admin"]
assert set(modified) == {"retention.ms"}, modified
assert modified["retention.ms"]["value"] == "60000", modified
every = admin.describe_configs([topic], config_filter="all")["topic"]["py-admin"]
assert every["segment.bytes"]["value"] == "1073741824", every
assert every["max.message.bytes"]["value"] == "1048576", every
broker = admin.describe_configs(
    [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
)["broker"]["0"]
assert broker["group.min.session.timeout.ms"]["value"] == "500", broker

admin.create_partitions({"py-admin": NewPartitions(4)})
described = admin.describe_topics(["py-admin"])
assert len(described[0]["partitions"]) == 4, described

admin.delete_topics(["py-gone"])
assert "py-gone" not in admin.list_topics(), admin.list_topics()

tps = [TopicPartition("py-admin", p) for p in range(2)]
admin.alter_group_offsets("py-group", {tp: OffsetAndMetadata(0, "", -1) for tp in tps})
errors = admin.delete_group_offsets("py-group", [tps[0]])
assert all(e.errno == 0 for e in errors.values()), errors
left = admin.list_group_offsets({"py-group": None})["py-group"]
assert list(left) == [tps[1]], left
admin.close()
print("ok")
