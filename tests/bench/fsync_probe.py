#!/usr/bin/python3
"""fdatasync latency of a journal-like file: appending records against
overwriting space written (zeros) beforehand, back to back and after an idle
gap like a release's straggler. Median and 90th percentile in µs.

    fsync_probe.py DIR [--record BYTES] [--count N] [--gap S]"""
import argparse
import os
import statistics
import time


def run(d, record, count, prealloc, gap):
    path = os.path.join(d, "fsync-probe-%d" % os.getpid())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        if prealloc:
            os.write(fd, b"\0" * (count * record + 4096))
            os.fsync(fd)
        data, off, us = b"x" * record, 0, []
        for _ in range(count):
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


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--record", type=int, default=18000)
    ap.add_argument("--count", type=int, default=25)
    ap.add_argument("--gap", type=float, default=0.2)
    a = ap.parse_args()
    for gap in (0.0, a.gap):
        for _ in range(2):
            ap50, ap90 = run(a.dir, a.record, a.count, False, gap)
            op50, op90 = run(a.dir, a.record, a.count, True, gap)
            print("gap %.2f s: append p50 %.0f p90 %.0f us, overwrite p50 %.0f p90 %.0f us"
                  % (gap, ap50, ap90, op50, op90))


if __name__ == "__main__":
    main()
