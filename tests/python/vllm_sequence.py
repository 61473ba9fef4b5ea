"""vLLM's NixlConnector KV path reproduced with NIXL's real Python API, in
the order vLLM 0.33.0 makes its calls: a decode worker (this process) and a
prefill worker (a child, ``--target``), N×5 strided prepared lists on both
sides, one ``make_prepped_xfer`` READ of 2N descriptors carrying the
completion notification, ``check_xfer_state`` until DONE, NIXL's own
telemetry, heartbeat notifications (``HB:<request>``), and agent names as
bytes in some calls and str in others. Then what the accounting must get
right: a repost while in flight, a release NIXL refuses while in flight,
stale handles after the peer is reloaded
(NIXL 1.5.1's "invalidated or re-registered"), a peer never added, more
prepared lists than nixl-agent keeps (the local one prepared first), and
READs into tensors (a list of them prepared, one through get_xfer_descs).

``--loopback``: one transfer between two agents of this process (UCX picks
cma on a CPU-only host). What the program prints is what it saw;
tests/python_vllm.rs runs it bare and instrumented and compares. At each
``HOLD`` it waits for a line on stdin.
"""

import os
import signal
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

import peers

N = 4
BLOCK = 4096
BIG = 16 << 20


def hold():
    print("HOLD", flush=True)
    sys.stdin.readline()


def outcome(f):
    try:
        return str(f())
    except Exception as e:
        return type(e).__name__


def strided(base):
    # vLLM's layout: per row (address, len, device, stride, count), two
    # blocks of BLOCK bytes two blocks apart.
    return np.array([[base + i * 4 * BLOCK, BLOCK, 0, 2 * BLOCK, 2] for i in range(N)], dtype=np.uint64)


def tensor_module():
    """A `torch` module whose Tensor is a view of a numpy buffer, with the
    methods NIXL's get_xfer_descs and nixl-agent read."""
    import types

    torch = types.ModuleType("torch")

    class Tensor:
        def __init__(self, buf, offset, n):
            self._addr, self._n = buf.ctypes.data + offset, n
            self.device = "cpu"

        def data_ptr(self):
            return self._addr

        def numel(self):
            return self._n

        def element_size(self):
            return 1

        def get_device(self):
            return -1

        def is_contiguous(self):
            return True

        def __getitem__(self, i):
            # NIXL looks at descs[0] first: a tensor's element, not a tuple.
            return 0

    torch.Tensor = Tensor
    sys.modules["torch"] = torch
    return torch


