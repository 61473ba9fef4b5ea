"""Transfer requests over every shape of descriptor list NIXL's Python API
takes, each read in bulk by the instrumentation (one call whatever its
length): lists `get_xfer_descs` made from an N×3 uint64 array, an int64
array and a list of 3-tuples (summarised when made), a `nixlXferDList`
built directly (read from its serialised form), a list handed back by
`get_xfer_descs` as it came, and `prep_xfer_dlist` of such a list, of an
N×3 array and of an N×5 strided array of runs.

One agent, loopback (UCX within the process), 4,096 descriptors of 1 KiB
(or a few): each request is posted and polled to DONE, the destination
compared with the source byte for byte (NIXL's own proof that it moved what
the list says), and the WRITE bytes the recording counted (``nai.metrics()``)
compared with what the list holds; a list that counts its items read one
at a time is read none. Prints one line per shape; run bare it
prints the same, with the recorded figure "bare".
"""

import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config
from nixl._bindings import DRAM_SEG, nixlXferDList

try:
    import nixl_agent_instrument as nai
except ImportError:
    nai = None

N = 4096
DESC = 1024


class Counting(nixlXferDList):
    """A list that counts the descriptors read from it one at a time: a
    request is read in bulk, never item by item."""

    items = 0

    def __getitem__(self, i):
        Counting.items += 1
        return super().__getitem__(i)


def write_bytes():
    """The recorded WRITE bytes, or None when nothing records (bare)."""
    text = nai.metrics() if nai is not None else None
    if not text:
        return None
    for line in text.splitlines():
        if line.startswith('nixl_agent_transfer_bytes_total{op="write"}'):
            return int(float(line.split()[-1]))
    return 0


def poll(agent, h, limit=60.0):
    """Posts ``h`` and polls it to its end, for at most ``limit`` seconds."""
    state, deadline = agent.transfer(h), time.monotonic() + limit
    while state == "PROC":
        assert time.monotonic() < deadline, f"the transfer was still in flight after {limit} s"
        state = agent.check_xfer_state(h)
    return state


def main():
    agent = nixl_agent("lists", nixl_agent_config(backends=["UCX"]))
    src = np.random.default_rng(7).integers(0, 255, N * DESC, dtype=np.uint8)
    dst = np.zeros(N * DESC, dtype=np.uint8)
    agent.register_memory([(src.ctypes.data, src.nbytes, 0, ""), (dst.ctypes.data, dst.nbytes, 0, "")], "DRAM")

    def rows(base, n, dtype=np.uint64):
        return np.array([(base + i * DESC, DESC, 0) for i in range(n)], dtype=dtype)

    shapes = {
        "array_uint64": lambda b, n: agent.get_xfer_descs(rows(b, n), "DRAM"),
        "array_int64": lambda b, n: agent.get_xfer_descs(rows(b, n, np.int64), "DRAM"),
        "tuples": lambda b, n: agent.get_xfer_descs([tuple(int(x) for x in r) for r in rows(b, n)], "DRAM"),
        "dlist_built": lambda b, n: Counting(DRAM_SEG, rows(b, n)),
        "dlist_passed_through": lambda b, n: agent.get_xfer_descs(agent.get_xfer_descs(rows(b, n), "DRAM")),
        "one_descriptor": lambda b, n: agent.get_xfer_descs(rows(b, 1), "DRAM"),
    }
    for name, make in shapes.items():
        n = 1 if name == "one_descriptor" else N
        dst[:] = 0
        before = write_bytes()
        local, remote = make(src.ctypes.data, n), make(dst.ctypes.data, n)
        h = agent.initialize_xfer("WRITE", local, remote, agent.name)
        state = poll(agent, h)
        h.release()
        moved = bool((dst[: n * DESC] == src[: n * DESC]).all())
        after = write_bytes()
        recorded = "bare" if before is None else after - before
        print(f"{name}: {state} moved={moved} items_read={Counting.items} expected={n * DESC} recorded={recorded}")

    # Prepared lists (of a list NIXL made, of an N×3 array, of an N×5
    # strided array of runs), then a request by index: every other one.
    strided = lambda b: np.array([(b, DESC, 0, DESC, N)], dtype=np.uint64)  # noqa: E731
    prepared = {
        "prepped_dlist": lambda b: agent.get_xfer_descs(rows(b, N), "DRAM"),
        "prepped_array": lambda b: rows(b, N),
        "prepped_strided": strided,
    }
    for name, make in prepared.items():
        local = agent.prep_xfer_dlist("NIXL_INIT_AGENT", make(src.ctypes.data), "DRAM")
        remote = agent.prep_xfer_dlist(agent.name, make(dst.ctypes.data), "DRAM")
        dst[:] = 0
        before = write_bytes()
        idx = np.arange(0, N, 2, dtype=np.int64)
        h = agent.make_prepped_xfer("WRITE", local, idx, remote, idx)
        state = poll(agent, h)
        h.release()
        moved = bool(all((dst[i * DESC : (i + 1) * DESC] == src[i * DESC : (i + 1) * DESC]).all() for i in idx))
        after = write_bytes()
        recorded = "bare" if before is None else after - before
        print(f"{name}: {state} moved={moved} expected={len(idx) * DESC} recorded={recorded}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
