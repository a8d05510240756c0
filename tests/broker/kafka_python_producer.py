"""A kafka-python producer for tests/broker_story.rs (bootstrap, topic, prefix):
appends `PREFIX-0`, `PREFIX-1`, ... keyed by a student's name, one every 5 ms with
acks=all, until stdin reaches its end; then waits for every acknowledgement (an
exception if one failed) and prints "produced N"."""

import sys
import threading
import time

from kafka import KafkaProducer

bootstrap, topic, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
students = ["ivy", "kai", "omar", "mia", "leo", "zoe", "sam", "ana"]
closed = threading.Event()


def wait_for_stdin_end():
    sys.stdin.read()
    closed.set()


threading.Thread(target=wait_for_stdin_end, daemon=True).start()
# kafka-python's defaults otherwise (version 3: an idempotent producer).
producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
futures = []
while not closed.is_set():
    n = len(futures)
    key = students[(n * 3) % len(students)].encode()
    futures.append(producer.send(topic, key=key, value=("%s-%d" % (prefix, n)).encode()))
    time.sleep(0.005)
producer.flush()
for f in futures:
    f.get(timeout=30)
producer.close()
print("produced %d" % len(futures))
