#!/usr/bin/python3
"""rdzv through librdzv (what users run), PyTorch's TCPStore (libuv) through
its own client library, rdzv's lean simulator and the two floors (epoll,
libzmq), side by side, alternately, in one invocation. Prints one line per
run, then medians and ratios, and a JSON summary (also to --out); --dat
writes a gnuplot table.

    compare.py --bench build/tests/bench/rdzv-bench --rdzvd build/rendezvous/rdzvd
               [--ranks 1024,4096,16384] [--repeat 3] [--processes P]
               [--group-size G] [--fsync on|off] [--window W] [--out F.json]
               [--dat F.dat] [--variant NAME="RDZVD ARGS"]...

--variant runs rdzvd once more per repetition with those arguments (say
--variant 1shard="--shards 1 --io-threads 1"), alternately with the rest, so
configurations are compared side by side in one run; the ratios are printed
against the default rdzvd ("rdzv").

Every system does the same work, connects inside the timing, from t0 (the
moment the ready clients are released) to the last rank's answer:
  librdzv:  N threads spread over P processes, each making an rdzv_client_t
            with the default options and joining one group (rdzv-bench
            --simulator librdzv, wall_seconds): the real client library
  rdzv:     N lean ZMTP clients join one group (rdzv-bench, wall_seconds):
            the server's own cost, with as little client as possible
  TCPStore: N clients (threads spread over P processes) each construct a
            TCPStore client (connect), add("join", 1); the rank that completes
            the count sets a 128-byte "id" and "release"; all wait(["release"])
            and get("id"). The server is a TCPStore master in its own process.
  floor:    N raw TCP clients, one request and one reply each, against a bare
            epoll server (rdzv-bench --floor, floor_seconds)
  zmq floor: the lean clients against a bare libzmq ROUTER server in rdzvd's
            shape (shards, I/O threads, listeners, socket options), one fixed
            reply each (rdzv-bench --no-rdzv --zmq-floor): what libzmq costs
--group-size G splits the N ranks into N/G groups of G (the cluster rollout:
vLLM's data-parallel groups): rdzv joins them all to one rdzvd (rdzv-bench
--groups N/G, the lean runs and variants too); TCPStore gets one store per
group, a master made before t0 in the client process that holds the group
(groups dealt to the processes in turn), as vLLM's rank 0 hosts its group's,
and every rank, rank 0 too, connects a client of its own inside the timing.
The TCPStore server CPU is then that of every store's server thread. The
floors still answer once every rank has asked.
Without torch, or with a torch whose TCPStore has no libuv backend
(use_libuv, torch >= 2.3), the TCPStore half is skipped with a message
saying which. Standard library only, plus torch when present."""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.abspath(__file__)


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def tasks_cpu(pid, tids=None):
    """CPU seconds of a process's live threads (those of tids, if given)."""
    cpu = 0.0
    try:
        for t in tids if tids is not None else os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/schedstat" % (pid, t)) as f:
                cpu += int(f.read().split()[0]) / 1e9
    except OSError:
        pass
    return cpu


def proc_cpu_rss(pid):
    """(cpu seconds of every live thread, RSS MiB) of a process."""
    cpu = tasks_cpu(pid)
    rss = 0.0
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return cpu, rss


# ---- TCPStore: server and client processes ----------------------------------

def tcpstore_server(args):
    raise_nofile()
    from datetime import timedelta
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=args.timeout),
                          wait_for_workers=False, use_libuv=True)
    print(store.port, flush=True)
    sys.stdin.read()          # until the harness closes our stdin
    del store


def host_stores(groups, timeout):
    """A TCPStore master per group, here (as vLLM's rank 0 hosts its group's):
    ({group: port}, the ids of the server threads they started, the stores)."""
    from datetime import timedelta
    import torch.distributed as dist
    before = set(os.listdir("/proc/self/task"))
    stores = {g: dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=timeout),
                               wait_for_workers=False, use_libuv=True) for g in groups}
    servers = sorted(set(os.listdir("/proc/self/task")) - before)
    return {g: st.port for g, st in stores.items()}, servers, stores


