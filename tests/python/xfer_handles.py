"""Transfer handles NIXL makes at a released one's address, and the calls
the instrumentation may make on the program's agent.

A prefill agent of two backends (UCX and POSIX: which one NIXL chose for a
request is not the agent's only backend) moves KV to a decode process
(tests/python/kv_transfer.py ``--target``) over UCX:

1. a WRITE is posted to the stopped peer (in flight) and released by a
   path the instrumentation does not see (NIXL's binding, as NIXL's own
   leak list does at the agent's end); after a while, the next request NIXL
   makes lands at the same address and completes;
2. ``query_xfer_backend`` counts its calls and raises ``KeyboardInterrupt``
   from each: a call the program never makes must neither happen nor be
   swallowed.

Prints what it saw, then (instrumented) what the recording counted:
``recorded: done=… released_in_flight=… in_flight=… durations=…``, or
``recorded: bare``. Run with UCX_TLS=tcp.
"""

import os
import signal
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

import peers

try:
    import nixl_agent_instrument as nai
except ImportError:
    nai = None

BIG = 64 << 20
KV_TRANSFER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kv_transfer.py")

queried = []


def query_xfer_backend(self, handle):
    queried.append(handle)
    raise KeyboardInterrupt("query_xfer_backend was called")


def recorded():
    """The write counts of the recording, or ``bare``."""
    text = nai.metrics() if nai is not None else None
    if not text:
        return "bare"
    want = {
        'nixl_agent_transfers_total{op="write",outcome="done"}': "done",
        'nixl_agent_transfers_total{op="write",outcome="released_in_flight"}': "released_in_flight",
        'nixl_agent_transfers_in_flight{op="write"}': "in_flight",
        'nixl_agent_transfer_duration_seconds_count{op="write"}': "durations",
    }
    got = {v: 0 for v in want.values()}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name in want:
            got[want[name]] = int(float(value))
    return " ".join(f"{k}={v}" for k, v in got.items())


def main(work):
    path = os.path.join(work, "decode.md")
    peer, (remote, md) = peers.start_peer([sys.executable, KV_TRANSFER], path, peers.quiet_env(), "decode")
    try:
        run(peer, remote, md)
    finally:
        if peer.poll() is None:
            os.kill(peer.pid, signal.SIGCONT)
            peer.kill()
        peer.wait()


def run(peer, remote, md):
    nixl_agent.query_xfer_backend = query_xfer_backend
    agent = nixl_agent("prefill", nixl_agent_config(backends=["UCX", "POSIX"]))
    print("backends:", sorted(agent.backends))
    src = np.full(BIG, 7, dtype=np.uint8)
    agent.register_memory([(src.ctypes.data, src.nbytes, 0, "")], "DRAM", backends=["UCX"])
    print("added:", agent.add_remote_agent(md))

    def request():
        local = agent.get_xfer_descs([(src.ctypes.data, BIG, 0)], "DRAM")
        far = agent.get_xfer_descs([(remote, BIG, 0)], "DRAM")
        return agent.initialize_xfer("WRITE", local, far, "decode", b"kv")

    def wait(h, limit=60.0):
        state, deadline = agent.transfer(h), time.monotonic() + limit
        while state == "PROC" and time.monotonic() < deadline:
            state = agent.check_xfer_state(h)
        return state

    # In flight to a stopped peer, then released where no wrapper sees it.
    os.kill(peer.pid, signal.SIGSTOP)
    old = request()
    print("posted to a stopped peer:", agent.transfer(old))
    agent.agent.releaseXferReq(old._handle)
    old._released = True
    os.kill(peer.pid, signal.SIGCONT)
    time.sleep(1.0)
    reused = None
    for _ in range(8):
        new = request()
        if new._handle == old._handle:
            reused = new
            break
        new.release()
    print("address reused:", reused is not None)
    if reused is not None:
        print("next request:", wait(reused))
        reused.release()
    del old
    print("query_xfer_backend calls:", len(queried))
    print("recorded:", recorded())


if __name__ == "__main__":
    main(sys.argv[1])
