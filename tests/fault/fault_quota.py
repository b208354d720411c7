"""One client must not lock others out by announcing worlds it never fills
(rendezvous/reclaim.h): forming groups nobody waits in give their place to
new groups; a group with a rank waiting keeps it."""
import json

from faultlib import Server, Skip, TAP, join, join_async, wait_for


def raw_joins(endpoint, count, world):
    """count one-rank joins of world, each with a 1 ms deadline, pipelined
    on one connection: the attack. Returns the error codes of the replies."""
    try:
        import zmq
    except ImportError:
        raise Skip("python3-zmq is not installed")
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    try:
        for i in range(count):
            s.send(json.dumps({"v": 1, "id": i + 1, "op": "join", "group": "junk-%d" % i,
                               "world": world, "rank": 0, "session": "s%d" % i,
                               "host": "127.0.0.1", "node": "n0", "timeout_ms": 1,
                               "nccl_id": "none"}).encode())
        codes = []
        while len(codes) < count and s.poll(10000):
            reply = json.loads(s.recv())
            codes.append(reply.get("error", {}).get("code", "ok"))
        return codes
    finally:
        s.close()


def case_forming_lockout(opts):
    """256 one-rank joins of world 65536 with a 1 ms deadline, from one
    connection, fill the default --max-ranks (16777216); a group of world 2
    still forms at once."""
    srv = Server(opts)
    try:
        codes = raw_joins(srv.endpoint, 256, 65536)
        TAP.ok(len(codes) == 256 and codes.count("limit") == 0,
               "256 abandoned worlds of 65536 announced: %d replies, %d refused with limit "
               "(the last one fills --max-ranks)" % (len(codes), codes.count("limit")))
        first = join_async(opts, srv.endpoint, "honest", 2, 0, timeout=10)
        rc, a, err = join(opts, srv.endpoint, "honest", 2, 1, timeout=10)
        out, err0 = first.communicate(timeout=30)
        TAP.ok(rc == 0 and first.returncode == 0 and a and a["world"] == 2,
               "then a group of world 2 forms (ranks' exit %d and %d: %s)"
               % (first.returncode, rc, (err or err0).strip()[:160]))
        TAP.ok("reclaim group=junk-" in srv.log(),
               "rdzvd logged the abandoned group it reclaimed for it")
    finally:
        srv.close()


def case_reclaim_spares_waiters(opts):
    """Under --max-ranks 10: a forming group with a rank waiting is never
    reclaimed; one that nobody waits in is, for a new group that needs the
    room; and when no room can be made the new group gets limit."""
    srv = Server(opts, extra=("--max-ranks", "10"))
    try:
        waiting = join_async(opts, srv.endpoint, "a", 2, 0, timeout=30)
        wait_for(lambda: "join group=a rank=0" in srv.log(), "rank 0 of a waiting")
        codes = raw_joins(srv.endpoint, 1, 8)          # junk-0: 8 ranks, nobody waits
        TAP.ok(codes == ["timeout"], "an abandoned group of world 8 fills the limit (%s)" % codes)
        rc, _, err = join(opts, srv.endpoint, "c", 3, 0, timeout=1)
        TAP.ok(rc == 3 and "reclaim group=junk-0" in srv.log(),
               "a new group of world 3 is taken (it waits: exit %d), junk-0 reclaimed for it"
               % rc)
        rc, _, err = join(opts, srv.endpoint, "d", 9, 0, timeout=1)
        TAP.ok(rc == 4 and "limit" in err and "reclaim group=a " not in srv.log(),
               "a group of world 9 cannot fit beside a's waiting rank: refused (exit %d, %s), "
               "and a is kept" % (rc, err.strip()[:120]))
        rc, _, err = join(opts, srv.endpoint, "a", 2, 1, timeout=10)
        out, _ = waiting.communicate(timeout=30)
        TAP.ok(rc == 0 and waiting.returncode == 0,
               "a's second rank joins and both are assigned (exit %d and %d)"
               % (waiting.returncode, rc))
    finally:
        srv.close()
