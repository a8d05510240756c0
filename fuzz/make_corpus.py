#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/) from real files:
the example data (examples/data, examples/jobs), a small log written by `brook produce`
and the checkpoints of `brook run examples/jobs/crash_replay.yaml`, both made by
scripts/fuzz.sh's `seed` step with the built brook binary (given as LOG and CHECKPOINTS).

Usage: make_corpus.py REPO LOG_DIR CHECKPOINTS_DIR [FRAMES_DIR]
Each seed is framed as its target's doc comment says (a control byte, u16 lengths)."""
import glob
import hashlib
import os
import struct
import sys

repo, log_dir, chk_dir = sys.argv[1:4]
frames_dir = sys.argv[4] if len(sys.argv) > 4 else None
out = os.path.join(repo, "fuzz", "corpus")


def put(target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def piece(b):
    b = b[:0xFFFF]
    return struct.pack("<H", len(b)) + b


def read(p):
    with open(p, "rb") as f:
        return f.read()


# The log: every segment alone (log_batch), and each partition's first two segments
# with the first one's indexes (log_segment).
for part in sorted(glob.glob(os.path.join(log_dir, "topics", "*", "*"))):
    if not os.path.isdir(part):
        continue
    logs = sorted(glob.glob(os.path.join(part, "*.log")))
    for seg in logs:
        data = read(seg)
        put("log_batch", b"\x00" + data)
        put("log_batch", b"\x61" + data)
    if len(logs) >= 2:
        base = int(os.path.basename(logs[1])[:-4])
        stem = logs[0][:-4]
        body = piece(read(logs[0])) + piece(read(stem + ".index")) + piece(read(stem + ".timeindex")) + read(logs[1])
        for ctl in (0, 1, 4, 5):
            put("log_segment", bytes([ctl]) + struct.pack("<H", min(base, 0xFFFF)) + body)
    elif logs:
        put("log_segment", b"\x00\x00\x00" + piece(b"") + piece(b"") + piece(b"") + read(logs[0]))

# Checkpoints: task files (metadata made to match) and metadata files.
for meta in sorted(glob.glob(os.path.join(chk_dir, "**", "_metadata"), recursive=True)):
    put("checkpoint", b"\x01" + piece(read(meta)) + b"")
    for task in sorted(glob.glob(os.path.join(os.path.dirname(meta), "*.state"))):
        put("checkpoint", b"\x00" + read(task))

# YAML jobs.
for job in sorted(glob.glob(os.path.join(repo, "examples", "jobs", "*.yaml"))):
    put("spec", read(job))

# Records: JSON lines and CSV, plain and gzip, typed and untyped (file_records); the
# same records for the Arrow decoders (sql_decode).
datasets = sorted(glob.glob(os.path.join(repo, "examples", "data", "*.jsonl")))
csvs = sorted(glob.glob(os.path.join(repo, "examples", "data", "*.csv")))
for p in datasets:
    lines = read(p).split(b"\n")[:40]
    data = b"\n".join(lines) + b"\n"
    for ctl in (0, 2, 4, 8):
        put("file_records", bytes([ctl]) + piece(b"") + data)
    put("sql_decode", b"\x00" + data)
    put("sql_decode", b"\x02" + data)
for p in csvs:
    lines = read(p).split(b"\n")[:40]
    data = b"\n".join(lines) + b"\n"
    for ctl in (1, 3, 5, 9):
        put("file_records", bytes([ctl]) + piece(b"") + data)
    put("sql_decode", b"\x01" + b"\n".join(lines[1:]) + b"\n")
    put("sql_decode", b"\x03" + data)
# A checkpointed position (version 1, offset, line, flags) into a file.
pos = bytes([1]) + struct.pack("<QQ", 20, 1) + bytes([0])
put("file_records", b"\x00" + piece(pos) + b'{"a":1}\n{"b":2}\n{"c":3}\n')
put("file_records", b"\x01" + piece(bytes([1]) + struct.pack("<QQ", 4, 1) + bytes([2])) + b"a,b\n1,2\n3,4\n")

# Broker request frames, as kafka-python sent them (captured by scripts/fuzz.sh seed).
if frames_dir:
    for p in sorted(glob.glob(os.path.join(frames_dir, "*"))):
        put("broker_frame", read(p))
