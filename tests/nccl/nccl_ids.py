#!/usr/bin/python3
"""NCCL unique IDs end to end, without a GPU: a real rdzvd (with its
rdzv-nccl-root helper), the rdzv CLI (librdzv) and the LD_PRELOAD shim.

Usage: nccl_ids.py CASE --rdzvd P --helper P --rdzv P --nccl-lib P
                        [--shim P --getid P]
Cases:
  server_ids     rdzvd-made IDs: the same list on every rank, N distinct IDs,
                 each decodable; RDZV_NCCL_UNIQUE_IDS in the env output
  rank_restart   a rank that comes back (new session) moves the group to a
                 new epoch with new IDs
  rank0_blocks   --nccl-id rank0: rank 1 waits until rank 0 joins with the
                 IDs it made; both get them; the root is rank 0's
  rank0_timeout  rank 0 never comes: rank 1's join times out cleanly (exit 3)
                 and rdzvd serves on
  decode         `rdzv nccl-id decode` on a hand-made ID, and bad input
  shim           RDZV_SHIM_NCCL=1: rank 0's n-th ncclGetUniqueId returns the
                 n-th ID of RDZV_NCCL_UNIQUE_IDS, then real NCCL; other ranks
                 and the setting off go to NCCL
  root_teardown  --nccl-root-timeout 2: a root whose ranks never arrive is
                 retired, its helper process is gone, and the group keeps
                 its epoch (status "retired"), also across a restart
  no_leaks       200 epochs (world-1 group, a new session each join): rdzvd's
                 threads and fds do not grow, and at most one helper lives
One line for the case and exit 0 pass, 1 fail, 77 skip (rdzvtest).
"""

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import rdzvtest
from rdzvtest import Fail, check

ID_HEX = 256


class Rdzvd(rdzvtest.Rdzvd):
    """A fresh rdzvd on a loopback port of its own, with the NCCL helper."""

    def __init__(self, args, work, *extra):
        super().__init__(args.rdzvd, work, "--nccl-helper", args.helper, "--no-fsync", *extra)

    def helpers(self):
        """pids of rdzv-nccl-root processes that are rdzvd's children."""
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid == self.proc.pid and b"rdzv-nccl-root" in cmd:
                out.append(int(pid))
        return out

    def counts(self):
        pid = self.proc.pid
        return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def env_for(args, **extra):
    env = dict(os.environ)
    for k in ("RDZV_NCCL_ID", "RDZV_NCCL_IDS", "RDZV_SERVER", "RDZV_GROUP", "RDZV_WORLD",
              "RDZV_RANK", "LD_PRELOAD", "RDZV_SHIM_NCCL"):
        env.pop(k, None)
    env["RDZV_NCCL_LIBRARY"] = args.nccl_lib
    env.update(extra)
    return env


def join_cmd(args, d, group, world, rank, *extra):
    return [args.rdzv, "join", "--server", d.endpoint, "--group", group, "--world", str(world),
            "--rank", str(rank), *extra]


def join(args, d, group, world, rank, *extra, timeout=30):
    r = subprocess.run(join_cmd(args, d, group, world, rank, *extra), env=env_for(args),
                       capture_output=True, text=True, timeout=timeout)
    check(r.returncode == 0, f"join {group} rank {rank}: exit {r.returncode}: {r.stderr}")
    return json.loads(r.stdout)


