"""kafka-python's KafkaAdminClient alters topic configs of `brook broker` (run by
tests/broker_admin.rs with the bootstrap address as argv[1]): IncrementalAlterConfigs
SET, DELETE, APPEND and SUBTRACT, validate_only, the refusals (an unknown config or a
bad value is INVALID_CONFIG naming it, an unknown topic UNKNOWN_TOPIC_OR_PARTITION,
a broker setting INVALID_CONFIG), and the legacy AlterConfigs; DescribeConfigs shows
each change. Exits non-zero (an assertion) on any difference."""

import sys

from kafka import KafkaAdminClient
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, NewTopic

bootstrap = sys.argv[1]
admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
admin.create_topics([NewTopic("py-configs", 1, 1)])


def topic(configs=None, name="py-configs"):
    return ConfigResource(ConfigResourceType.TOPIC, name, configs)


def values():
    described = admin.describe_configs([topic()], config_filter="all")
    return {k: v["value"] for k, v in described["topic"]["py-configs"].items()}


def alter(configs, name="py-configs", **kw):
    result = admin.alter_configs([topic(configs, name)], **kw)
    return result["topic"][name]


defaults = values()
assert defaults["retention.ms"] == "604800000", defaults
assert defaults["cleanup.policy"] == "delete", defaults

# IncrementalAlterConfigs: SET and APPEND in one request.
ok = alter(
    {
        "retention.ms": (AlterConfigOp.SET, "60000"),
        "cleanup.policy": (AlterConfigOp.APPEND, "compact"),
    },
    incremental=True,
)
assert ok == "OK", ok
now = values()
assert now["retention.ms"] == "60000", now
assert now["cleanup.policy"] == "compact,delete", now
# The others are untouched.
assert now["segment.bytes"] == defaults["segment.bytes"], now

# validate_only: checked, not applied.
ok = alter({"retention.ms": (AlterConfigOp.SET, "1000")}, incremental=True, validate_only=True)
assert ok == "OK", ok
assert values()["retention.ms"] == "60000"

# DELETE returns to the default; SUBTRACT removes a policy.
ok = alter(
    {
        "retention.ms": (AlterConfigOp.DELETE, None),
        "cleanup.policy": (AlterConfigOp.SUBTRACT, "delete"),
    },
    incremental=True,
)
assert ok == "OK", ok
now = values()
assert now["retention.ms"] == "604800000", now
assert now["cleanup.policy"] == "compact", now

# Refusals reach the client with the broker's code and a message naming the config;
# nothing of the refused request is applied.
bad = alter(
    {"segment.ms": (AlterConfigOp.SET, "60000"), "compression.type": (AlterConfigOp.SET, "zstd")},
    incremental=True,
    raise_on_unknown=False,
)
assert "InvalidConfiguration" in bad and "compression.type" in bad, bad
assert values()["segment.ms"] == defaults["segment.ms"]
bad = alter({"retention.ms": (AlterConfigOp.SET, "soon")}, incremental=True, raise_on_unknown=False)
assert "InvalidConfiguration" in bad and "retention.ms" in bad, bad
bad = alter({"retention.ms": (AlterConfigOp.APPEND, "5")}, incremental=True, raise_on_unknown=False)
assert "InvalidConfiguration" in bad and "retention.ms" in bad, bad
bad = alter({"retention.ms": "1000"}, name="nothing", incremental=True, raise_on_unknown=False)
assert "UnknownTopicOrPartition" in bad, bad
broker = admin.alter_configs(
    [ConfigResource(ConfigResourceType.BROKER, "0", {"num.partitions": "3"})],
    incremental=True,
    raise_on_unknown=False,
)["broker"]["0"]
assert "InvalidConfiguration" in broker and "num.partitions" in broker, broker

# The legacy AlterConfigs (a whole-set replace): kafka-python sends the other
# modified configs along (cleanup.policy here), so they stay.
ok = alter({"segment.bytes": "1048576"}, incremental=False)
assert ok == "OK", ok
now = values()
assert now["segment.bytes"] == "1048576", now
assert now["cleanup.policy"] == "compact", now
bad = alter({"retention.ms": "soon"}, incremental=False, raise_on_unknown=False)
assert "InvalidConfiguration" in bad and "retention.ms" in bad, bad
admin.close()
print("ok")
