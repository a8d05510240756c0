#!/usr/bin/env python3
"""Captures the request frames a real Kafka client (kafka-python) sends to `brook
broker`, as seeds of the broker_frame fuzz target: a proxy on 127.0.0.1:PORT forwards
to the broker on 127.0.0.2:PORT (advertised as 127.0.0.1, so every connection of the
client goes through the proxy) and writes each client frame, size prefix included,
to OUT_DIR. Bounded: the client does a fixed set of calls and the script ends.

Usage: PYTHONPATH=<kafka-python> capture_frames.py PORT OUT_DIR"""
import os
import socket
import sys
import threading

port = int(sys.argv[1])
out_dir = sys.argv[2]
os.makedirs(out_dir, exist_ok=True)
count = [0]
lock = threading.Lock()


def pump(src, dst, record):
    buf = b""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            if record:
                buf += data
                while len(buf) >= 4:
                    n = int.from_bytes(buf[:4], "big", signed=True)
                    if n < 0 or len(buf) < 4 + n:
                        break
                    with lock:
                        count[0] += 1
                        i = count[0]
                    with open(os.path.join(out_dir, "frame-%04d" % i), "wb") as f:
                        f.write(buf[: 4 + n])
                    buf = buf[4 + n :]
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listener):
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        upstream = socket.create_connection(("127.0.0.2", port), timeout=10)
        threading.Thread(target=pump, args=(client, upstream, True), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client, False), daemon=True).start()


listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(16)
threading.Thread(target=serve, args=(listener,), daemon=True).start()

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition  # noqa: E402
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic  # noqa: E402

boot = "127.0.0.1:%d" % port
admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=10000)
admin.create_topics([NewTopic("fz", 2, 1)])
admin.create_partitions({"fz": NewPartitions(3)})
for compression in (None, "gzip"):
    p = KafkaProducer(bootstrap_servers=boot, compression_type=compression, linger_ms=5)
    for i in range(20):
        p.send("fz", key=b"k%d" % (i % 3), value=b'{"n":%d}' % i, headers=[("h", b"v")])
    p.send("fz", key=b"gone", value=None)
    p.flush()
    p.close()
p = KafkaProducer(bootstrap_servers=boot, enable_idempotence=True)
for i in range(5):
    p.send("fz", value=b"idempotent %d" % i)
p.flush()
p.close()
c = KafkaConsumer(
    "fz",
    bootstrap_servers=boot,
    group_id="g",
    auto_offset_reset="earliest",
    consumer_timeout_ms=3000,
    session_timeout_ms=6000,
)
n = sum(1 for _ in c)
c.commit()
c.close()
for call in (
    lambda: admin.list_groups(),
    lambda: admin.describe_groups(["g"]),
    lambda: admin.list_group_offsets("g"),
    lambda: admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "fz")]),
    lambda: admin.delete_groups(["g"]),
):
    try:
        call()
    except Exception as e:  # the frame was sent; an answer brook refuses is fine here
        print("call failed:", e)
admin.delete_topics(["fz"])
admin.close()
listener.close()
print("captured %d frames, consumed %d records" % (count[0], n))
