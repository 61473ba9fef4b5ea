"""telemetry: a loopback WRITE by an agent whose config asks NIXL for its
telemetry, or does not, on NIXL's real Python API; whether NIXL records it
is for NIXL_TELEMETRY_ENABLE (set by the test) to decide.

Run (UCX, DRAM, CPU only):
    python telemetry.py asked|not-asked

Agents "A" (``capture_telemetry=True`` with ``asked``, ``False`` with
``not-asked``) and "B" in this process, UCX each; 4 x 64 KiB DRAM regions
registered on each; A writes its regions into B's and polls
``check_xfer_state`` to ``DONE`` (and B's ``get_new_notifs``, which
progresses B); everything released. Prints what it saw,
then ``HOLD`` and reads one line from stdin before it exits (a test scrapes
the recording meanwhile; a bare run is sent the line at once). Exit 0; 3
when a NIXL call fails, 4 when the transfer is not done within 10 s.
"""

import logging
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

REGION = 64 * 1024

# NIXL's Python logger stamps its lines with the wall clock: keep each line,
# not the clock, so two runs print alike.
for _h in logging.getLogger("nixl").handlers:
    _h.setFormatter(logging.Formatter("NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"))


def finish(code):
    print("HOLD", flush=True)
    sys.stdin.readline()
    sys.exit(code)


def regions(bufs):
    return [(buf.ctypes.data, buf.nbytes, 0, "") for buf in bufs]


def main(asked):
    a = nixl_agent(
        "A",
        nixl_agent_config(enable_prog_thread=False, backends=["UCX"], capture_telemetry=asked),
    )
    b = nixl_agent("B", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    bufs_a = [((np.arange(REGION, dtype=np.uint64) + i * 31) % 256).astype(np.uint8) for i in range(4)]
    bufs_b = [np.zeros(REGION, dtype=np.uint8) for _ in range(4)]
    reg_a = a.register_memory(regions(bufs_a), "DRAM")
    reg_b = b.register_memory(regions(bufs_b), "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    xa = a.get_xfer_descs([r[:3] for r in regions(bufs_a)], "DRAM")
    xb = b.get_xfer_descs([r[:3] for r in regions(bufs_b)], "DRAM")
    req = a.initialize_xfer("WRITE", xa, xb, "B")
    state = a.transfer(req)
    if state == "ERR":
        print("transfer failed", flush=True)
        finish(3)
    deadline = time.monotonic() + 10
    while (state := a.check_xfer_state(req)) == "PROC":
        # B's worker progresses only when B is polled (no progress thread).
        b.get_new_notifs()
        if time.monotonic() > deadline:
            print("transfer still in progress after 10 s", flush=True)
            finish(4)
    print(f"transfer {state}", flush=True)
    same = all(np.array_equal(x, y) for x, y in zip(bufs_a, bufs_b))
    print("data verified" if same else "data MISMATCH", flush=True)
    a.release_xfer_handle(req)
    a.remove_remote_agent("B")
    a.deregister_memory(reg_a)
    b.deregister_memory(reg_b)
    del a, b
    finish(0 if state == "DONE" and same else 3)


if __name__ == "__main__":
    if sys.argv[1:] not in (["asked"], ["not-asked"]):
        print("usage: telemetry.py asked|not-asked", flush=True)
        sys.exit(2)
    main(sys.argv[1] == "asked")
