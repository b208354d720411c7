#!/usr/bin/python3
"""Writes the seed corpus of the fuzz harnesses into corpus/<harness>/.

    make_corpus.py RDZVD RDZV     (the built rdzvd and rdzv CLI)

proto: one request per file, every op valid and a set of bad ones.
core: request sequences (one per line) that drive whole rendezvous.
journal: journal files written by a real rdzvd, plus damaged copies.
records: the same journals' records as JSON lines (fuzz_records frames them).
Rerun it after a protocol change; the files are kept in git."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def req(op, i=1, **kw):
    d = {"v": 1, "op": op, "id": i}
    d.update(kw)
    return json.dumps(d, separators=(",", ":"))


def join(rank, world=2, group="g", session=None, node=None, i=1, **kw):
    return req("join", i, group=group, world=world, rank=rank, host="10.0.0.%d" % rank,
               node=node or "n%d" % rank, session=session or "s%d" % rank,
               timeout_ms=5000, nccl_id="none", **kw)


PROTO = {
    "join": join(0),
    "join_server_id": req("join", 2, group="g", world=4, rank=3, host="h", node="n",
                          session="abc", nccl_id="server"),
    "join_members": join(1, members=True),
    "join_minimal": req("join", group="g", world=1, rank=0, host="h", node="n", session="s"),
    "heartbeat": req("heartbeat", group="g", rank=0, session="s0", epoch=1),
    "status": req("status"),
    "status_group": req("status", group="g"),
    "kv_put": req("kv_put", group="g", epoch=1, key="k", value="v"),
    "kv_put_empty": req("kv_put", group="g", epoch=1, key="k", value=""),
    "kv_get": req("kv_get", group="g", epoch=1, key="k"),
    "kv_wait": req("kv_wait", group="g", epoch=1, key="k", timeout_ms=100),
    "group_delete": req("group_delete", group="g"),
    "bad_json": '{"v":1,"op":"join",',
    "not_object": '[1,2,3]',
    "bad_version": req("status").replace('"v":1', '"v":2'),
    "no_version": '{"op":"status","id":3}',
    "unknown_op": req("launch"),
    "bad_rank": join(5),
    "neg_world": join(0, world=-1),
    "huge_world": join(0, world=1 << 30),
    "float_rank": join(0).replace('"rank":0', '"rank":0.5'),
    "string_world": join(0).replace('"world":2', '"world":"2"'),
    "long_group": join(0, group="x" * 300),
    "space_group": join(0, group="a b"),
    "ctrl_group": join(0, group="a\u0001b"),
    "bad_nccl": join(0).replace('"none"', '"maybe"'),
    "timeout_zero": join(0).replace('"timeout_ms":5000', '"timeout_ms":0'),
    "timeout_huge": join(0).replace('"timeout_ms":5000', '"timeout_ms":1e300'),
    "id_huge": join(0).replace('"id":1', '"id":9223372036854775807'),
    "id_negative": join(0).replace('"id":1', '"id":-1'),
    "dup_keys": '{"v":1,"v":1,"op":"status","op":"status"}',
    "nul_inside": '{"v":1,"op":"status"}\u0000{"v":1}',
    "deep": '{"v":1,"op":"status","x":' + "[" * 500 + "]" * 500 + "}",
    "utf8": join(0, node="nœud-\u00e9"),
    "kv_big": req("kv_put", group="g", epoch=1, key="k", value="v" * 70000),
    "empty": "",
}

CORE = {
    "rendezvous2": [join(0), join(1)],
    "rendezvous4_one_node": [join(r, world=4, node="pod") for r in range(4)],
    "resume": [join(0), join(1), join(1, i=2)],
    "restart_epoch": [join(0), join(1), join(1, session="s1-new"), join(0, i=3),
                      req("heartbeat", group="g", rank=0, session="s0", epoch=1)],
    "rank_taken": [join(0, world=3), join(0, world=3, session="other")],
    "world_mismatch": [join(0), join(1, world=3)],
    "kv": [join(0), join(1), req("kv_put", group="g", epoch=1, key="k", value="v"),
           req("kv_get", group="g", epoch=1, key="k"),
           req("kv_wait", group="g", epoch=1, key="k2", timeout_ms=100),
           req("kv_put", group="g", epoch=1, key="k2", value="w"),
           req("kv_get", group="g", epoch=2, key="k")],
    "delete": [join(0), req("group_delete", group="g"), join(1), req("status")],
    "two_groups": [join(0, group="a", node="n"), join(1, group="a", node="n"),
                   join(0, group="b", node="n"), join(1, group="b", node="n"),
                   req("status")],
    "exhaust": [join(r, world=70, node="one") for r in range(70)],
    "mixed_bad": [join(0), "{", req("nope"), join(9), join(1)],
}


def frame(payload):
    import zlib
    return struct.pack("<II", len(payload), zlib.crc32(payload) & 0xffffffff) + payload


def records(data):
    out, off = [], 0
    while off + 8 <= len(data):
        n, _ = struct.unpack_from("<II", data, off)
        out.append(data[off + 8:off + 8 + n])
        off += 8 + n
    return out


def real_journal(rdzvd, rdzv):
    """Runs a small life of a group against a real rdzvd and returns the
    journal bytes."""
    d = tempfile.mkdtemp(prefix="rdzv-corpus-")
    try:
        ep_file = os.path.join(d, "ep")
        p = subprocess.Popen([rdzvd, "--bind", "tcp://127.0.0.1:*", "--endpoint-file", ep_file,
                              "--state-dir", os.path.join(d, "state"), "--no-nccl",
                              "--port-limit", "20000"], stderr=subprocess.DEVNULL)
        for _ in range(500):
            if os.path.exists(ep_file):
                break
            time.sleep(0.01)
        ep = open(ep_file).read().strip()

        def cli(*args, wait=True):
            a = [rdzv] + list(args) + ["--server", ep]
            return subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        procs = [cli("join", "--group", "g", "--world", "2", "--rank", str(r), "--host",
                     "127.0.0.1", "--node", "n", "--nccl-id", "none") for r in range(2)]
        for q in procs:
            q.wait()
        cli("kv", "put", "--group", "g", "--epoch", "1", "k", "v").wait()
        procs = [cli("join", "--group", "g", "--world", "2", "--rank", str(r), "--host",
                     "127.0.0.1", "--node", "n", "--nccl-id", "none") for r in range(2)]
        for q in procs:
            q.wait()
        cli("join", "--group", "h", "--world", "1", "--rank", "0", "--host", "127.0.0.1",
            "--node", "m", "--nccl-id", "none").wait()
        cli("group", "delete", "--group", "h").wait()
        p.terminate()
        p.wait()
        return open(os.path.join(d, "state", "journal"), "rb").read()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def write(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    for name, text in PROTO.items():
        write("proto", name, text)
    for name, lines in CORE.items():
        write("core", name, "\n".join(lines))
    if len(sys.argv) == 3:
        j = real_journal(sys.argv[1], sys.argv[2])
        recs = records(j)
        write("journal", "real", j)
        write("journal", "empty", b"")
        write("journal", "torn_header", j + frame(b'{"t":"x"}')[:5])
        write("journal", "torn_body", j + frame(b'{"t":"group","g":"z"}')[:-3])
        mid = len(j) // 2
        write("journal", "flipped_middle", j[:mid] + bytes([j[mid] ^ 0x10]) + j[mid + 1:])
        write("journal", "zero_length", j + b"\0" * 8)
        write("journal", "huge_length", frame(recs[0]) + struct.pack("<II", 0xfffffff0, 0) + j)
        write("records", "real", b"\n".join(recs))
        for i, r in enumerate(recs[:6]):
            write("records", "one_%d" % i, r)
        write("records", "unknown_type", b'{"t":"nope","g":"g"}')
        write("records", "no_group", b'{"t":"join"}\n{"t":"group"}')
        write("records", "not_json", b'{"t":"group","g":')
        # The journal above may predate "plans" (one record per release).
        write("records", "plans", b'{"t":"group","g":"g","world":3,"nccl":"none"}\n'
              b'{"t":"plans","g":"g","count":32,"ranks":[0,1,2],"nodes":["a","a","b"],'
              b'"starts":[19500,19532,19500]}')
        write("core", "real_journal_ops",
              "\n".join([join(0, world=1), req("status", i=2)]))
    else:
        print("no rdzvd given: journal and records seeds not written", file=sys.stderr)


if __name__ == "__main__":
    main()
