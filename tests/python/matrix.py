"""One cell of the truth matrix (tests/matrix.rs) for the Python front-end:
a serving process that calls NIXL's Python API as SGLang does, in one
scenario. Run under nixl-agent-instrument; the test reads what it prints
and tells it, one line on stdin at a time, when to take the next step.

    python matrix.py SCENARIO

healthy    kv, aux, state registered (SGLang's NixlKVManager)
seed       aux at address 0: "NIXL memory registration failed for aux tensors"
deadline   kv registered; on "call", aux's register_memory is held inside
           NIXL's own Python code (it indexes the list it was given) until
           the test says "release": a call past NIXL_AGENT_CALL_TIMEOUT
dropped    registered; on "drop" the NIXL agent goes away (del + gc)
backends   NIXL_AGENT_BACKEND=POSIX in the environment; the agent's UCX is
           created inside nixl_agent.__init__ (nixl_agent_config(backends=
           ["UCX"])), and a second agent registers on a POSIX backend
dereg      registered; then a deregistration NIXL refuses (a list with a
           region it never registered), caught as a program would

Prints "steady" when the scenario's state is reached (after the last step),
and ends when stdin closes.
"""

import gc
import os
import sys
import threading
import types

# The framework is loaded: its default readiness groups (kv, aux) apply.
sys.modules.setdefault("sglang", types.ModuleType("sglang"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import logging  # noqa: E402

import numpy as np  # noqa: E402
import serving  # noqa: E402
from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402

logging.getLogger("nixl").setLevel(logging.CRITICAL)


def out(*parts):
    print(*parts, flush=True)


def step(expect):
    line = sys.stdin.readline().strip()
    assert line == expect, f"told {line!r}, expected {expect!r}"


class Gate(list):
    """A list of registration tuples whose first item NIXL's Python API
    cannot read until the gate opens: its register_memory (which indexes
    the list to tell its kind) runs as long as the test wants."""

    opened = threading.Event()

    def __getitem__(self, i):
        if i == 0:
            Gate.opened.wait()
        return super().__getitem__(i)


class ConfigCreated(serving.NixlKVManager):
    """SGLang's manager with UCX created by NIXL inside __init__."""

    def __init__(self, kv_args):
        self.kv_args = kv_args
        self.kv_mem = "DRAM"
        self.agent = nixl_agent("config-created", nixl_agent_config(backends=["UCX"]))
        self.kv_descs = []


def posix_scratch():
    agent = nixl_agent("posix", nixl_agent_config(backends=[]))
    agent.create_backend("POSIX")
    buf = np.zeros(serving.AUX_BYTES, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM", backends=["POSIX"])
    return agent, buf


def main():
    scenario = sys.argv[1]
    keep = []
    if scenario == "healthy":
        mgr = serving.NixlKVManager(serving.KVArgs())
        mgr.register_buffer_to_engine()
    elif scenario == "seed":
        mgr = serving.NixlKVManager(serving.KVArgs(null_aux=True))
        try:
            mgr.register_buffer_to_engine()
            out("registered: the seed did not fail")
        except Exception as e:
            out("raised", e)
    elif scenario == "deadline":
        args = serving.KVArgs()
        mgr = serving.NixlKVManager(args)
        kv = [(p, n, 0, "") for p, n in zip(args.kv_data_ptrs, args.kv_data_lens)]
        mgr.kv_descs.append(mgr.agent.register_memory(kv, "DRAM"))
        aux = Gate([(args.aux_data_ptrs[0], args.aux_data_lens[0], 0, "")])
        done = threading.Event()

        def hold_aux():
            mgr.aux_descs = mgr.agent.register_memory(aux, "DRAM")
            done.set()

        # SGLang's own thread registers; this one waits for the test.
        out("ready to call")
        step("call")
        t = threading.Thread(target=hold_aux)
        t.start()
        out("calling")
        step("release")
        Gate.opened.set()
        t.join(60)
        assert done.is_set(), "the held registration did not return"
    elif scenario == "dropped":
        mgr = serving.NixlKVManager(serving.KVArgs())
        mgr.register_buffer_to_engine()
        out("registered")
        step("drop")
        del mgr
        gc.collect()
    elif scenario == "backends":
        mgr = ConfigCreated(serving.KVArgs())
        mgr.register_buffer_to_engine()
        keep.append(posix_scratch())
    elif scenario == "dereg":
        args = serving.KVArgs()
        mgr = serving.NixlKVManager(args)
        mgr.register_buffer_to_engine()
        never = np.zeros(serving.AUX_BYTES, dtype=np.uint8)
        bogus = mgr.agent.get_reg_descs(
            [(args.kv_data_ptrs[0], args.kv_data_lens[0], 0, ""), (never.ctypes.data, never.nbytes, 0, "")], "DRAM"
        )
        try:
            mgr.agent.deregister_memory(bogus)
            out("deregistered: NIXL accepted it")
        except Exception as e:
            out("refused", type(e).__name__)
    else:
        raise SystemExit(f"unknown scenario {scenario}")
    out("steady")
    sys.stdin.read()


if __name__ == "__main__":
    main()