def join_all(args, d, group, world, *extra):
    procs = [subprocess.Popen(join_cmd(args, d, group, world, r, *extra), env=env_for(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    out = []
    for r, p in enumerate(procs):
        so, se = p.communicate(timeout=30)
        check(p.returncode == 0, f"join {group} rank {r}: exit {p.returncode}: {se}")
        out.append(json.loads(so))
    return out


def decode(args, hexid):
    r = subprocess.run([args.rdzv, "nccl-id", "decode", hexid], capture_output=True,
                       text=True, timeout=10)
    fields = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    return r.returncode, fields, r.stdout


def ids_of(asg):
    ids = asg.get("nccl_unique_ids")
    check(isinstance(ids, list), f"no nccl_unique_ids list in {asg}")
    check(not ids or asg.get("nccl_unique_id") == ids[0], "nccl_unique_id is not the first ID")
    return ids


def case_server_ids(args, work):
    d = Rdzvd(args, work)
    try:
        a = join_all(args, d, "srv", 2, "--nccl-id", "server", "--nccl-ids", "3")
        ids = ids_of(a[0])
        check(len(ids) == 3, f"want 3 IDs, got {len(ids)}")
        check(len(set(ids)) == 3, "the 3 IDs are not distinct")
        check(ids_of(a[1]) == ids, "the ranks got different IDs")
        for i in ids:
            check(len(i) == ID_HEX, "an ID is not 256 hex characters")
            rc, f, text = decode(args, i)
            check(rc == 0 and f.get("family") in ("inet", "inet6"), f"undecodable ID: {text}")
            check(0 < int(f["port"]) < 65536, f"bad port: {text}")
        # the env output carries all of them, and the first alone
        r = subprocess.run(join_cmd(args, d, "srv-env", 1, 0, "--nccl-ids", "2",
                                    "--format", "env"),
                           env=env_for(args), capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"env join: {r.stderr}")
        env = dict(line.split("=", 1) for line in r.stdout.splitlines())
        listed = env.get("RDZV_NCCL_UNIQUE_IDS", "").split(",")
        check(len(listed) == 2 and all(len(x) == ID_HEX for x in listed),
              f"RDZV_NCCL_UNIQUE_IDS: {env.get('RDZV_NCCL_UNIQUE_IDS')!r}")
        check(env.get("RDZV_NCCL_UNIQUE_ID") == listed[0], "RDZV_NCCL_UNIQUE_ID is not the first")
        # none: no IDs, empty variables
        a = join_all(args, d, "srv-none", 1, "--nccl-id", "none")
        check(a[0]["nccl_unique_id"] is None and ids_of(a[0]) == [], "nccl_id none gave IDs")
    finally:
        d.stop()


def case_rank_restart(args, work):
    d = Rdzvd(args, work)
    try:
        first = join_all(args, d, "rs", 2, "--nccl-ids", "2")
        check(first[0]["epoch"] == first[1]["epoch"], "ranks in different epochs")
        # each join is a new process, so a new session: the group moves on
        second = join_all(args, d, "rs", 2, "--nccl-ids", "2")
        check(second[0]["epoch"] > first[0]["epoch"], "no new epoch after the ranks came back")
        check(ids_of(second[0]) == ids_of(second[1]), "the ranks got different IDs")
        check(not set(ids_of(second[0])) & set(ids_of(first[0])),
              "an ID of the old epoch was handed out again")
    finally:
        d.stop()


def case_rank0_blocks(args, work):
    d = Rdzvd(args, work)
    try:
        t0 = time.time()
        r1 = subprocess.Popen(join_cmd(args, d, "r0", 2, 1, "--nccl-id", "rank0",
                                       "--nccl-ids", "2", "--timeout", "20"),
                              env=env_for(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        check(r1.poll() is None, "rank 1 was answered before rank 0 joined")
        # rank 0 runs a command so that its process (and the roots in it)
        # outlives the join: the root must accept a connection meanwhile.
        probe = ("import json,os,socket,sys;"
                 "sys.stdout.write(os.environ['RDZV_NCCL_UNIQUE_IDS'])")
        r0 = subprocess.run(join_cmd(args, d, "r0", 2, 0, "--nccl-id", "rank0",
                                     "--nccl-ids", "2", "--format", "env", "--",
                                     sys.executable, "-c", probe),
                            env=env_for(args), capture_output=True, text=True, timeout=30)
        check(r0.returncode == 0, f"rank 0: exit {r0.returncode}: {r0.stderr}")
        so, se = r1.communicate(timeout=30)
        check(r1.returncode == 0, f"rank 1: exit {r1.returncode}: {se}")
        check(time.time() - t0 >= 1.5, "rank 1 did not wait")
        a1 = json.loads(so)
        ids0 = r0.stdout.strip().split(",")
        check(ids_of(a1) == ids0, "rank 1 did not get rank 0's IDs")
        check(len(ids0) == 2 and len(set(ids0)) == 2, f"want 2 distinct IDs: {ids0}")
        for i in ids0:
            rc, f, text = decode(args, i)
            check(rc == 0, f"undecodable rank-0 ID: {text}")
        st = subprocess.run([args.rdzv, "status", "--json", "--server", d.endpoint, "--group", "r0"],
                            capture_output=True, text=True, timeout=10)
        check('"rank0"' in st.stdout, f"status does not show rank0 mode: {st.stdout}")
        # a rank 0 that cannot load NCCL says so and does not join
        bad = subprocess.run(join_cmd(args, d, "r0-bad", 1, 0, "--nccl-id", "rank0"),
                             env=env_for(args, RDZV_NCCL_LIBRARY="/nonexistent/libnccl.so.2"),
                             capture_output=True, text=True, timeout=30)
        check(bad.returncode != 0 and "libnccl" in bad.stderr,
              f"no NCCL: exit {bad.returncode}: {bad.stderr}")
    finally:
        d.stop()


def case_rank0_timeout(args, work):
    d = Rdzvd(args, work)
    try:
        t0 = time.time()
        r = subprocess.run(join_cmd(args, d, "r0t", 2, 1, "--nccl-id", "rank0", "--timeout", "2"),
                           env=env_for(args), capture_output=True, text=True, timeout=30)
        took = time.time() - t0
        check(r.returncode == 3, f"want exit 3 (timeout), got {r.returncode}: {r.stderr}")
        check(1.5 <= took < 8, f"the timeout took {took:.1f} s")
        st = subprocess.run([args.rdzv, "status", "--json", "--server", d.endpoint],
                            capture_output=True, text=True, timeout=10)
        check(st.returncode == 0, "rdzvd stopped answering after the timeout")
        groups = json.loads(st.stdout)
        groups = groups.get("groups", groups) if isinstance(groups, dict) else groups
        g = [x for x in groups if x.get("group") == "r0t"]
        check(g and not g[0].get("complete") and g[0].get("nccl_mode") == "rank0",
              f"status after the timeout: {st.stdout}")
    finally:
        d.stop()


def case_decode(args, work):
    raw = bytearray(128)
    raw[0:8] = struct.pack("<Q", 0x0123456789ABCDEF)
    raw[8:10] = struct.pack("=H", socket.AF_INET)
    raw[10:12] = struct.pack(">H", 29400)
    raw[12:16] = socket.inet_aton("10.77.0.1")
    r = subprocess.run([args.rdzv, "nccl-id", "decode", raw.hex()], capture_output=True,
                       text=True, timeout=10)
    want = ("magic 0x0123456789abcdef\nfamily inet\naddress 10.77.0.1\nport 29400\n"
            "layout 2.21-2.28\n")
    check(r.returncode == 0 and r.stdout == want, f"decode: {r.returncode} {r.stdout!r}")
    r2 = subprocess.run([args.rdzv, "nccl-id", "decode", "-"], input=raw.hex().upper() + "\n",
                        capture_output=True, text=True, timeout=10)
    check(r2.returncode == 0 and r2.stdout == want, f"decode from stdin: {r2.stdout!r}")
    raw6 = bytearray(128)
    raw6[0:8] = raw[0:8]
    raw6[8:10] = struct.pack("=H", socket.AF_INET6)
    raw6[10:12] = struct.pack(">H", 1234)
    raw6[16:32] = socket.inet_pton(socket.AF_INET6, "fd00::7")
    rc, f, text = decode(args, raw6.hex())
    check(rc == 0 and f.get("family") == "inet6" and f.get("address") == "fd00::7"
          and f.get("port") == "1234", f"IPv6 decode: {text}")
    for bad in ("abc", "zz" * 128, "00" * 128):
        r = subprocess.run([args.rdzv, "nccl-id", "decode", bad], capture_output=True,
                           text=True, timeout=10)
        check(r.returncode in (1, 2), f"decode {bad[:8]}...: exit {r.returncode}")
    r = subprocess.run([args.rdzv, "nccl-id", "decode", "00" * 128], capture_output=True,
                       text=True, timeout=10)
    check(r.returncode == 1 and "problem" in r.stdout, f"all-zero ID: {r.stdout!r}")
    r = subprocess.run([args.rdzv, "nccl-id", "frobnicate"], capture_output=True, text=True)
    check(r.returncode == 2, "unknown subcommand accepted")


def case_shim(args, work):
    check(args.shim and args.getid, "--shim and --getid are needed")
    a = os.urandom(128).hex()
    b = os.urandom(128).hex()

    def run(count, **env):
        e = env_for(args, LD_PRELOAD=args.shim, **env)
        r = subprocess.run([args.getid, str(count)], env=e, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0, f"getid: exit {r.returncode}: {r.stderr}")
        return r.stdout.split("\n")[:count], r.stderr

    got, _ = run(3, RDZV_SHIM_NCCL="1", RDZV_RANK="0", RDZV_NCCL_UNIQUE_IDS=f"{a},{b}")
    check(got[0] == a and got[1] == b, f"rank 0 did not get the env IDs in order: {got[:2]}")
    check(got[2] not in (a, b) and len(got[2]) == ID_HEX, f"third call: {got[2][:16]}")
    check(decode(args, got[2])[0] == 0, "the third call was not real NCCL's")
    got, _ = run(1, RDZV_SHIM_NCCL="1", RDZV_RANK="0", RDZV_NCCL_UNIQUE_ID=a)
    check(got[0] == a, "RDZV_NCCL_UNIQUE_ID alone was not used")
    for env in ({"RDZV_SHIM_NCCL": "1", "RDZV_RANK": "1"},
                {"RDZV_RANK": "0"},
                {"RDZV_SHIM_NCCL": "0", "RDZV_RANK": "0"}):
        got, _ = run(1, RDZV_NCCL_UNIQUE_IDS=f"{a},{b}", **env)
        check(got[0] not in (a, b) and decode(args, got[0])[0] == 0,
              f"{env}: the shim answered instead of NCCL")
    got, err = run(1, RDZV_SHIM_NCCL="1", RDZV_RANK="0", RDZV_NCCL_UNIQUE_IDS="xyz")
    check(got[0] == "error 4", f"malformed list: {got[0]!r}")
    got, err = run(2, RDZV_SHIM_NCCL="1", RDZV_SHIM_NCCL_VERBOSE="1", RDZV_RANK="0",
                   RDZV_NCCL_UNIQUE_IDS=a)
    check(got[0] == a and "call 1: the epoch's ID" in err and "call 2: real NCCL" in err,
          f"verbose: {err!r}")


def case_root_teardown(args, work):
    """A root no rank reaches (an engine that makes its own IDs): after
    --nccl-root-timeout its helper is gone and status says "retired", but
    the group keeps its epoch, also across a restart."""
    d = Rdzvd(args, work, "--nccl-root-timeout", "2")
    try:
        a = join_all(args, d, "td", 2)
        epoch = a[0]["epoch"]
        check(len(ids_of(a[0])) == 1, "no ID")
        helpers = d.helpers()
        check(len(helpers) == 1, f"want one helper after the assignment, got {helpers}")

        def group():
            st = subprocess.run([args.rdzv, "status", "--json", "--server", d.endpoint, "--group", "td"],
                                capture_output=True, text=True, timeout=10)
            groups = json.loads(st.stdout)
            groups = groups.get("groups", groups) if isinstance(groups, dict) else groups
            return groups[0] if groups else {}
        deadline = time.time() + 10
        while time.time() < deadline and group().get("nccl_root") != "retired":
            time.sleep(0.2)
        g = group()
        check(g.get("nccl_root") == "retired" and not d.helpers(),
              f"after 10 s: helpers {d.helpers()}, status {g}")
        check(not os.path.exists(f"/proc/{helpers[0]}"), "the helper was not reaped")
        time.sleep(2.5)                  # another timeout's worth: nothing moves
        check(group()["epoch"] == epoch, f"the group moved to epoch {group()['epoch']}")
        check("nccl root was retired" in open(d.log_path).read(),
              "rdzvd did not log the retirement")
        d.restart()
        g = group()
        check(g["epoch"] == epoch and g.get("nccl_root") == "retired",
              f"after a restart: {g}")
    finally:
        d.stop()


def case_no_leaks(args, work):
    d = Rdzvd(args, work)
    try:
        def epochs(n, start):
            last = None
            for i in range(n):
                a = join(args, d, "leak", 1, 0)
                check(len(ids_of(a)) == 1, f"epoch {a['epoch']}: no ID")
                if last is not None:
                    check(a["epoch"] == last + 1, f"epoch {a['epoch']} after {last}")
                last = a["epoch"]
            return last

        last = epochs(10, 1)
        time.sleep(0.3)
        threads0, fds0 = d.counts()
        t0 = time.time()
        last = epochs(200, last)
        took = time.time() - t0
        time.sleep(0.5)
        threads1, fds1 = d.counts()
        helpers = d.helpers()
        rdzvtest.note(f"200 epochs in {took:.1f} s; threads {threads0} -> {threads1}, "
              f"fds {fds0} -> {fds1}, helpers alive {len(helpers)}")
        check(last >= 210, f"only {last} epochs")
        check(threads1 <= threads0, f"threads grew: {threads0} -> {threads1}")
        check(fds1 <= fds0 + 2, f"fds grew: {fds0} -> {fds1}")
        check(len(helpers) <= 1, f"{len(helpers)} helpers alive")
    finally:
        d.stop()


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def run_case(args, work):
    """The case in work; a failure says the tail of rdzvd's log too."""
    try:
        CASES[args.case](args, work)
    except Fail as e:
        log = os.path.join(work, "rdzvd.log")
        if os.path.exists(log):
            e.args = (f"{e}\n--- rdzvd.log (tail)\n" + "".join(open(log).readlines()[-20:]),)
        raise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rdzvd", required=True)
    p.add_argument("--helper", required=True)
    p.add_argument("--rdzv", required=True)
    p.add_argument("--nccl-lib", required=True)
    p.add_argument("--shim", default="")
    p.add_argument("--getid", default="")
    args = rdzvtest.choose(sorted(CASES), p)
    if args is None:
        return 0
    work = tempfile.mkdtemp(prefix="rdzv-nccl-")
    try:
        return rdzvtest.run([(args.case, lambda: run_case(args, work))])
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
