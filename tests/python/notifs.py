"""notifs: notifications consumed through NIXL's own map of the agent
(`check_remote_xfer_done`, `update_notifs`) rather than `get_new_notifs`.

Agents "A" and "B" in this process, UCX, one 4 KiB DRAM region each; A
writes into B five times, each WRITE with the message `xfer-N`, and sends
two standalone notifications. B receives all seven (one a heartbeat):
    xfer-0   polled with check_remote_xfer_done until found (new when found);
    xfer-1   the same, by a substring tag (tag_is_prefix=False, keywords);
    hello    a standalone send_notif, then xfer-2: B polls update_notifs
             until both are in its map, then finds xfer-2 among the old;
             hello stays in B's map;
    xfer-3, xfer-4
             both posted; B polls update_notifs until both arrived, then
             finds xfer-4 and xfer-3, old ones;
    HB:beat  a standalone heartbeat, polled with check_remote_xfer_done
             (tag `HB:`) until found.
Prints what B saw and its map at the end; then `HOLD`, and with
HOLD_BEFORE_EXIT=1 reads a line from stdin before it exits.
Exit 0; 3 when a NIXL call failed, 4 when something did not arrive in 10 s.

Run (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
    NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins python notifs.py
"""

import logging
import os
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

SIZE = 4096

for _h in logging.getLogger("nixl").handlers:
    _h.setFormatter(logging.Formatter("NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"))


def finish(code):
    print("HOLD", flush=True)
    if os.environ.get("HOLD_BEFORE_EXIT") == "1":
        sys.stdin.readline()
    sys.exit(code)


def make_agent(name):
    return nixl_agent(name, nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))


def within(what, done, step):
    """Calls `step` until `done()`, for 10 s at most."""
    deadline = time.monotonic() + 10
    while not done():
        step()
        if time.monotonic() > deadline:
            print(f"{what}: not within 10 s", flush=True)
            finish(4)


def main():
    a = make_agent("A")
    b = make_agent("B")
    buf_a = np.full(SIZE, 7, dtype=np.uint8)
    buf_b = np.zeros(SIZE, dtype=np.uint8)
    a.register_memory([(buf_a.ctypes.data, SIZE, 0, "")], "DRAM")
    b.register_memory([(buf_b.ctypes.data, SIZE, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    xa = a.get_xfer_descs([(buf_a.ctypes.data, SIZE, 0)], "DRAM")
    xb = b.get_xfer_descs([(buf_b.ctypes.data, SIZE, 0)], "DRAM")
    reqs = []

    def post(n):
        req = a.initialize_xfer("WRITE", xa, xb, "B", f"xfer-{n}".encode())
        if a.transfer(req) == "ERR":
            print(f"xfer-{n}: post failed", flush=True)
            finish(3)
        reqs.append(req)

    def pump():
        # A's progress (its posts and sends), as a program polling its
        # requests: A itself receives nothing.
        for req in reqs:
            if a.check_xfer_state(req) == "ERR":
                print("a transfer failed", flush=True)
                finish(3)
        a.get_new_notifs()

    def arrived(*messages):
        return lambda: all(m in b.notifs.get("A", []) for m in messages)

    def found(tag, **kw):
        hit = []
        within(f"{tag!r}", lambda: bool(hit), lambda: hit.append(True) if b.check_remote_xfer_done("A", tag, **kw) else pump())
        print(f"found {tag.decode()}", flush=True)

    post(0)
    found(b"xfer-0")
    post(1)
    found(b"fer-1", tag_is_prefix=False)

    a.send_notif("B", b"hello")
    post(2)
    within("hello, xfer-2", arrived(b"hello", b"xfer-2"), lambda: (b.update_notifs(), pump()))
    print(f"found old xfer-2 {b.check_remote_xfer_done('A', b'xfer-2')}", flush=True)

    post(3)
    post(4)
    within("xfer-3, xfer-4", arrived(b"xfer-3", b"xfer-4"), lambda: (b.update_notifs(), pump()))
    print(f"found old xfer-4 {b.check_remote_xfer_done('A', b'xfer-4')}", flush=True)
    print(f"found old xfer-3 {b.check_remote_xfer_done('A', b'xfer-3', [], True)}", flush=True)

    a.send_notif("B", b"HB:beat")
    found(b"HB:")
    print(f"left {b.notifs}", flush=True)
    same = bool((buf_b == 7).all())
    print("data verified" if same else "data MISMATCH", flush=True)
    for req in reqs:
        within("transfers done", lambda req=req: a.check_xfer_state(req) == "DONE", lambda: None)
        a.release_xfer_handle(req)
    finish(0 if same else 3)


if __name__ == "__main__":
    main()
