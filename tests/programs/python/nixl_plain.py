"""nixl_plain: a plain user of NIXL's Python API, with no nixl-agent code in it.

Tests run it bare and under an interposer and compare what it prints.

Run (NIXL_LIB_DIR: the wheel's .nixl_cu12.mesonpy.libs):
    NIXL_PLUGIN_DIR=$NIXL_LIB_DIR/plugins python nixl_plain.py ok|seed|config|query

Scenarios (argv[1]):
    ok    agents "A" and "B" in this process, UCX each; 4 x 64 KiB DRAM
          regions registered on each; A writes its regions into B's with
          notification "done"; B receives it; everything released. Exit 0.
    seed  agent "A" registers "kv" (2 x 64 KiB DRAM), then "aux", one DRAM
          region at address 0: NIXL raises, the exception's class is
          printed, and the program exits 1 as a serving process dies.
    config
          agent "A" is made, as the first thing a serving process does; when
          NIXL raises (its configuration file, say), the exception's class
          and text are printed and the program exits 1. Exit 0 when made.
    query agent "A" with a UCX and a POSIX backend asks NIXL what it knows
          of two files (one written here, one absent) with query_memory
          three times, as the C++ program's `query` does with queryMem: on
          a backend the agent never made (NIXL's Python API refuses it
          before NIXL is called), on UCX (NIXL says not supported) and on
          POSIX (a size for the file there, nothing for the absent one).
          It prints each outcome (the exception's class, or the answers).
          Exit 0 when the POSIX query succeeded.
Exit codes: 0 ok, 1 seed or config failure, 2 usage, 3 a NIXL call failed unexpectedly,
4 the notification did not arrive within 10 s.

With HOLD_BEFORE_EXIT=1 the program reads one line from stdin just before it
exits (after everything else), so a test can look at it alive.
"""

import os
import sys
import time

import logging

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

REGION = 64 * 1024

# NIXL's Python logger writes to stdout, each line stamped with the wall
# clock to the second: the same run would print differently a second later.
# Keep every line NIXL logs, and its level, file and line, but not the clock.
for _h in logging.getLogger("nixl").handlers:
    _h.setFormatter(logging.Formatter("NIXL %(levelname)-7s %(filename)s:%(lineno)d %(message)s"))


def finish(code):
    sys.stdout.flush()
    if os.environ.get("HOLD_BEFORE_EXIT") == "1":
        sys.stdin.readline()
    sys.exit(code)


def make_agent(name):
    # No progress thread, as a default nixlAgentConfig in C++; UCX with
    # default parameters.
    return nixl_agent(name, nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))


def regions(bufs):
    """One (address, length, device, meta) DRAM descriptor per buffer."""
    return [(buf.ctypes.data, buf.nbytes, 0, "") for buf in bufs]


def run_ok():
    a = make_agent("A")
    b = make_agent("B")
    bufs_a = [((np.arange(REGION, dtype=np.uint64) + i * 31) % 256).astype(np.uint8) for i in range(4)]
    bufs_b = [np.zeros(REGION, dtype=np.uint8) for _ in range(4)]

    reg_a = a.register_memory(regions(bufs_a), "DRAM")
    print("registered A 4", flush=True)
    reg_b = b.register_memory(regions(bufs_b), "DRAM")
    print("registered B 4", flush=True)

    remote = a.add_remote_agent(b.get_agent_metadata())
    if isinstance(remote, bytes):  # NIXL 1.5.1 returns the name as bytes
        remote = remote.decode()
    print(f"loaded metadata of {remote}", flush=True)

    xa = a.get_xfer_descs([r[:3] for r in regions(bufs_a)], "DRAM")
    xb = b.get_xfer_descs([r[:3] for r in regions(bufs_b)], "DRAM")
    req = a.initialize_xfer("WRITE", xa, xb, "B", b"done")
    state = a.transfer(req)
    if state == "ERR":
        print("postXferReq failed", flush=True)
        finish(3)

    deadline = time.monotonic() + 10
    notifs = {}

    def poll_b():
        for k, v in b.get_new_notifs().items():
            notifs.setdefault(k, []).extend(v)

    while (state := a.check_xfer_state(req)) == "PROC":
        poll_b()
        if time.monotonic() > deadline:
            print("transfer still in progress after 10 s", flush=True)
            finish(4)
    if state != "DONE":
        print(f"getXferStatus failed: {state}", flush=True)
        finish(3)
    print("transfer done", flush=True)

    while b"done" not in notifs.get("A", []):
        poll_b()
        if time.monotonic() > deadline:
            print("no notification after 10 s", flush=True)
            finish(4)
        time.sleep(0.001)
    print("notif done", flush=True)

    same = all(np.array_equal(x, y) for x, y in zip(bufs_a, bufs_b))
    print("data verified" if same else "data MISMATCH", flush=True)

    a.release_xfer_handle(req)
    a.remove_remote_agent("B")
    a.deregister_memory(reg_a)
    b.deregister_memory(reg_b)
    print("deregistered", flush=True)
    del a, b
    return 0 if same else 3


def run_seed():
    a = make_agent("A")
    kv = [np.zeros(REGION, dtype=np.uint8) for _ in range(2)]
    a.register_memory(regions(kv), "DRAM")
    print("registered kv 2", flush=True)
    try:
        a.register_memory([(0, 4096, 0, "")], "DRAM")
    except Exception as e:  # what NIXL raises is the point
        print(f"aux registration failed: {type(e).__name__}", flush=True)
        # A serving process dies here, without cleaning up.
        return 1
    print("aux registration succeeded", flush=True)
    return 0


def run_config():
    try:
        make_agent("A")
    except Exception as e:  # what NIXL raises is the point
        print(f"agent creation failed: {type(e).__name__}: {e}", flush=True)
        return 1
    print("agent created", flush=True)
    return 0


def run_query():
    a = make_agent("A")
    a.create_backend("POSIX")
    path = f"/tmp/nixl_plain_query_{os.getpid()}"
    with open(path, "w") as f:
        f.write("q" * 12345)
    files = [(0, 0, 0, path), (0, 0, 0, path + ".absent")]

    def query(how, backend):
        try:
            answers = a.query_memory(files, backend, "FILE")
        except Exception as e:  # what NIXL raises is the point
            print(f"query_memory {how}: {type(e).__name__}", flush=True)
            return False
        said = "".join(" [absent]" if r is None else f" [size {r.get('size', '?')}, {len(r)} facts]" for r in answers)
        print(f"query_memory {how}: {len(answers)} answers{said}", flush=True)
        return True

    query("on a backend never made", "GDS")
    query("on UCX", "UCX")
    ok = query("on POSIX", "POSIX")
    os.remove(path)
    del a
    return 0 if ok else 3


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else ""
    if scenario == "ok":
        code = run_ok()
    elif scenario == "seed":
        code = run_seed()
    elif scenario == "config":
        code = run_config()
    elif scenario == "query":
        code = run_query()
    else:
        print("usage: nixl_plain.py ok|seed|config|query", flush=True)
        code = 2
    finish(code)


if __name__ == "__main__":
    main()
