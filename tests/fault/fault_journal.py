"""Journal faults: torn tails, flipped bits, a full disk, compaction."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time

import rdzvtest
from faultlib import (Fail, Server, Skip, TAP, build_history, check, cli, group_of, join,
                     join_async, kv_get, records, rendezvous, require_flag, status, timed_join,
                     wait_for)

def case_torn_tail(opts):
    """Truncates the journal at every byte of its last record: rdzvd starts,
    says "torn", cuts the tail and serves the state up to the record before."""
    srv, data, recs = build_history(opts)
    last_off, last_len, _ = recs[-1]
    n_ok = 0
    fails = []
    t0 = time.monotonic()
    starts = []
    try:
        for cut in range(last_off + 1, last_off + last_len):
            with open(srv.journal, "wb") as f:
                f.write(data[:cut])
            t1 = time.monotonic()
            srv.start(bind="tcp://127.0.0.1:*")
            starts.append(time.monotonic() - t1)
            log = srv.log_since()
            rc, st, err = status(opts, srv.endpoint, "g")
            g = group_of(st, "g") if st else None
            krc, kout, kerr = kv_get(opts, srv.endpoint, "last-key")
            size = os.path.getsize(srv.journal)
            srv.stop(signal.SIGKILL)
            problems = []
            if "torn" not in log.lower():
                problems.append("no 'torn' in the log")
            if not g or not g.get("complete") or g.get("epoch") != 1 or \
                    sorted(g.get("joined", [])) != [0, 1]:
                problems.append("group g not intact: %s" % json.dumps(g))
            if krc == 0:
                problems.append("the torn KV record was applied")
            elif "not_found" not in kerr:
                problems.append("kv get: %s" % kerr.strip())
            if size != last_off:
                problems.append("journal is %d bytes after start, not %d" % (size, last_off))
            if problems:
                fails.append("cut at %d: %s" % (cut, "; ".join(problems)))
            else:
                n_ok += 1
        total = last_len - 1
        TAP.ok(not fails, "torn tail: %d/%d cuts of the last record (%d bytes at offset %d) "
               "start, say torn, keep the %d records before" % (n_ok, total, last_len, last_off,
                                                               len(recs) - 1))
        for f in fails[:10]:
            TAP.note(f)
        TAP.note("%d restarts in %.1f s; rdzvd start to serving: median %.0f ms, max %.0f ms"
                 % (total, time.monotonic() - t0, 1000 * sorted(starts)[len(starts) // 2],
                    1000 * max(starts)))
        # The full journal, for contrast: the KV record is there.
        with open(srv.journal, "wb") as f:
            f.write(data)
        srv.start(bind="tcp://127.0.0.1:*")
        krc, kout, _ = kv_get(opts, srv.endpoint, "last-key")
        TAP.ok(krc == 0 and kout.strip() == "last-value" and "torn" not in srv.log_since().lower(),
               "the untouched journal replays the KV record and reports nothing torn")
    finally:
        srv.close()


def flip_case(opts, positions, label):
    """Flips one bit at each of positions (byte offset, bit) inside a middle
    record: rdzvd must refuse to start naming that record's offset, and
    start with --repair keeping the records before it."""
    srv, data, recs = build_history(opts)
    mid = recs[len(recs) // 2]
    fails = []
    tried = 0
    try:
        for rel, bit in positions(mid):
            tried += 1
            bad = bytearray(data)
            bad[mid[0] + rel] ^= 1 << bit
            with open(srv.journal, "wb") as f:
                f.write(bad)
            p = srv.spawn(bind="tcp://127.0.0.1:*")
            try:
                wait_for(lambda: p.poll() is not None or os.path.exists(srv.ep_file),
                         "rdzvd to exit or serve", step=0.005)
            except Fail:
                pass
            rc = p.poll()
            log = srv.log_since()
            if rc is None:
                srv.stop(signal.SIGKILL)
                kept = os.path.getsize(srv.journal)
                fails.append("byte %d bit %d: rdzvd started, journal cut to %d of %d bytes "
                             "(log: %s)" % (mid[0] + rel, bit, kept, len(data),
                                            " | ".join(l for l in log.splitlines()
                                                       if "torn" in l.lower())[-160:]))
                continue
            if rc == 0 or not re.search(r"\b%d\b" % mid[0], log):
                fails.append("byte %d bit %d: exit %s, log does not name offset %d: %s"
                             % (mid[0] + rel, bit, rc, mid[0], log.strip()[-200:]))
                continue
            if open(srv.journal, "rb").read() != bytes(bad):
                fails.append("byte %d bit %d: the refused journal was modified"
                             % (mid[0] + rel, bit))
        TAP.ok(not fails, "%s: %d single-bit flips in record %d of %d (offset %d, %d bytes): "
               "rdzvd refuses to start and names the offset" % (label, tried, len(recs) // 2,
                                                                 len(recs), mid[0], mid[1]))
        for f in fails[:10]:
            TAP.note(f)
        # --repair with one flip in the record's JSON.
        bad = bytearray(data)
        bad[mid[0] + 8 + mid[1] // 2] ^= 0x04
        with open(srv.journal, "wb") as f:
            f.write(bad)
        srv.start(bind="tcp://127.0.0.1:*", extra=srv.extra + ["--repair"])
        log = srv.log_since()
        size = os.path.getsize(srv.journal)
        rc, st, _ = status(opts, srv.endpoint)
        srv.stop()
        TAP.ok(size == mid[0] and rc == 0,
               "--repair starts and cuts the journal at the damaged record (%d bytes kept, "
               "expected %d)" % (size, mid[0]))
        TAP.note("--repair log: " + log.strip().replace("\n", " | ")[-300:])
    finally:
        srv.close()


def case_bitflip_payload(opts):
    def positions(rec):
        n = rec[1] - 8
        for rel in sorted({8, 8 + n // 4, 8 + n // 2, 8 + 3 * n // 4, 8 + n - 1}):
            for bit in (0, 3, 7):
                yield rel, bit
    flip_case(opts, positions, "flipped bit in a middle record's JSON")


def case_bitflip_header(opts):
    """Flips in the CRC field and in the length field. A length that grows
    past the end of the file must still be corruption (records follow it),
    not a torn tail: a torn tail is only ever the last record."""
    def positions(rec):
        for rel in range(0, 8):
            for bit in (0, 4, 7):
                yield rel, bit
    flip_case(opts, positions, "flipped bit in a middle record's length or CRC")


def case_full_disk(opts):
    """State dir on a 64 KiB tmpfs. Fill it: joins get `internal`, nothing
    acknowledged is lost; free space: rdzvd works again without a restart."""
    if os.geteuid() != 0:
        raise Skip("needs root to mount a tmpfs")
    mnt = tempfile.mkdtemp(prefix="rdzv-fault-tmpfs-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        raise Skip("cannot mount a tmpfs here: %s" % r.stderr.strip())
    srv = None
    try:
        state = os.path.join(mnt, "state")
        srv = Server(opts, state_dir=state)
        acked, refused, other = [], [], []
        rc, _, err = join(opts, srv.endpoint, "before-full", 1, 0, node="fd")
        check(rc == 0, "first join failed: %s" % err)
        acked.append("before-full")
        filler = os.path.join(mnt, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\xa5" * 512)
        except OSError:
            pass
        os.close(fd)
        free = os.statvfs(mnt).f_bavail
        # The journal's last page may still have room: keep joining until
        # refusals come, then a few more.
        for i in range(40):
            name = "full-%d" % i
            rc, a, err = join(opts, srv.endpoint, name, 1, 0, node="fd", timeout=5)
            if rc == 0:
                acked.append(name)
            elif "internal" in err:
                refused.append(name)
            else:
                other.append((name, rc, err.strip()))
            if len(refused) >= 5:
                break
        TAP.ok(len(refused) >= 5 and not other,
               "disk full (%d blocks free): %d joins acknowledged, then %d refused with "
               "`internal`, %d other outcomes" % (free, len(acked) - 1, len(refused), len(other)))
        for o in other[:5]:
            TAP.note("unexpected: %r" % (o,))
        alive = srv.proc.poll() is None
        TAP.ok(alive, "rdzvd keeps running on a full disk")
        rc, st, err = status(opts, srv.endpoint)
        names = {g["group"] for g in st["groups"]} if st else set()
        TAP.ok(rc == 0 and set(acked) <= names and not (set(refused) & names),
               "status: every acknowledged group present, no refused group present")
        os.unlink(filler)
        dt, rc, err = timed_join(opts, srv.endpoint, "after-free")
        TAP.ok(rc == 0, "space back: a join succeeds without restarting rdzvd (%.0f ms)"
               % (dt * 1000))
        if rc == 0:
            acked.append("after-free")
        srv.stop(signal.SIGKILL)
        srv.start()
        rc, st, err = status(opts, srv.endpoint)
        names = {g["group"] for g in st["groups"]} if st else set()
        lost = set(acked) - names
        ghosts = set(refused) & names
        TAP.ok(rc == 0 and not lost and not ghosts,
               "after kill -9 and restart: %d acknowledged groups all present (lost: %s), "
               "refused ones absent (present: %s)" % (len(acked), sorted(lost) or "none",
                                                      sorted(ghosts) or "none"))
        TAP.note("rdzvd log on ENOSPC: " + " | ".join(
            l for l in srv.log().splitlines() if "internal" in l or "No space" in l
            or "journal" in l)[-400:])
    finally:
        if srv:
            srv.close()
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)


def case_compaction(opts):
    """Past --compact-mib the journal is rewritten as a snapshot; kill -9
    before, during and after loses nothing acknowledged."""
    require_flag(opts, "--compact-mib")
    srv = Server(opts, extra=["--compact-mib", "1"])
    try:
        rendezvous(opts, srv.endpoint, "keep", 2)
        plan_before = {m["rank"]: m["ports"] for m in
                       group_of(status(opts, srv.endpoint, "keep")[1], "keep")["members"]}
        written = 0
        for i in range(40):
            value = ("%02d" % i) * 30000
            rc, out, err = cli(opts, "kv", "put", "--server", srv.endpoint, "--group", "keep",
                               "--epoch", "1", "k", value)
            check(rc == 0, "put %d: %s" % (i, err))
            written += len(value)
            if i % 13 == 12:
                srv.stop(signal.SIGKILL)
                srv.start()
        files = sorted(os.listdir(srv.state))
        jsize = os.path.getsize(srv.journal) if os.path.exists(srv.journal) else 0
        TAP.ok(jsize < 1024 * 1024,
               "%d KiB of KV puts with --compact-mib 1: journal %d KiB, state dir %s"
               % (written // 1024, jsize // 1024, files))
        srv.stop(signal.SIGKILL)
        srv.start()
        rc, out, err = kv_get(opts, srv.endpoint, "k", group="keep")
        TAP.ok(rc == 0 and out.strip() == "39" * 30000, "after kill -9 the last value is back")
        st = group_of(status(opts, srv.endpoint, "keep")[1], "keep")
        plan_after = {m["rank"]: m["ports"] for m in st["members"]}
        TAP.ok(st["epoch"] == 1 and st["complete"] and plan_after == plan_before,
               "group, epoch and plans survive compaction")
        leftovers = [f for f in os.listdir(srv.state) if f.endswith(".tmp")]
        TAP.ok(not leftovers, "no temporary files left: %s" % leftovers)
        # A torn tail after a snapshot: still only the tail is lost.
        rc, out, err = cli(opts, "kv", "put", "--server", srv.endpoint, "--group", "keep",
                           "--epoch", "1", "after-snap", "v")
        srv.stop()
        data = open(srv.journal, "rb").read()
        with open(srv.journal, "wb") as f:
            f.write(data[:-3])
        srv.start()
        rc1, out1, _ = kv_get(opts, srv.endpoint, "k", group="keep")
        rc2, _, err2 = kv_get(opts, srv.endpoint, "after-snap", group="keep")
        TAP.ok(rc1 == 0 and out1.strip() == "39" * 30000 and rc2 != 0 and "torn" in srv.log_since(),
               "a torn tail after compaction loses only the torn record")
    finally:
        srv.close()


# --- a power cut: only what an fdatasync covered survives ---------------------

def _durable(log, journal):
    """The journal's size at the last sync that covered it (powercut.c), 0
    if none did."""
    size, path = 0, os.path.realpath(journal)
    if os.path.exists(log):
        for line in open(log):
            n, _, p = line.rstrip("\n").partition(" ")
            if p == path:
                size = int(n)
    return size


def _cut_power(srv, log):
    """kill -9, then drop what no sync covered, as a power cut would.
    Returns (bytes kept, bytes the file had)."""
    srv.stop(signal.SIGKILL)
    had = os.path.getsize(srv.journal)
    keep = _durable(log, srv.journal)
    os.truncate(srv.journal, keep)
    return keep, had


def _with_powercut(opts, srv, log, delay_ms):
    srv.stop()
    env = ["env", "LD_PRELOAD=" + os.path.abspath(opts.powercut), "POWERCUT_LOG=" + log,
           "POWERCUT_DELAY_MS=%d" % delay_ms]
    if os.environ.get("FAULT_SANITIZED"):
        # The preloaded library comes before the sanitizer's runtime.
        env.append("ASAN_OPTIONS=%s:verify_asan_link_order=0" % os.environ.get("ASAN_OPTIONS", ""))
    srv.prefix = tuple(env)
    srv.start()


def _fsyncs(port):
    m = re.search(r"^rdzv_journal_fsync_seconds_count (\d+)",
                  rdzvtest.http_get("http://127.0.0.1:%d/metrics" % port), re.M)
    check(m, "no rdzv_journal_fsync_seconds_count on /metrics")
    return int(m.group(1))


def _joins_written(journal, group):
    return sum(1 for _, _, body in records(open(journal, "rb").read())
               if json.loads(body).get("t") == "join" and json.loads(body).get("g") == group)


def case_power_cut(opts):
    """A formation is acknowledged only once durable, and costs one sync:
    rdzvd under powercut.c (every sync 1 s slow); after the 8 ranks of a
    group hold their assignments, kill -9 and cut the journal back to what
    the syncs covered; the restarted rdzvd has the group complete at the
    epoch the ranks got. A cut while half the ranks wait loses their
    unanswered joins; they send them again and the group forms one epoch."""
    if not opts.powercut:
        raise Skip("no --powercut library")
    http = rdzvtest.free_port()
    srv = Server(opts, extra=("--http", str(http)))
    log = os.path.join(srv.tmp, "powercut.log")
    try:
        _with_powercut(opts, srv, log, 0)
        counts = []
        for i in range(3):
            before = _fsyncs(http)
            rendezvous(opts, srv.endpoint, "count%d" % i, 8)
            counts.append(_fsyncs(http) - before)
        TAP.ok(max(counts) <= 2, "a formation of 8 ranks all present costs at most 2 journal "
               "syncs (rdzv_journal_fsync_seconds_count): %s" % counts)

        # 1 s per sync: a reply sent before its sync would reach its client,
        # and the 8 joins be reaped, long before the sync returned.
        _with_powercut(opts, srv, log, 1000)
        lost = []
        for i in range(4):
            group = "ack%d" % i
            got = rendezvous(opts, srv.endpoint, group, 8)
            keep, had = _cut_power(srv, log)
            srv.start()
            rc, st, err = status(opts, srv.endpoint, group)
            g = group_of(st, group) if st else None
            epochs = {a["epoch"] for a in got}
            if not g or not g.get("complete") or {g.get("epoch")} != epochs:
                lost.append("%s: the ranks got epoch %s; after the cut (%d of %d bytes kept) "
                            "rdzvd has %s" % (group, sorted(epochs), keep, had, json.dumps(g)))
        TAP.ok(not lost, "4 formations of 8, each cut off by a power cut the moment its ranks "
               "held their assignments: every one is back, complete at the epoch they got")
        for line in lost:
            TAP.note(line)

        group = "mid"
        first = [join_async(opts, srv.endpoint, group, 8, r, node="n%d" % r, timeout=40)
                 for r in range(4)]
        wait_for(lambda: _joins_written(srv.journal, group) == 4, "4 joins written", timeout=20)
        time.sleep(2.5)       # any syncs started for them (1 s each, one after another) are done
        keep, had = _cut_power(srv, log)
        TAP.ok(keep < had, "joins that wait are written, not synced: the cut dropped %d of %d "
               "bytes" % (had - keep, had))
        srv.start()
        rest = [join_async(opts, srv.endpoint, group, 8, r, node="n%d" % r, timeout=40)
                for r in range(4, 8)]
        outs = []
        for p in first + rest:
            out, err = p.communicate(timeout=60)
            outs.append((p.returncode, out, err))
        ok = [json.loads(o.strip().splitlines()[-1]) for rc, o, _ in outs if rc == 0]
        shared = {json.dumps({k: a[k] for k in ("group", "epoch", "world", "master_addr",
                                                "master_port")}) for a in ok}
        TAP.ok(len(ok) == 8 and len(shared) == 1,
               "a power cut while 4 of 8 ranks waited: all 8 finish with one assignment "
               "(%d finished, %s)" % (len(ok), sorted(shared)))
        for rc, _, err in outs:
            if rc != 0:
                TAP.note("exit %d: %s" % (rc, err.strip()[-300:]))
    finally:
        srv.close()
