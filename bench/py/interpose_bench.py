"""interpose_bench: a plain user of NIXL's Python API that times its own
registrations, so nixl-bench's `interposer` section can run it bare and
under `nixl-agent instrument --` and compare. No nixl-agent code is in it.

Run (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs; the wheel's
package importable, e.g. PYTHONPATH=$NIXL_LIB_DIR/..):
    NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins python interpose_bench.py reg N REPS

reg N REPS: agent "A" (UCX, no progress thread); one numpy buffer of N x
4 KiB, described as N (address, 4096, 0, "") tuples, "DRAM". cold_ns: the
first register_memory of the process; then REPS warm deregister_memory +
register_memory pairs: reg_ns[] and dereg_ns[]. One JSON line on stdout,
nanoseconds. Exit 2 on usage.

loop THREADS N: the data path's loop a serving process runs, from THREADS
threads at once (scripts/bench-threads.sh pairs it bare and under the
interposer): each thread has agents "A<i>" (UCX, no progress thread) and
"B<i>" (with one, so the WRITEs land), B's metadata loaded into A, one 4 KiB DRAM region each, and makes
N loopback WRITEs, each `initialize_xfer`, `transfer`, `check_xfer_state`
until DONE, `release_xfer_handle`. Set-up is not timed; `seconds` is from
every thread starting its loop to the last one ending. One JSON line.

calls N: the same loop from one thread, each of its four calls timed
apart: `*_ns` the mean of each over N (the poll's: every
`check_xfer_state` until DONE, together). Where the time of recording
goes, call by call. One JSON line.
"""

import json
import logging
import sys
import threading
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

REGION = 4096


def run_reg(n, reps):
    # NIXL's Python logger prints to stdout; keep stdout for the one line.
    logging.getLogger("nixl").setLevel(logging.WARNING)
    a = nixl_agent("A", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    buf = np.ones(n * REGION, dtype=np.uint8)  # touched: the pages exist
    base = buf.ctypes.data
    tuples = [(base + i * REGION, REGION, 0, "") for i in range(n)]
    t0 = time.perf_counter_ns()
    descs = a.register_memory(tuples, "DRAM")
    cold = time.perf_counter_ns() - t0
    reg, dereg = [], []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        a.deregister_memory(descs)
        dereg.append(time.perf_counter_ns() - t0)
        t0 = time.perf_counter_ns()
        descs = a.register_memory(tuples, "DRAM")
        reg.append(time.perf_counter_ns() - t0)
    a.deregister_memory(descs)
    print(json.dumps({"mode": "reg", "n": n, "cold_ns": cold, "reg_ns": reg, "dereg_ns": dereg}), flush=True)
    return 0


def loop_pair(i):
    """Thread i's agents, its regions and the lists a WRITE is made of."""
    a = nixl_agent(f"A{i}", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    # B only receives: its progress thread makes the WRITEs land.
    b = nixl_agent(f"B{i}", nixl_agent_config(enable_prog_thread=True, backends=["UCX"]))
    src = np.ones(REGION, dtype=np.uint8)
    dst = np.zeros(REGION, dtype=np.uint8)
    keep = (a.register_memory([(src.ctypes.data, REGION, 0, "")], "DRAM"),
            b.register_memory([(dst.ctypes.data, REGION, 0, "")], "DRAM"))
    a.add_remote_agent(b.get_agent_metadata())
    xa = a.get_xfer_descs([(src.ctypes.data, REGION, 0)], "DRAM")
    xb = b.get_xfer_descs([(dst.ctypes.data, REGION, 0)], "DRAM")
    return a, b, (src, dst, keep), xa, xb


def run_loop(threads, n):
    logging.getLogger("nixl").setLevel(logging.WARNING)
    pairs = [loop_pair(i) for i in range(threads)]
    start = threading.Barrier(threads + 1)
    done = [0] * threads
    failed = []

    def worker(i):
        a, _b, _keep, xa, xb = pairs[i]
        peer = f"B{i}"
        start.wait()
        for _ in range(n):
            req = a.initialize_xfer("WRITE", xa, xb, peer)
            state = a.transfer(req)
            while state != "DONE":
                if state == "ERR":
                    failed.append(i)
                    return
                state = a.check_xfer_state(req)
            a.release_xfer_handle(req)
            done[i] += 1

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    for t in ts:
        t.join()
    seconds = time.perf_counter() - t0
    print(json.dumps({"mode": "loop", "threads": threads, "transfers": sum(done),
                      "failed": len(failed), "seconds": seconds}), flush=True)
    return 0 if not failed else 3


def run_calls(n):
    logging.getLogger("nixl").setLevel(logging.WARNING)
    a, _b, _keep, xa, xb = loop_pair(0)
    clock = time.perf_counter_ns
    spent = [0, 0, 0, 0]
    for _ in range(n):
        t0 = clock()
        req = a.initialize_xfer("WRITE", xa, xb, "B0")
        t1 = clock()
        state = a.transfer(req)
        t2 = clock()
        while state != "DONE":
            if state == "ERR":
                return 3
            state = a.check_xfer_state(req)
        t3 = clock()
        a.release_xfer_handle(req)
        t4 = clock()
        for i, d in enumerate((t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
            spent[i] += d
    names = ("initialize_xfer_ns", "transfer_ns", "check_xfer_state_ns", "release_xfer_handle_ns")
    doc = {"mode": "calls", "n": n}
    doc.update({k: v / n for k, v in zip(names, spent)})
    print(json.dumps(doc), flush=True)
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "reg":
        return run_reg(int(argv[2]), int(argv[3]))
    if len(argv) == 4 and argv[1] == "loop":
        return run_loop(int(argv[2]), int(argv[3]))
    if len(argv) == 3 and argv[1] == "calls":
        return run_calls(int(argv[2]))
    print("usage: interpose_bench.py reg N REPS | loop THREADS N | calls N", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
