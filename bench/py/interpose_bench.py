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
"""

import json
import logging
import sys
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


def main(argv):
    if len(argv) == 4 and argv[1] == "reg":
        return run_reg(int(argv[2]), int(argv[3]))
    print("usage: interpose_bench.py reg N REPS", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