def tcpstore_clients(args):
    raise_nofile()
    from datetime import timedelta
    import torch.distributed as dist
    threading.stack_size(512 * 1024)
    ranks = [int(x) for x in args.rank_list.split(",")] if args.rank_list else []
    go = threading.Event()
    results = [None] * len(ranks)
    gsize = args.group_size
    world = gsize or args.world
    # One group: the harness's store. Groups: ours, up before t0 like rdzvd.
    ports, servers, hosted = ({}, [], {}) if not gsize else host_stores(
        sorted({r // gsize for r in ranks}), args.timeout)
    id_value = b"i" * 128

    def rank_main(i):
        go.wait()
        t_start = time.monotonic()
        try:
            port = ports[ranks[i] // gsize] if gsize else args.port
            s = dist.TCPStore("127.0.0.1", port, world, False,
                              timedelta(seconds=args.timeout), wait_for_workers=False,
                              use_libuv=True)
            n = s.add("join", 1)
            if n == world:
                s.set("id", id_value)
                s.set("release", b"1")
            s.wait(["release"])
            ok = s.get("id") == id_value
            results[i] = (t_start, time.monotonic(), ok)
            keep.append(s)    # stay connected until all are done, as real ranks do
        except Exception as e:  # noqa: BLE001 - reported, counted as a failure
            results[i] = (t_start, time.monotonic(), False)
            sys.stderr.write("rank %d: %s\n" % (ranks[i], e))

    keep = []
    threads = [threading.Thread(target=rank_main, args=(i,), daemon=True)
               for i in range(len(ranks))]
    for t in threads:
        t.start()
    print("ready", flush=True)
    sys.stdin.readline()      # "go"
    cpu0 = tasks_cpu(os.getpid(), servers)
    go.set()
    for t in threads:
        t.join()
    # This process's stores serve its ranks alone: they are done too.
    server_cpu = tasks_cpu(os.getpid(), servers) - cpu0
    print(json.dumps({"results": results, "server_cpu_s": server_cpu,
                      "stores": len(hosted)}), flush=True)
    sys.stdin.readline()      # "quit": only now do the connections close
    os._exit(0)


def tcpstore_ranks(n, processes, group_size):
    """Each client process's ranks: dealt in turn, or whole groups in turn."""
    if not group_size:
        return [list(range(w, n, processes)) for w in range(processes)]
    return [[r for g in range(w, n // group_size, processes)
             for r in range(g * group_size, (g + 1) * group_size)] for w in range(processes)]


def run_tcpstore(n, processes, python, timeout, group_size=0):
    """One run: the server in its own process (one group), or a store per
    group in the client processes (group_size)."""
    srv, port = None, 0
    if not group_size:
        srv = subprocess.Popen([python, HERE, "tcpstore-server", "--timeout", str(timeout)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = int(srv.stdout.readline())
    clients = []
    for ranks in tcpstore_ranks(n, processes, group_size):
        if not ranks:
            continue
        clients.append(subprocess.Popen(
            [python, HERE, "tcpstore-clients", "--port", str(port), "--world", str(n),
             "--group-size", str(group_size), "--timeout", str(timeout),
             "--rank-list", ",".join(map(str, ranks))],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for c in clients:
        if c.stdout.readline().strip() != "ready":
            raise RuntimeError("a TCPStore client process failed to start")
    cpu0, _ = proc_cpu_rss(srv.pid) if srv else (0.0, None)
    t0 = time.monotonic()
    for c in clients:
        c.stdin.write("go\n")
        c.stdin.flush()
    results, hosted_cpu, stores = [], 0.0, 0
    for c in clients:
        got = json.loads(c.stdout.readline())
        results += got["results"]
        hosted_cpu += got["server_cpu_s"]
        stores += got["stores"]
    cpu1, rss = proc_cpu_rss(srv.pid) if srv else (hosted_cpu, None)
    for c in clients:
        c.stdin.write("quit\n")
        c.stdin.flush()
        c.wait()
    if srv:
        srv.stdin.close()
        srv.wait()
    ok = [r for r in results if r and r[2]]
    ends = [r[1] for r in ok]
    lat = sorted((r[1] - r[0]) * 1e3 for r in ok)
    return {"ranks": n, "assigned": len(ok), "stores": stores if group_size else 1,
            "seconds": (max(ends) - t0) if ends else None,
            "p99_ms": lat[int(0.99 * (len(lat) - 1))] if lat else None,
            "server_cpu_s": cpu1 - cpu0, "server_rss_mib": rss}


# ---- rdzv and the floor -------------------------------------------------------

def run_rdzv(a, n, extra=(), floor=True, simulator="lean", zmq_floor=False):
    """One rdzv-bench call: rdzvd (its groups of --group-size) and the floor,
    or with zmq_floor the libzmq floor alone."""
    argv = [a.bench, "--rdzvd", a.rdzvd, "--ranks", str(n), "--processes", str(a.processes),
            "--fsync", a.fsync, "--timeout", str(a.timeout), "--simulator", simulator]
    argv += ["--groups", str(n // a.group_size)] if a.group_size else []
    argv += ["--floor"] if floor else []
    argv += ["--no-rdzv", "--zmq-floor"] if zmq_floor else []
    argv += ["--rdzvd-arg=" + x for x in extra]
    if a.window:
        argv += ["--window", str(a.window)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=a.timeout * 3 + 60)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise RuntimeError("rdzv-bench failed: %s" % p.stderr)
    return json.loads(lines[-1])


def summarize(a, sizes, runs, variants, reps_done, quiet):
    """Medians and ratios of what ran so far; writes --out and --dat."""
    out = print if not quiet else (lambda *x, **k: None)
    summary = {"processes": a.processes, "repeat": a.repeat, "repetitions_done": reps_done,
               "fsync": a.fsync, "window": a.window, "cpus": os.cpu_count(),
               "group_size": a.group_size or None, "sizes": {},
               "variants": {name: " ".join(args) for name, args in variants}}
    if a.group_size:
        out("\ngroups of %d: rdzv one rdzvd, TCPStore one store per group" % a.group_size)
    out("\n%7s %10s %10s %16s %10s %10s %10s %14s %12s %10s %12s %10s" % (
        "ranks", "librdzv s", "TCPStore s", "TCPStore/librdzv", "lean s", "floor s",
        "zmq fl s", "TCPStore/lean", "rdzvd cpu s", "zmq cpu s", "TCPStore cpu", "KiB/rank"))
    dat = ["# ranks rdzv_s tcpstore_s floor_s librdzv_s zmq_floor_s (medians%s)"
           % (", groups of %d" % a.group_size if a.group_size else "")]
    for n in sizes:
        r, t, f = med(runs[n]["rdzv"]), med(runs[n]["tcpstore"]), med(runs[n]["floor"])
        lib, z = med(runs[n]["librdzv"]), med(runs[n]["zmq"])
        s = {"librdzv_s": lib, "tcpstore_over_librdzv": (t / lib) if (t and lib) else None,
             "librdzv_server_cpu_s": med(runs[n]["librdzv_cpu"]),
             "librdzv_server_kib_per_rank": med(runs[n]["librdzv_kib"]),
             "librdzv_over_lean": (lib / r) if (lib and r) else None,
             "rdzv_s": r, "tcpstore_s": t, "floor_s": f,
             "tcpstore_over_rdzv": (t / r) if (t and r) else None,
             "rdzv_over_floor": (r / f) if (r and f) else None,
             "zmq_floor_s": z, "rdzv_over_zmq_floor": (r / z) if (r and z) else None,
             "librdzv_over_zmq_floor": (lib / z) if (lib and z) else None,
             "zmq_floor_server_cpu_s": med(runs[n]["zmq_cpu"]),
             "zmq_floor_server_kib_per_rank": med(runs[n]["zmq_kib"]),
             "rdzv_release_p99_ms": med(runs[n]["release_p99"]),
             "rdzv_server_cpu_s": med(runs[n]["rdzv_cpu"]),
             "tcpstore_server_cpu_s": med(runs[n]["tcpstore_cpu"]),
             "tcpstore_stores": med(runs[n]["tcpstore_stores"]),
             "rdzv_server_rss_mib": med(runs[n]["rdzv_rss"]),
             "tcpstore_server_rss_mib": med(runs[n]["tcpstore_rss"]),
             "runs": runs[n]}
        for name, _ in variants:
            vs = runs[n]["variants"][name]
            vmed = med([x["seconds"] for x in vs])
            s[name] = {"s": vmed, "release_p99_ms": med([x["release_p99_ms"] for x in vs]),
                       "server_cpu_s": med([x["cpu_s"] for x in vs]),
                       "over_rdzv": (vmed / r) if (vmed and r) else None,
                       "tcpstore_over": (t / vmed) if (t and vmed) else None}
        summary["sizes"][str(n)] = s
        fmt = lambda x, p="%.3f": (p % x) if x is not None else "-"  # noqa: E731
        out("%7d %10s %10s %16s %10s %10s %10s %14s %12s %10s %12s %10s" % (
            n, fmt(lib), fmt(t), fmt(s["tcpstore_over_librdzv"], "%.2fx"), fmt(r), fmt(f),
            fmt(z), fmt(s["tcpstore_over_rdzv"], "%.2fx"), fmt(s["librdzv_server_cpu_s"], "%.2f"),
            fmt(s["zmq_floor_server_cpu_s"], "%.2f"), fmt(s["tcpstore_server_cpu_s"], "%.2f"),
            fmt(s["librdzv_server_kib_per_rank"], "%.1f")))
        for name, _ in variants:
            v = s[name]
            out("%7s %-10s %.3f s, %s of rdzv's time, TCPStore/%s %s, release p99 %s ms"
                % ("", name, v["s"] or -1, fmt(v["over_rdzv"], "%.2fx"), name,
                   fmt(v["tcpstore_over"], "%.2fx"), fmt(v["release_p99_ms"], "%.1f")))
        dat.append(" ".join([str(n)] + [str(x) if x else "NaN" for x in (r, t, f, lib, z)]))
    if not quiet:
        print(json.dumps(summary))
    if a.out:
        with open(a.out, "w") as fo:
            json.dump(summary, fo, indent=1)
    if a.dat:
        with open(a.dat, "w") as fo:
            fo.write("\n".join(dat) + "\n")


def tcpstore_missing(python):
    """Why python cannot run the TCPStore half, or None: it needs torch with
    the libuv store (use_libuv, torch >= 2.3), what torchrun and vLLM use."""
    probe = ("import datetime, torch.distributed as d\n"
             "d.TCPStore('127.0.0.1', 0, None, True, datetime.timedelta(seconds=5),\n"
             "           wait_for_workers=False, use_libuv=True)\n")
    p = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    if p.returncode == 0:
        return None
    last = (p.stderr.strip().splitlines() or ["?"])[-1]
    if "ModuleNotFoundError" in last:
        return "no torch in %s" % python
    return "%s has no libuv TCPStore (%s)" % (python, last[:120])


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("tcpstore-server", "tcpstore-clients"):
        ap = argparse.ArgumentParser()
        ap.add_argument("role")
        ap.add_argument("--port", type=int, default=0)
        ap.add_argument("--world", type=int, default=0)
        ap.add_argument("--timeout", type=int, default=120)
        ap.add_argument("--rank-list", default="")
        ap.add_argument("--group-size", type=int, default=0)
        a = ap.parse_args()
        return tcpstore_server(a) if a.role == "tcpstore-server" else tcpstore_clients(a)
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--ranks", default="1024,4096")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--processes", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--fsync", default="on", choices=["on", "off"])
    ap.add_argument("--window", type=int, default=0)
    ap.add_argument("--group-size", type=int, default=0, metavar="G",
                    help="N/G groups of G ranks; TCPStore: a store per group (default: "
                         "one group of N)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per bench call")
    ap.add_argument("--python", default=sys.executable, help="a python with torch")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--dat")
    ap.add_argument("--variant", action="append", default=[], metavar='NAME="ARGS"')
    a = ap.parse_args()
    variants = []
    for v in a.variant:
        name, sep, args = v.partition("=")
        if not sep or not name or name in ("rdzv", "tcpstore", "floor", "librdzv", "zmq"):
            ap.error("--variant wants NAME=\"RDZVD ARGS\", not %r" % v)
        variants.append((name, args.split()))
    raise_nofile()
    missing = "--skip-torch" if a.skip_torch else tcpstore_missing(a.python)
    torch_ok = missing is None
    if not torch_ok:
        print("# TCPStore: skipped (%s)" % missing, flush=True)
    sizes = [int(x) for x in a.ranks.split(",")]
    if a.group_size < 0 or any(a.group_size and n % a.group_size for n in sizes):
        ap.error("--group-size must divide every --ranks size")
    runs = {n: {"librdzv": [], "librdzv_cpu": [], "librdzv_kib": [],
                "rdzv": [], "floor": [], "tcpstore": [], "rdzv_cpu": [], "tcpstore_cpu": [],
                "rdzv_rss": [], "tcpstore_rss": [], "release_p99": [],
                "zmq": [], "zmq_cpu": [], "zmq_kib": [], "tcpstore_stores": [],
                "variants": {name: [] for name, _ in variants}} for n in sizes}
    for rep in range(a.repeat):
        for n in sizes:
            # Alternate the order so that neither side always runs warm.
            order = ["librdzv", "tcpstore", "rdzv", "zmq"] + [name for name, _ in variants]
            if rep % 2:
                order.reverse()
            for what in order:
                if what in runs[n]["variants"]:
                    r = run_rdzv(a, n, dict(variants)[what], floor=False)
                    ok = r.get("ok") and r.get("assigned") == n
                    runs[n]["variants"][what].append({
                        "seconds": r["wall_seconds"] if ok else None,
                        "release_p99_ms": r["release_p99_ms"], "cpu_s": r["server_cpu_s"]})
                    print("rep %d N=%d %s %.3f s (release p99 %.1f ms, cpu %.2f s)%s"
                          % (rep, n, what, r["wall_seconds"], r["release_p99_ms"],
                             r["server_cpu_s"], "" if ok else "  FAILED"), flush=True)
                elif what == "librdzv":
                    r = run_rdzv(a, n, floor=False, simulator="librdzv")
                    ok = r.get("ok") and r.get("assigned") == n
                    runs[n]["librdzv"].append(r["wall_seconds"] if ok else None)
                    runs[n]["librdzv_cpu"].append(r["server_cpu_s"])
                    runs[n]["librdzv_kib"].append(r["server_kib_per_rank"])
                    print("rep %d N=%d librdzv %.3f s%s (p99 %.1f ms, rdzvd cpu %.2f s, "
                          "%.1f KiB/rank)" % (rep, n, r["wall_seconds"],
                                              "" if ok else " FAILED %s/%d" % (r.get("assigned"), n),
                                              r["p99_ms"], r["server_cpu_s"],
                                              r["server_kib_per_rank"]), flush=True)
                elif what == "zmq":
                    r = run_rdzv(a, n, floor=False, zmq_floor=True)
                    ok = r.get("ok") and r.get("zmq_assigned") == n
                    runs[n]["zmq"].append(r["zmq_seconds"] if ok else None)
                    runs[n]["zmq_cpu"].append(r["zmq_server_cpu_s"])
                    runs[n]["zmq_kib"].append(r["zmq_server_kib_per_rank"])
                    print("rep %d N=%d zmq floor %.3f s%s (cpu %.2f s, %.1f KiB/rank, "
                          "%d shards, %d io threads)"
                          % (rep, n, r["zmq_seconds"],
                             "" if ok else " FAILED %s/%d" % (r.get("zmq_assigned"), n),
                             r["zmq_server_cpu_s"], r["zmq_server_kib_per_rank"],
                             r["zmq_shards"], r["zmq_io_threads"]), flush=True)
                elif what == "rdzv":
                    r = run_rdzv(a, n)
                    # rdzvd and the floor run in one bench call; either may miss ranks.
                    ok = r.get("assigned") == n
                    floor_ok = r.get("floor_assigned") == n
                    runs[n]["rdzv"].append(r["wall_seconds"] if ok else None)
                    runs[n]["floor"].append(r["floor_seconds"] if floor_ok else None)
                    runs[n]["rdzv_cpu"].append(r["server_cpu_s"])
                    runs[n]["rdzv_rss"].append(r["server_rss_mib"])
                    runs[n]["release_p99"].append(r["release_p99_ms"])
                    print("rep %d N=%d rdzv %.3f s%s (release p99 %.1f ms, cpu %.2f s, rss %.0f MiB)"
                          "  floor %.3f s%s" % (rep, n, r["wall_seconds"],
                                                "" if ok else " FAILED %s/%d" % (r.get("assigned"), n),
                                                r["release_p99_ms"], r["server_cpu_s"],
                                                r["server_rss_mib"], r["floor_seconds"],
                                                "" if floor_ok else " FAILED %s/%d"
                                                % (r.get("floor_assigned"), n)),
                          flush=True)
                elif torch_ok:
                    try:
                        t = run_tcpstore(n, a.processes, a.python, a.timeout, a.group_size)
                    except Exception as e:  # noqa: BLE001 - one failed run, reported
                        print("rep %d N=%d TCPStore FAILED: %s" % (rep, n, e), flush=True)
                        runs[n]["tcpstore"].append(None)
                        continue
                    ok = t["assigned"] == n
                    runs[n]["tcpstore"].append(t["seconds"] if ok else None)
                    runs[n]["tcpstore_cpu"].append(t["server_cpu_s"])
                    runs[n]["tcpstore_rss"].append(t["server_rss_mib"])
                    runs[n]["tcpstore_stores"].append(t["stores"])
                    where = ("rss %.0f MiB" % t["server_rss_mib"] if t["server_rss_mib"]
                             else "%d stores" % t["stores"])
                    print("rep %d N=%d TCPStore %.3f s (cpu %.2f s, %s)%s"
                          % (rep, n, t["seconds"] or -1, t["server_cpu_s"], where,
                             "" if ok else "  FAILED %d/%d" % (t["assigned"], n)), flush=True)
        # A run cut short (a device lease's time) still leaves its data.
        summarize(a, sizes, runs, variants, rep + 1, quiet=True)
    summarize(a, sizes, runs, variants, a.repeat, quiet=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
