"""One cold first registration in a fresh process, for
bench/py/instrument_bench.py: NIXL's Python API, one UCX agent, 4,096 ×
64 KiB DRAM regions of one buffer as a list of (addr, len, dev, meta)
tuples, made and registered the way SGLang does (agent in ``__init__``, the
list in a method), timed around the first ``register_memory`` call the
process makes. Prints the microseconds.

    python cold.py [group]   (group: inside nai.group("kv"), no call-site read)

Bare or instrumented is the caller's choice (PYTHONPATH with the hook's
bootstrap directory, or not)."""

import logging
import sys
import time

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

N = 4096
REGION = 64 << 10

logging.getLogger("nixl").setLevel(logging.WARNING)


class KVManager:
    """SGLang's shape: the agent made in __init__, the buffers registered by
    a method."""

    def __init__(self):
        # No progress thread: registration does not use it, and its polling
        # only adds noise to a measurement on a small machine.
        self.agent = nixl_agent("cold", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))

    def register_buffer_to_engine(self, buf, explicit):
        kv_addrs = [(buf.ctypes.data + i * REGION, REGION, 0, "") for i in range(N)]
        if explicit:
            import nixl_agent_instrument as nai

            with nai.group("kv", kind="kv"):
                t0 = time.perf_counter_ns()
                self.kv_descs = self.agent.register_memory(kv_addrs, "DRAM")
                t1 = time.perf_counter_ns()
        else:
            t0 = time.perf_counter_ns()
            self.kv_descs = self.agent.register_memory(kv_addrs, "DRAM")
            t1 = time.perf_counter_ns()
        return (t1 - t0) / 1e3


def main():
    mgr = KVManager()
    buf = np.ones(N * REGION, dtype=np.uint8)
    print(mgr.register_buffer_to_engine(buf, "group" in sys.argv[1:]), flush=True)
    mgr.agent.deregister_memory(mgr.kv_descs)


if __name__ == "__main__":
    main()
