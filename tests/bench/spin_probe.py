#!/usr/bin/python3
"""Looks for a slow formation under a connection burst, and for what rdzvd
spends its CPU on when one happens: runs rdzv-bench N times (each run a
floor run and then rdzvd's, as `--floor` does, or rdzvd's alone), and
samples every thread of rdzvd twice a second (CPU time, the system call it
sits in, wchan) and the TCP states on loopback.

    spin_probe.py --bench ./rdzv-bench.sh --rdzvd ./rdzvd.sh --ranks 16384 \\
        --processes 8 --runs 9 --out DIR

Writes DIR/runs.jsonl (one rdzv-bench result a line, with the run's
samples of the busiest threads when it took over --slow seconds)."""
import argparse
import glob
import json
import os
import subprocess
import threading
import time

TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
              "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
              "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def rdzvd_pids():
    pids = []
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(d + "/comm") as f:
                if f.read().strip() == "rdzvd":
                    pids.append(int(os.path.basename(d)))
        except OSError:
            pass
    return pids


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def threads(pid):
    out = {}
    for t in glob.glob("/proc/%d/task/*" % pid):
        stat = read(t + "/stat")
        if not stat:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[os.path.basename(t)] = {
            "comm": read(t + "/comm").strip(),
            "cpu": (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"),
            "syscall": read(t + "/syscall").split(" ")[0].strip(),
            "wchan": read(t + "/wchan").strip(),
        }
    return out


def tcp_states():
    counts = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in read(path).splitlines()[1:]:
            st = TCP_STATES.get(line.split()[3], "?")
            counts[st] = counts.get(st, 0) + 1
    return counts


def backtraces(pid, path):
    """Every thread's stack, by a debugger attached for a moment (gdb, or
    the cuda-gdb of a GPU machine, which debugs CPU programs too)."""
    gdb = next((g for g in ("gdb", "cuda-gdb") if subprocess.run(
        ["sh", "-c", "command -v " + g], capture_output=True).returncode == 0), None)
    if not gdb:
        return
    p = subprocess.run([gdb, "-p", str(pid), "-batch", "-ex", "thread apply all bt 30"],
                       capture_output=True, text=True, timeout=60)
    with open(path, "a") as f:
        f.write(p.stdout + p.stderr + "\n----\n")


def sampler(samples, stop, dump_dir=None, dumps=None):
    t0 = time.monotonic()
    base = {}
    while not stop.wait(0.5):
        for pid in rdzvd_pids():
            th = threads(pid)
            samples.append({"t": round(time.monotonic() - t0, 2), "pid": pid,
                            "threads": th, "tcp": tcp_states()})
            for tid, t in th.items():
                base.setdefault(tid, t["cpu"])
            hot = any(t["cpu"] - base[tid] > 4 for tid, t in th.items())
            if hot and dump_dir and dumps is not None and len(dumps) < 3:
                path = os.path.join(dump_dir, "backtraces-%d.txt" % pid)
                backtraces(pid, path)
                dumps.append(path)


def role(pid, tid, comm):
    """Shard 0 is rdzvd's main thread; libzmq names its own (ZMQbg/...)."""
    return "shard 0 (main)" if tid == str(pid) else comm


def busiest(samples, top=4):
    """The threads that used the most CPU over the run, with their samples."""
    first, last = {}, {}
    for s in samples:
        for tid, t in s["threads"].items():
            first.setdefault(tid, t)
            last[tid] = t
    used = sorted(((last[t]["cpu"] - first[t]["cpu"], t) for t in last), reverse=True)[:top]
    keep = {t for _, t in used}
    pid = samples[-1]["pid"] if samples else 0
    return [{"tid": t, "comm": role(pid, t, last[t]["comm"]), "cpu_s": round(c, 2),
             "samples": [(s["t"], s["threads"][t]["cpu"], s["threads"][t]["syscall"],
                          s["threads"][t]["wchan"]) for s in samples if t in s["threads"]]}
            for c, t in used if t in keep]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--rdzvd", required=True)
    ap.add_argument("--ranks", type=int, default=16384)
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--slow", type=float, default=5.0)
    ap.add_argument("--timeout", type=int, default=60)
    ap.add_argument("--out", required=True)
    ap.add_argument("--always-floor", action="store_true", help="every run with --floor")
    ap.add_argument("--deadline", type=float, default=0,
                    help="start no run after this many seconds (0: no limit)")
    opts = ap.parse_args()
    start = time.monotonic()
    os.makedirs(opts.out, exist_ok=True)
    with open(os.path.join(opts.out, "runs.jsonl"), "w") as log:
        for i in range(opts.runs):
            if opts.deadline and time.monotonic() - start > opts.deadline:
                print("deadline: %d of %d runs" % (i, opts.runs), flush=True)
                break
            floor = opts.always_floor or i % 3 != 2   # two of three runs follow a floor run
            samples, stop, dumps = [], threading.Event(), []
            th = threading.Thread(target=sampler, args=(samples, stop, opts.out, dumps),
                                  daemon=True)
            th.start()
            argv = [opts.bench, "--rdzvd", opts.rdzvd, "--ranks", str(opts.ranks), "--processes",
                    str(opts.processes), "--timeout", str(opts.timeout)]
            p = subprocess.run(argv + (["--floor"] if floor else []), capture_output=True,
                               text=True, timeout=opts.timeout * 3)
            stop.set()
            th.join()
            lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
            result = json.loads(lines[-1]) if lines else {"error": p.stderr[-400:]}
            result["run"], result["after_floor"] = i, floor
            # Every run: what rdzvd's threads burnt from start to stop, the
            # few seconds after the release included (a check the tick
            # runs after the replies is paid there, unseen in "seconds").
            result["top"] = [(b["comm"], b["cpu_s"]) for b in busiest(samples, 3)]
            if result.get("seconds", opts.slow + 1) > opts.slow:
                result["busiest"] = busiest(samples)
                result["tcp_peak"] = max((s["tcp"] for s in samples),
                                         key=lambda c: c.get("SYN_RECV", 0), default={})
            log.write(json.dumps(result) + "\n")
            log.flush()
            print("run %d floor=%s seconds=%s server_cpu_s=%s top=%s" % (
                i, floor, result.get("seconds"), result.get("server_cpu_s"), result["top"]),
                flush=True)


if __name__ == "__main__":
    main()
