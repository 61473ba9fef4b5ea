"""The data path's section of `make bench-python` (bench/py/instrument_bench.py):
what the wrapped transfer methods add, bare (NIXL's own methods, kept by the
wrapper) vs instrumented, in the same process, interleaved, against a decode
peer in another process over UCX's TCP transport (the only one that can
hold a transfer in flight on demand: the peer is stopped with SIGSTOP).

  1. check_xfer_state on a transfer in flight ("PROC", the decode worker's
     poll loop): ns per call, and Python heap blocks allocated per call.
  2. transfer() of a 4 KiB WRITE (create and completion not timed): ns per
     call, loopback within an agent on UCX's default transports (shared
     memory: the wrapper's cost with the least noise) and to the peer.
  3. A 64 MiB WRITE loop: create, post, poll until DONE, release; wall time.
  4. A request over 4,096 descriptors of 1 KiB (SGLang's shape: the lists
     made from N×3 uint64 arrays by get_xfer_descs, then initialize_xfer;
     vLLM's: make_prepped_xfer of 4,096 indices into prepared lists), in
     the loopback agent: each call timed alone, and the request whole.
"""

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

BIG = 64 << 20
SMALL = 4096


def peer_main(path):
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent("bench-decode", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(BIG, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    with open(path + ".tmp", "wb") as f:
        f.write(buf.ctypes.data.to_bytes(8, "little") + agent.get_agent_metadata())
    os.rename(path + ".tmp", path)
    while True:
        time.sleep(0.1)


def start_peer(python):
    d = tempfile.mkdtemp()
    path = os.path.join(d, "peer.md")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NIXL_AGENT_") and k != "PYTHONPATH"}
    peer = subprocess.Popen(
        [python, __file__, "--peer", path], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 30
    while not os.path.exists(path):
        assert time.time() < deadline, "the peer never published its metadata"
        time.sleep(0.02)
    raw = open(path, "rb").read()
    return peer, int.from_bytes(raw[:8], "little"), raw[8:]


def run(agent, cls, python, local):
    """`agent`: made with UCX_TLS=tcp; `local`: an agent on UCX's default
    transports, for the loopback figure."""
    bare = cls.__nixl_agent_originals__
    peer, remote, md = start_peer(python)
    try:
        src = np.full(BIG, 5, dtype=np.uint8)
        agent.register_memory([(src.ctypes.data, src.nbytes, 0, "")], "DRAM")
        agent.add_remote_agent(md)
        descs = lambda a, n: agent.get_xfer_descs([(a, n, 0)], "DRAM")

        def request(n):
            return agent.initialize_xfer("WRITE", descs(src.ctypes.data, n), descs(remote, n), "bench-decode")

        contenders = {
            "bare": (bare["transfer"], bare["check_xfer_state"]),
            "instrumented": (cls.transfer, cls.check_xfer_state),
        }
        names = list(contenders)

        def wait(h, poll):
            s = "PROC"
            while s == "PROC":
                s = poll(agent, h)
            return s

        # 1. Polls of a transfer in flight.
        os.kill(peer.pid, signal.SIGSTOP)
        h = request(BIG)
        assert agent.transfer(h) == "PROC"
        calls = 100_000
        poll_ns = {n: [] for n in names}
        blocks = {n: [] for n in names}
        for rep in range(11):
            for name in names if rep % 2 == 0 else reversed(names):
                poll = contenders[name][1]
                b0 = sys.getallocatedblocks()
                t0 = time.perf_counter_ns()
                for _ in range(calls):
                    poll(agent, h)
                t1 = time.perf_counter_ns()
                b1 = sys.getallocatedblocks()
                if rep > 0:
                    poll_ns[name].append((t1 - t0) / calls)
                    blocks[name].append((b1 - b0) / calls)
        os.kill(peer.pid, signal.SIGCONT)
        wait(h, bare["check_xfer_state"])
        h.release()

        # 2. transfer() itself (4 KiB; the wait for DONE is not timed), one
        # request reposted: loopback within the agent, then to the peer.
        post_ns = {}
        pair = np.zeros(2 * SMALL, dtype=np.uint8)
        local.register_memory([(pair.ctypes.data, pair.nbytes, 0, "")], "DRAM")
        near = lambda a: local.get_xfer_descs([(a, SMALL, 0)], "DRAM")
        loopback = local.initialize_xfer("WRITE", near(pair.ctypes.data), near(pair.ctypes.data + SMALL), local.name)
        for where, who, h in (("loopback", local, loopback), ("peer", agent, request(SMALL))):
            times = {n: [] for n in names}
            for rep in range(10001):
                for name in names if rep % 2 == 0 else reversed(names):
                    post, poll = contenders[name]
                    t0 = time.perf_counter_ns()
                    s = post(who, h)
                    t1 = time.perf_counter_ns()
                    while s == "PROC":
                        s = bare["check_xfer_state"](who, h)
                    if rep > 0:
                        times[name].append(t1 - t0)
            h.release()
            post_ns[where] = {n: statistics.median(v) for n, v in times.items()}

        # 3. The 64 MiB WRITE loop, whole; the ratio of each adjacent pair
        # (this machine's drift is slower than a pair).
        loop_ms = {n: [] for n in names}
        ratios = []
        for rep in range(101):
            pair = {}
            for name in names if rep % 2 == 0 else reversed(names):
                post, poll = contenders[name]
                t0 = time.perf_counter_ns()
                h = request(BIG)
                if post(agent, h) == "PROC":
                    wait(h, poll)
                h.release()
                pair[name] = (time.perf_counter_ns() - t0) / 1e6
            if rep > 0:
                for name in names:
                    loop_ms[name].append(pair[name])
                ratios.append(pair["instrumented"] / pair["bare"])

        # 4. Requests over 4,096 descriptors (creation only: not posted).
        wide = wide_requests(local, bare, names)
    finally:
        if peer.poll() is None:
            peer.kill()
        peer.wait()
    return {
        "poll_ns": {n: statistics.median(v) for n, v in poll_ns.items()},
        "poll_blocks_per_call": {n: statistics.median(v) for n, v in blocks.items()},
        "transfer_ns": post_ns,
        "write_64mib_ms": {n: statistics.median(v) for n, v in loop_ms.items()},
        "write_64mib_paired_ratio": statistics.median(ratios),
        "wide": wide,
    }


WIDE = 4096


def wide_requests(local, bare, names):
    """µs per call, bare vs instrumented, interleaved: get_xfer_descs of an
    N×3 array, initialize_xfer over two such lists, the two together (what
    SGLang pays a request), and make_prepped_xfer of N indices."""
    cls = type(local)
    calls = {
        "bare": (bare["get_xfer_descs"], bare["initialize_xfer"], bare["make_prepped_xfer"]),
        "instrumented": (cls.get_xfer_descs, cls.initialize_xfer, cls.make_prepped_xfer),
    }
    buf = np.zeros(2 * WIDE * 1024, dtype=np.uint8)
    local.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    rows = lambda base: np.array([(base + i * 1024, 1024, 0) for i in range(WIDE)], dtype=np.uint64)
    src, dst = rows(buf.ctypes.data), rows(buf.ctypes.data + WIDE * 1024)
    near = local.prep_xfer_dlist("NIXL_INIT_AGENT", local.get_xfer_descs(src, "DRAM"))
    far = local.prep_xfer_dlist(local.name, local.get_xfer_descs(dst, "DRAM"))
    idx = np.arange(WIDE, dtype=np.int64)
    out = {n: {"get_xfer_descs": [], "initialize_xfer": [], "request": [], "make_prepped_xfer": []} for n in names}
    for rep in range(101):
        for name in names if rep % 2 == 0 else reversed(names):
            descs, init, prepped = calls[name]
            t0 = time.perf_counter_ns()
            a = descs(local, src, "DRAM")
            t1 = time.perf_counter_ns()
            b = descs(local, dst, "DRAM")
            t2 = time.perf_counter_ns()
            h = init(local, "WRITE", a, b, local.name)
            t3 = time.perf_counter_ns()
            h.release()
            t4 = time.perf_counter_ns()
            p = prepped(local, "WRITE", near, idx, far, idx)
            t5 = time.perf_counter_ns()
            p.release()
            if rep > 0:
                r = out[name]
                r["get_xfer_descs"].append((t1 - t0) / 1e3)
                r["initialize_xfer"].append((t3 - t2) / 1e3)
                r["request"].append((t3 - t0) / 1e3)
                r["make_prepped_xfer"].append((t5 - t4) / 1e3)
    near.release()
    far.release()
    return {n: {k: statistics.median(v) for k, v in r.items()} for n, r in out.items()}


def report(x, p=print):
    p("The data path (bench/py/xfer_bench.py): a decode peer in another process, UCX over TCP; bare vs instrumented in the same process, interleaved, medians:")
    p()
    p("| call | bare | instrumented | added | ratio |")
    p("|---|---:|---:|---:|---:|")
    b, i = x["poll_ns"]["bare"], x["poll_ns"]["instrumented"]
    p(f"| check_xfer_state, transfer in flight (ns per call) | {b:.0f} | {i:.0f} | {i - b:+.0f} | {i / b:.2f}× |")
    for where, label in (("loopback", "loopback, shared memory"), ("peer", "to the peer, TCP")):
        b, i = x["transfer_ns"][where]["bare"], x["transfer_ns"][where]["instrumented"]
        p(f"| transfer(), 4 KiB WRITE, {label} (ns per call) | {b:.0f} | {i:.0f} | {i - b:+.0f} | {i / b:.2f}× |")
    b, i = x["write_64mib_ms"]["bare"], x["write_64mib_ms"]["instrumented"]
    r = x["write_64mib_paired_ratio"]
    p(f"| 64 MiB WRITE to the peer: create, post, poll to DONE, release (ms) | {b:.2f} | {i:.2f} | {i - b:+.2f} | {r:.3f}× (paired) |")
    w = x.get("wide")
    if w:
        for key, label in (
            ("get_xfer_descs", "get_xfer_descs of a 4,096×3 array"),
            ("initialize_xfer", "initialize_xfer over two 4,096-descriptor lists"),
            ("request", "the request whole: two get_xfer_descs + initialize_xfer"),
            ("make_prepped_xfer", "make_prepped_xfer of 4,096 indices"),
        ):
            b, i = w["bare"][key], w["instrumented"][key]
            p(f"| {label}, loopback (µs) | {b:.1f} | {i:.1f} | {i - b:+.1f} | {i / b:.2f}× |")
    b, i = x["poll_blocks_per_call"]["bare"], x["poll_blocks_per_call"]["instrumented"]
    p()
    p(f"Python heap blocks allocated per in-flight poll: bare {b:.3f}, instrumented {i:.3f} (`sys.getallocatedblocks`, over 100,000 calls).")


if __name__ == "__main__":
    if sys.argv[1] == "--peer":
        peer_main(sys.argv[2])
