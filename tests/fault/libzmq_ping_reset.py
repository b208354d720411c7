#!/usr/bin/env python3
"""A reproducer, run by hand, of the libzmq 4.3 assertion rdzvd cannot
avoid (docs/reliability.md, "What still reaches it"): peers that each send
a burst of requests with ZMTP PING commands between them, read nothing, and
reset their connections. While rdzvd has not drained a peer's queue
(ZMQ_RCVHWM full), libzmq has stopped reading its socket; the reset marks
the engine failed, and draining it then decodes a PING, whose PONG calls
out_event, which asserts `!_io_error` (src/stream_engine_base.cpp:331).

    PYTHONPATH=tests/lib:tests/fault tests/fault/libzmq_ping_reset.py \\
        build/rendezvous/rdzvd build/client/rdzv [PEERS]

Prints whether rdzvd survived 30 s of rounds, and the end of its log. Not
run by meson: it ends in that abort with Debian 12's libzmq 4.3.4."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

from fault_network import handshake, zmtp_frame
import rdzvtest


def main():
    rdzvd, rdzv = sys.argv[1], sys.argv[2]
    peers = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    tmp = tempfile.TemporaryDirectory()
    d = rdzvtest.Rdzvd(rdzvd, tmp.name, "--no-nccl")
    ep = d.endpoint
    subprocess.run([rdzv, "join", "--server", ep, "--group", "big", "--world", "1", "--rank", "0",
                    "--nccl-id", "none"], capture_output=True, check=True)
    subprocess.run([rdzv, "kv", "put", "--server", ep, "--group", "big", "--epoch", "1", "k",
                    "v" * 64000], capture_output=True, check=True)
    request = zmtp_frame(b'{"v":1,"id":1,"op":"kv_get","group":"big","epoch":1,"key":"k"}')
    ping = b"\x04\x07\x04PING\x00\x0a"          # a short command frame: PING, TTL 1 s
    burst = (request + ping) * 60
    t0, rounds = time.monotonic(), 0
    while time.monotonic() - t0 < 30 and d.proc.poll() is None:
        held = []
        for _ in range(peers):
            try:
                s = handshake(ep)
            except Exception:
                continue
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.setblocking(False)
            held.append(s)
        end = time.monotonic() + 2
        while time.monotonic() < end:
            for s in held:
                try:
                    s.send(burst)
                except OSError:
                    pass
        for s in held:                          # a reset, not a FIN
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        rounds += 1
    alive = d.proc.poll() is None
    print("rounds %d, rdzvd %s" % (rounds, "alive" if alive else "exited %d" % d.proc.returncode))
    print(d.log()[-400:])
    d.stop()
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
