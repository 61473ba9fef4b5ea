"""A prefill worker moving KV to a decode worker with NIXL's Python API, the
way SGLang and vLLM do (initialize_xfer, and prep_xfer_dlist +
make_prepped_xfer), through every way a transfer goes wrong that a CPU-only
machine can show: metadata NIXL refuses, a peer never added, a handle
released in flight, a peer stopped (SIGSTOP) past the stall threshold, a
remote agent removed in flight, and the peer killed mid-transfer.

The decode side is a child process (``--target``). What this program prints
is what it saw; tests/python_transfers.rs runs it bare and under
nixl-agent-instrument and compares. At each ``HOLD`` it waits for a line on
stdin, so the test can read /metrics while a transfer is in flight.

Run with UCX_TLS=tcp: a stopped peer then really holds a transfer in flight,
and its death is a remote disconnect NIXL reports.
"""

import os
import signal
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

import peers

BIG = 64 << 20
SMALL = 1 << 20


def target(path):
    agent = nixl_agent("decode", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(BIG, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    with open(path + ".tmp", "wb") as f:
        f.write(buf.ctypes.data.to_bytes(8, "little") + agent.get_agent_metadata())
    os.rename(path + ".tmp", path)
    while True:
        time.sleep(0.1)


def hold():
    print("HOLD", flush=True)
    sys.stdin.readline()


def outcome(f):
    try:
        return str(f())
    except Exception as e:
        return type(e).__name__


def main():
    path = os.path.join(sys.argv[1], "decode.md")
    peer, (remote, md) = peers.start_peer([sys.executable, __file__], path, peers.quiet_env(), "decode")
    try:
        run(peer, remote, md)
    finally:
        if peer.poll() is None:
            peer.kill()
        peer.wait()


def run(peer, remote, md):
    agent = nixl_agent("prefill", nixl_agent_config(backends=["UCX"]))
    src = np.full(BIG, 7, dtype=np.uint8)
    back = np.zeros(SMALL, dtype=np.uint8)
    for buf in (src, back):
        agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    hold()

    corrupt = bytearray(md)
    corrupt[10:30] = b"x" * 20
    print("corrupt metadata:", outcome(lambda: agent.add_remote_agent(bytes(corrupt))))

    def descs(addr, n):
        return agent.get_xfer_descs([(addr, n, 0)], "DRAM")

    def request(op, n, to="decode", local=None):
        local = src.ctypes.data if local is None else local
        return agent.initialize_xfer(op, descs(local, n), descs(remote, n), to, b"kv")

    print("peer never added:", outcome(lambda: request("WRITE", SMALL, to="nobody")))
    print("added:", agent.add_remote_agent(md))
    print("metadata there:", agent.check_remote_metadata("decode"))

    def poll(h, state="PROC", limit=30.0):
        deadline = time.monotonic() + limit
        while state == "PROC" and time.monotonic() < deadline:
            state = agent.check_xfer_state(h)
        return state

    def wait(h, limit=30.0):
        return poll(h, agent.transfer(h), limit)

    h = request("WRITE", SMALL)
    print("write:", wait(h))
    agent.release_xfer_handle(h)
    h = request("READ", SMALL, local=back.ctypes.data)
    print("read:", wait(h), "bytes equal:", bool((back == 7).all()))
    h.release()

    # vLLM's shape: prepared lists, requests by index.
    local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", [(src.ctypes.data, SMALL, 0), (src.ctypes.data + SMALL, SMALL, 0)], "DRAM")
    far = agent.prep_xfer_dlist("decode", [(remote, SMALL, 0), (remote + SMALL, SMALL, 0)], "DRAM")
    h = agent.make_prepped_xfer("WRITE", local, [0, 1], far, [0, 1])
    print("prepped write:", wait(h))
    h.release()
    agent.send_notif("decode", b"prefill done")
    print("notifications:", agent.get_new_notifs())

    # A handle released while its transfer is in flight.
    os.kill(peer.pid, signal.SIGSTOP)
    h = request("WRITE", BIG)
    print("posted to a stopped peer:", agent.transfer(h))
    print("released in flight:", outcome(h.release))
    os.kill(peer.pid, signal.SIGCONT)
    time.sleep(0.5)

    # A peer stopped past the stall threshold, then resumed.
    os.kill(peer.pid, signal.SIGSTOP)
    h = request("WRITE", BIG)
    state = poll(h, agent.transfer(h), limit=1.5)
    print("stopped peer after 1.5 s:", state)
    hold()
    os.kill(peer.pid, signal.SIGCONT)
    print("resumed peer:", poll(h, state, limit=60))
    h.release()

    # The remote agent removed while a transfer to it is in flight.
    os.kill(peer.pid, signal.SIGSTOP)
    h = request("WRITE", BIG)
    print("posted:", agent.transfer(h))
    print("removed in flight:", outcome(lambda: agent.remove_remote_agent("decode")))
    os.kill(peer.pid, signal.SIGCONT)
    print("after removal:", outcome(lambda: poll(h, limit=10)))
    print("released:", outcome(h.release))
    print("added again:", agent.add_remote_agent(md))

    # The peer killed mid-transfer: NIXL reports a remote disconnect.
    os.kill(peer.pid, signal.SIGSTOP)
    h = request("WRITE", BIG)
    print("posted:", agent.transfer(h))
    peer.kill()
    peer.wait()
    print("peer killed:", outcome(lambda: poll(h, limit=20)))
    print("released:", outcome(h.release))
    hold()


if __name__ == "__main__":
    if sys.argv[1] == "--target":
        target(sys.argv[2])
    else:
        main()
