"""kafka-python against a `brook broker` with SASL users (run by tests/broker_sasl.rs
with the bootstrap address, the user and the password as arguments): produce with
SCRAM-SHA-256, read back with SCRAM-SHA-512 into the existing topic `py-sasl`; a
producer with a wrong password gets the broker's SASL_AUTHENTICATION_FAILED ("Invalid
user credentials", in kafka-python's log) and never connects. Prints `ok` at the end;
exits non-zero (an assertion or exception) on any difference."""

import logging
import sys

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

bootstrap, user, password = sys.argv[1], sys.argv[2], sys.argv[3]
topic = "py-sasl"


def sasl(mechanism, pw):
    return dict(
        bootstrap_servers=bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=pw,
        request_timeout_ms=10000,
    )


# kafka-python 3 turns idempotence on by default; brook broker does not serve it yet.
producer = KafkaProducer(acks="all", enable_idempotence=False, **sasl("SCRAM-SHA-256", password))
for i in range(10):
    producer.send(topic, key=b"k%d" % i, value=b"sale %d" % i, partition=0).get(timeout=10)
producer.close()

consumer = KafkaConsumer(group_id=None, consumer_timeout_ms=1500, **sasl("SCRAM-SHA-512", password))
tp = TopicPartition(topic, 0)
consumer.assign([tp])
consumer.seek_to_beginning(tp)
values = [m.value for m in consumer]
consumer.close()
assert values == [b"sale %d" % i for i in range(10)], values

# kafka-python logs the broker's answer to a wrong password and gives up on the
# bootstrap server after bootstrap_timeout_ms ("Unable to bootstrap").
class Remember(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


remember = Remember()
logging.getLogger("kafka").addHandler(remember)
logging.getLogger("kafka").setLevel(logging.WARNING)
try:
    KafkaProducer(
        acks="all",
        enable_idempotence=False,
        bootstrap_timeout_ms=3000,
        **sasl("SCRAM-SHA-256", password + "-wrong"),
    )
    raise AssertionError("a producer with a wrong password connected")
except KafkaError as e:
    print("wrong password:", type(e).__name__, e)
failed = [
    line
    for line in remember.lines
    if "SaslAuthenticationFailedError" in line and "Invalid user credentials" in line
]
assert failed, remember.lines
print("ok")
