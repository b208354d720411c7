"""One client must not lock others out by announcing worlds it never fills
(rendezvous/core/reclaim.h): forming groups nobody waits in give their place to
new groups; a group with a rank waiting keeps it."""
import json

from faultlib import Server, Skip, TAP, check, join, join_async, wait_for


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


def case_tenant_overlap_leak(opts):
    """Under --tokens, a status names another group whose plan overlaps on a
    shared host only to a caller whose token opens that group too; the
    overlap itself is still shown."""
    import os
    import shutil
    import tempfile
    from faultlib import cli
    tmp = tempfile.mkdtemp(prefix="rdzv-fault-overlap-")
    srv = None
    try:
        tokens = os.path.join(tmp, "tokens")
        os.makedirs(tokens)
        for name, text in (("a", "token-of-a"), ("a0", "token-of-a"), ("b", "token-of-b")):
            with open(os.path.join(tokens, name), "w") as f:
                f.write(text + "\n")
        env_a = dict(os.environ, RDZV_GROUP_TOKEN=os.path.join(tokens, "a"))
        env_b = dict(os.environ, RDZV_GROUP_TOKEN=os.path.join(tokens, "b"))
        srv = Server(opts, extra=["--tokens", tokens])
        # One address, three node names: each node's plan starts at the
        # base, and a status names the other node first by name.
        for group, node, env in (("a0", "node-0", env_a), ("b", "node-1", env_b),
                                 ("a", "node-2", env_a)):
            rc, _, err = join(opts, srv.endpoint, group, 1, 0, node=node, env=env)
            TAP.ok(rc == 0, "group %s joins from node %s (rc %d %s)"
                   % (group, node, rc, err.strip()[:100]))

        def overlaps(group, env):
            rc, out, err = cli(opts, "status", "--json", "--server", srv.endpoint, "--group",
                               group, env=env)
            check(rc == 0, "status of %s: %s" % (group, err))
            status = json.loads(out)
            groups = status if isinstance(status, list) else status.get("groups", [])
            return groups[0].get("plan_overlaps", []), out
        seen, _ = overlaps("a", env_a)
        TAP.ok([(o["other_group"], o["other_node"]) for o in seen] == [("a0", "node-0")],
               "A's status of a names A's own group a0 it overlaps with (%s)" % seen)
        seen, out = overlaps("b", env_b)
        TAP.ok(len(seen) == 1 and seen[0]["other_group"] is None and seen[0]["other_node"] is None
               and seen[0]["other_rank"] is None and "node-0" not in out and "a0" not in out,
               "B's status of b shows the overlap on its rank but names nothing of A's (%s)" % seen)
        seen, out = overlaps("a0", env_a)
        TAP.ok(len(seen) == 1 and seen[0]["other_group"] is None and "node-1" not in out,
               "A's status of a0 names nothing of B's group b (%s)" % seen)
    finally:
        if srv:
            srv.close()
        shutil.rmtree(tmp, ignore_errors=True)


def case_member_bytes(opts):
    """--max-member-mib 1: ranks with 255-byte host, node and session
    strings (816 bytes each as allocated) are refused with limit once their
    strings fill the budget, not after a count of ranks that would cost a
    kilobyte each; and a forming group nobody waits in gives the bytes back
    to a new group."""
    try:
        import zmq
    except ImportError:
        raise Skip("python3-zmq is not installed")
    srv = Server(opts, extra=("--max-member-mib", "1", "--max-rps", "-1"))
    try:
        s = zmq.Context.instance().socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(srv.endpoint)
        world, long = 2000, "x" * 255
        for r in range(world):
            s.send(json.dumps({"v": 1, "id": r + 1, "op": "join", "group": "fat",
                               "world": world, "rank": r, "session": long[:251] + "%04d" % r, "host": long,
                               "node": long, "timeout_ms": 1, "nccl_id": "none"}).encode())
        codes = []
        while len(codes) < world and s.poll(10000):
            codes.append(json.loads(s.recv()).get("error", {}).get("code", "ok"))
        s.close()
        taken = codes.count("timeout")
        per_rank = 3 * (16 + 256)
        TAP.ok(codes.count("limit") > 0 and taken <= (1 << 20) // per_rank,
               "%d ranks of 255-byte strings taken, then %d refused with limit (1 MiB holds "
               "%d at %d bytes a rank)" % (taken, codes.count("limit"), (1 << 20) // per_rank,
                                           per_rank))
        first = join_async(opts, srv.endpoint, "small", 2, 0, timeout=10)
        rc, _, err = join(opts, srv.endpoint, "small", 2, 1, timeout=10)
        first.communicate(timeout=30)
        TAP.ok(rc == 0 and first.returncode == 0 and "reclaim group=fat" in srv.log(),
               "the abandoned group gives its bytes back: a new group forms (exit %d and %d %s)"
               % (first.returncode, rc, err.strip()[:120]))
    finally:
        srv.close()


def case_forming_hoard(opts):
    """The attack of forming_lockout with joins that wait for an hour
    instead of giving up: one connection waits alone in 255 groups of world
    65536, beside an honest rank 0 of world 65536 waiting on its own, and
    --max-ranks is full. A world-2 group still forms at once: the hoarding
    connection, past its share (a quarter of --max-ranks), gives up one
    group, its wait answered with limit; the honest group keeps its place."""
    try:
        import zmq
    except ImportError:
        raise Skip("python3-zmq is not installed")
    srv = Server(opts)
    s = None
    try:
        honest = join_async(opts, srv.endpoint, "big", 65536, 0, timeout=120)
        wait_for(lambda: "join group=big rank=0" in srv.log(), "rank 0 of big waiting")
        s = zmq.Context.instance().socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(srv.endpoint)
        for i in range(255):
            s.send(json.dumps({"v": 1, "id": i + 1, "op": "join", "group": "hoard-%d" % i,
                               "world": 65536, "rank": 0, "session": "s%d" % i,
                               "host": "127.0.0.1", "node": "n0", "timeout_ms": 3600000,
                               "nccl_id": "none"}).encode())
        wait_for(lambda: "join group=hoard-254 " in srv.log(), "the 255 hoarded joins waiting")
        TAP.ok(not s.poll(100), "255 joins of world 65536 wait on one connection: --max-ranks "
               "is full (256 x 65536)")
        first = join_async(opts, srv.endpoint, "small", 2, 0, timeout=10)
        rc, a, err = join(opts, srv.endpoint, "small", 2, 1, timeout=10)
        out, err0 = first.communicate(timeout=30)
        TAP.ok(rc == 0 and first.returncode == 0 and a and a["world"] == 2,
               "then a group of world 2 forms (ranks' exit %d and %d: %s)"
               % (first.returncode, rc, (err or err0).strip()[:160]))
        replies = []
        while s.poll(2000):
            replies.append(json.loads(s.recv()))
        TAP.ok(len(replies) == 1 and replies[0].get("error", {}).get("code") == "limit"
               and "share" in replies[0]["error"].get("message", ""),
               "the hoarding connection gave up one group, its wait answered with limit (%s)"
               % [r.get("error") for r in replies])
        TAP.ok(honest.poll() is None and "reclaim group=big " not in srv.log(),
               "the honest group of world 65536 whose rank 0 waits alone is kept, still waiting")
        honest.kill()
        honest.communicate()
    finally:
        if s:
            s.close()
        srv.close()