def target(path):
    agent = nixl_agent("prefill", nixl_agent_config(backends=["UCX"]))
    buf = np.full(BIG, 5, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    with open(path + ".tmp", "wb") as f:
        f.write(buf.ctypes.data.to_bytes(8, "little") + agent.get_agent_metadata())
    os.rename(path + ".tmp", path)
    parent = os.getppid()
    # Polls as vLLM's prefill does, until the decode side is gone.
    while os.getppid() == parent:
        agent.get_new_notifs()
        time.sleep(0.01)


def wait(agent, h, state="PROC", limit=60.0):
    deadline = time.monotonic() + limit
    while state == "PROC":
        assert time.monotonic() < deadline, f"the transfer was still in flight after {limit} s"
        state = agent.check_xfer_state(h)
    return state


def decode(work):
    path = os.path.join(work, "prefill.md")
    env = peers.quiet_env()
    # Another "node": the prefill in a network namespace of its own, on its
    # end of a veth pair (tests/python_vllm.rs, as root).
    wrap = []
    if os.environ.get("PREFILL_NETNS"):
        wrap = ["ip", "netns", "exec", os.environ["PREFILL_NETNS"]]
        env["UCX_NET_DEVICES"] = os.environ["PREFILL_NET_DEVICES"]
    peer, (remote, md) = peers.start_peer(wrap + [sys.executable, __file__], path, env, "prefill")
    try:
        run(peer, remote, md)
    finally:
        if peer.poll() is None:
            peer.kill()
        peer.wait()


def run(peer, remote, md):
    agent = nixl_agent("decode", nixl_agent_config(backends=["UCX"], capture_telemetry=True))
    dst = np.zeros(BIG, dtype=np.uint8)
    agent.register_memory([(dst.ctypes.data, dst.nbytes, 0, "")], "DRAM")
    name = agent.add_remote_agent(md)
    print("added:", name)
    far = agent.prep_xfer_dlist(name, strided(remote), "DRAM")
    local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", strided(dst.ctypes.data), "DRAM")
    idx = np.arange(2 * N, dtype=np.int32)
    h = agent.make_prepped_xfer("READ", local, idx, far, idx, b"req-1")
    print("read:", wait(agent, h, agent.transfer(h)))
    t = agent.get_xfer_telemetry(h)
    print("telemetry bytes:", t.totalBytes, "descriptors:", t.descCount)
    print("bytes read:", int((dst != 0).sum()))
    agent.release_xfer_handle(h)
    for r in ("req-2", "req-3"):
        agent.send_notif("prefill", b"HB:" + r.encode())
    agent.send_notif(name, b"done")
    hold()

    # A repost while the first posting is in flight (the peer stopped).
    def whole(n):
        return (
            agent.get_xfer_descs([(dst.ctypes.data, n, 0)], "DRAM"),
            agent.get_xfer_descs([(remote, n, 0)], "DRAM"),
        )

    os.kill(peer.pid, signal.SIGSTOP)
    h = agent.initialize_xfer("READ", *whole(BIG), "prefill")
    print("posted:", agent.transfer(h))
    print("posted again:", outcome(lambda: agent.transfer(h)))
    os.kill(peer.pid, signal.SIGCONT)
    print("first posting:", wait(agent, h))
    h.release()

    # A release NIXL refuses (a backend that cannot cancel: UCX on a CPU
    # always can, so its refusal is NIXL's own exception raised by a stand-in
    # for this one call): the handle lives on, and so does its transfer.
    os.kill(peer.pid, signal.SIGSTOP)
    h = agent.initialize_xfer("READ", *whole(BIG), "prefill")
    print("posted:", agent.transfer(h))
    bound = h._agent

    class Refusing:
        def releaseXferReq(self, handle):
            from nixl._bindings import nixlBackendError

            raise nixlBackendError("NIXL_ERR_BACKEND")

    h._agent = Refusing()
    print("released:", outcome(h.release))
    h._agent = bound
    hold()
    os.kill(peer.pid, signal.SIGCONT)
    print("after the refused release:", wait(agent, h))
    h.release()

    # Stale handles: made before the peer was removed and loaded again.
    stale = agent.make_prepped_xfer("READ", local, [0], far, [0])
    old = agent.initialize_xfer("READ", *whole(BLOCK), "prefill")
    agent.remove_remote_agent("prefill")
    print("added again:", agent.add_remote_agent(md))
    print("stale prepped:", outcome(lambda: agent.transfer(stale)))
    print("stale request:", outcome(lambda: agent.transfer(old)))
    print("stale list:", outcome(lambda: agent.make_prepped_xfer("READ", local, [0], far, [0])))
    print("never added:", outcome(lambda: agent.initialize_xfer("READ", *whole(BLOCK), "nobody")))
    stale.release()
    old.release()
    agent.release_dlist_handle(far)

    # More prepared lists than nixl-agent keeps; the local list, prepared
    # first, and the peer's list in use stay known.
    far = agent.prep_xfer_dlist("prefill", strided(remote), "DRAM")
    spare = np.array([[remote, BLOCK, 0]], dtype=np.uint64)
    leaked = []
    for i in range(4200):
        leaked.append(agent.prep_xfer_dlist("prefill", spare, "DRAM"))
        if i % 500 == 0:
            agent.release_xfer_handle(agent.make_prepped_xfer("READ", local, [0], far, [0]))
    h = agent.make_prepped_xfer("READ", local, idx, far, idx, b"req-4")
    print("read after many lists:", wait(agent, h, agent.transfer(h)))
    h.release()

    # Tensors, as NIXL takes them (it asks `sys.modules["torch"]`; torch is
    # not installed here, so a module standing for it holds a Tensor class
    # over this program's own buffer: NIXL reads data_ptr, numel,
    # element_size and get_device, as of a CPU tensor).
    tensors = tensor_module()
    views = [tensors.Tensor(dst, i * BLOCK, BLOCK) for i in range(2)]
    mine = agent.prep_xfer_dlist("NIXL_INIT_AGENT", views)
    theirs = agent.prep_xfer_dlist("prefill", [(remote, BLOCK, 0), (remote + BLOCK, BLOCK, 0)], "DRAM")
    h = agent.make_prepped_xfer("READ", mine, [0, 1], theirs, [0, 1])
    print("read into a list of tensors:", wait(agent, h, agent.transfer(h)))
    h.release()
    h = agent.initialize_xfer("READ", agent.get_xfer_descs(views[0]), whole(BLOCK)[1], "prefill")
    print("read into a tensor:", wait(agent, h, agent.transfer(h)))
    h.release()
    agent.release_dlist_handle(mine)
    agent.release_dlist_handle(theirs)
    del sys.modules["torch"]
    for x in leaked:
        x.release()
    hold()
    # vLLM's shutdown.
    agent.release_dlist_handle(far)
    agent.release_dlist_handle(local)
    agent.remove_remote_agent(name)


def loopback():
    a, _src, (b, dst), h = peers.loopback("loop", 1 << 20)
    print("loopback write:", wait(a, h, a.transfer(h)), "equal:", bool((dst == 3).all()))
    h.release()
    hold()


if __name__ == "__main__":
    if sys.argv[1] == "--target":
        target(sys.argv[2])
    elif sys.argv[1] == "--loopback":
        loopback()
    else:
        decode(sys.argv[1])
