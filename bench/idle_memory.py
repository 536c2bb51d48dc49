#!/usr/bin/env python3
"""How this host treats memory that sits untouched: the time to write a byte into every page of a
buffer at once, again straight after, and again after it sat idle for each of --idle seconds.

A host that reclaims idle memory underneath the guest (a VM whose hypervisor takes back or
compresses guest pages nobody touched) shows it as a slower touch after idle with no page faults
in the guest. phos's DRAM tier holds snapshots between cold starts, and simgpu's device memory
lives in host pages: on such a host a function's first restore after its snapshot sat idle reads
slower host memory (docs/benchmarks.md, "Host memory left idle").

    bench/idle_memory.py [--mib 512] [--idle 60,300,600]
"""
import argparse
import resource
import time

PAGE = 4096


def touch(buf, size):
    """Writes one byte per page, four passes at different offsets; returns (ms, minor, major faults)."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    for offset in range(4):
        count = len(range(offset, size, PAGE))
        buf[offset::PAGE] = bytes(count)
    ms = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_SELF)
    return ms, after.ru_minflt - before.ru_minflt, after.ru_majflt - before.ru_majflt


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=512, help="buffer size in MiB")
    parser.add_argument("--idle", default="60,300,600", help="idle seconds before each later touch, comma-separated")
    args = parser.parse_args()
    idles = [int(s) for s in args.idle.split(",") if s]
    size = args.mib << 20
    buf = bytearray(size)  # allocated and zeroed: every page is present from here on
    rows = [("first touch", *touch(buf, size)), ("again at once", *touch(buf, size))]
    for row in rows:
        print("%-22s %8.1f ms  minor faults %d, major %d" % row, flush=True)
    for idle in idles:
        time.sleep(idle)
        row = ("after %d s idle" % idle, *touch(buf, size))
        print("%-22s %8.1f ms  minor faults %d, major %d" % row, flush=True)


if __name__ == "__main__":
    main()
