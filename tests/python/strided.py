"""strided: a transfer over lists `prep_xfer_dlist` prepared from N×5
(strided) arrays, as vLLM's NixlConnector passes its KV blocks.

One agent "A", UCX, loopback; a 64 KiB source and a 64 KiB destination
registered in one call. Each side is prepared from 4 runs of 8 blocks of
1 KiB spaced 2 KiB apart (`address, len, device, stride, count`); one WRITE
of every other block (16 blocks, 16 KiB) is made from the prepared lists,
posted and polled to DONE; then everything is released. Prints the final
state and the bytes that arrived; with HOLD_BEFORE_EXIT=1 reads a line from
stdin before it exits. Exit 0; 3 when the transfer did not end DONE.

Run (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
    NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins python strided.py
"""

import logging
import os
import sys

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

# NIXL's logger stamps its lines with the clock: keep them, not the clock.
for _h in logging.getLogger("nixl").handlers:
    _h.setFormatter(logging.Formatter("NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"))

BLOCK, STRIDE, COUNT, RUNS, RUN_AT = 1024, 2048, 8, 4, 16384

a = nixl_agent("A", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
src = (np.arange(64 * 1024) % 251 + 1).astype(np.uint8)
dst = np.zeros(64 * 1024, dtype=np.uint8)
regs = a.register_memory([(src.ctypes.data, src.nbytes, 0, ""), (dst.ctypes.data, dst.nbytes, 0, "")], "DRAM")


def runs(base):
    return np.array([[base + r * RUN_AT, BLOCK, 0, STRIDE, COUNT] for r in range(RUNS)], dtype=np.uint64)


local = a.prep_xfer_dlist("NIXL_INIT_AGENT", runs(src.ctypes.data), "DRAM")
remote = a.prep_xfer_dlist("A", runs(dst.ctypes.data), "DRAM")
blocks = list(range(0, RUNS * COUNT, 2))
handle = a.make_prepped_xfer("WRITE", local, blocks, remote, blocks, b"")
a.transfer(handle)
state = a.check_xfer_state(handle)
while state == "PROC":
    state = a.check_xfer_state(handle)
print(f"state {state}, {int(np.count_nonzero(dst))} bytes arrived of {len(blocks) * BLOCK}")
a.release_xfer_handle(handle)
a.release_dlist_handle(local)
a.release_dlist_handle(remote)
a.deregister_memory(regs)
sys.stdout.flush()
if os.environ.get("HOLD_BEFORE_EXIT") == "1":
    sys.stdin.readline()
sys.exit(0 if state == "DONE" else 3)
