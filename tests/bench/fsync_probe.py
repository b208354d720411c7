#!/usr/bin/python3
"""fdatasync latency of a journal-like file: appending records against
overwriting space written (zeros) beforehand, back to back and after an idle
gap like a release's straggler. Median and 90th percentile in µs.

    fsync_probe.py DIR [--record BYTES] [--count N] [--gap S]
    fsync_probe.py DIR --sweep [--gaps S,S,...]

--sweep asks why a sync after a gap is slower: appends after each gap of
--gaps, then after --gap with the gap spent spinning instead of sleeping,
with 4 or 16 processes spinning meanwhile, and with another file synced every
2 or 20 ms meanwhile. If only the sleeping gap were slow, the CPU's idle
states would be the cause; if the other file's syncs helped, an idle disk."""
import argparse
import multiprocessing
import os
import statistics
import time


def run(d, record, count, prealloc, gap, spin=False):
    path = os.path.join(d, "fsync-probe-%d" % os.getpid())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if prealloc:
            os.write(fd, b"\0" * (count * record + 4096))
            os.fsync(fd)
        data, off, us = b"x" * record, 0, []
        for _ in range(count):
            if spin:
                end = time.perf_counter() + gap
                while time.perf_counter() < end:
                    pass
            else:
                time.sleep(gap)
            t = time.perf_counter()
            os.pwrite(fd, data, off)
            os.fdatasync(fd)
            us.append((time.perf_counter() - t) * 1e6)
            off += record
    finally:
        os.close(fd)
        os.unlink(path)
    us.sort()
    return statistics.median(us), us[int(len(us) * 0.9)]


def spinner(stop):
    while not stop.is_set():
        pass


def syncer(stop, d, period):
    path = os.path.join(d, "fsync-probe-other-%d" % os.getpid())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while not stop.is_set():
            os.pwrite(fd, b"y" * 512, 0)
            os.fdatasync(fd)
            time.sleep(period)
    finally:
        os.close(fd)
        os.unlink(path)


def beside(target, args, n, probe):
    """probe() while n processes run target(stop, *args)."""
    stop = multiprocessing.Event()
    procs = [multiprocessing.Process(target=target, args=(stop,) + args) for _ in range(n)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    try:
        return probe()
    finally:
        stop.set()
        for p in procs:
            p.join()


def sweep(a):
    def show(what, r):
        print("%-38s append p50 %4.0f p90 %4.0f us" % (what, r[0], r[1]), flush=True)

    def after_gap():
        return run(a.dir, a.record, a.count, False, a.gap)

    for gap in (float(g) for g in a.gaps.split(",")):
        show("sleeping gap %.3f s:" % gap, run(a.dir, a.record, a.count, False, gap))
    show("spinning gap %.3f s:" % a.gap, run(a.dir, a.record, a.count, False, a.gap, True))
    for n in (4, 16):
        show("gap %.3f s, %d spinning:" % (a.gap, n), beside(spinner, (), n, after_gap))
    for period in (0.002, 0.02):
        show("gap %.3f s, other file every %.0f ms:" % (a.gap, period * 1e3),
             beside(syncer, (a.dir, period), 1, after_gap))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--record", type=int, default=18000)
    ap.add_argument("--count", type=int, default=25)
    ap.add_argument("--gap", type=float, default=0.2)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--gaps", default="0,0.001,0.005,0.02,0.05,0.2")
    a = ap.parse_args()
    if a.sweep:
        sweep(a)
        return
    for gap in (0.0, a.gap):
        for _ in range(2):
            ap50, ap90 = run(a.dir, a.record, a.count, False, gap)
            op50, op90 = run(a.dir, a.record, a.count, True, gap)
            print("gap %.2f s: append p50 %.0f p90 %.0f us, overwrite p50 %.0f p90 %.0f us"
                  % (gap, ap50, ap90, op50, op90))


if __name__ == "__main__":
    main()
