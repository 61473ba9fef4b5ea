"""A program of our own for tests/python_host.rs: the situations where the
instrumentation lives inside the host program's own machinery (at-fork
hooks, a start that fails, a signal handler's exception on the data path,
an agent made with NIXL's own config). NIXL is imported only inside each
mode, so a mode can arrange the interpreter first (an at-fork hook
registered before NIXL is imported).

    python host.py backends [--hold]     (an agent whose backends NIXL's
                                          config creates in __init__)
    python host.py fork-finalizer        (a NIXL agent collected by an
                                          at-fork hook while forking)
    python host.py failed-start          (the first start fails; later
                                          agents go ahead)
    python host.py interrupted-transfer  (a KeyboardInterrupt landing while
                                          the transfer wrapper reads)
    python host.py wrapped               (the methods the instrumentation
                                          wrapped, as the class holds them)
    python host.py crossings             (the calls into the extension each
                                          registration makes, counted)
"""

import gc
import os
import sys
import time


def out(*parts):
    print(*parts, flush=True)


def hold():
    out("HOLD")
    sys.stdin.readline()


def backends(argv):
    """NIXL's own config names the backend: UCX is created inside
    nixl_agent.__init__ (the create_backend call the wrapper sees runs
    before __init__ returns)."""
    import numpy as np
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent("configured", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(4096, dtype=np.uint8)

    def setup_buffers():
        return agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")

    descs = setup_buffers()
    out("registered", descs is not None)
    if "--hold" in argv:
        hold()
    agent.deregister_memory(descs)


class Holder:
    """A reference cycle holding a NIXL agent: collected only by the
    cycle collector."""

    def __init__(self, agent):
        self.agent = agent
        self.me = self


def fork_finalizer(argv):
    # Registered before NIXL is imported: it runs after nixl-agent's own
    # before-fork hook (Python runs them in reverse order of registration).
    os.register_at_fork(before=gc.collect)
    gc.disable()
    from nixl._api import nixl_agent, nixl_agent_config

    Holder(nixl_agent("cycle", nixl_agent_config(backends=["UCX"])))
    # Only the cycle collector frees it: inside the at-fork hook below, its
    # finalizer (the agent's release in the recording) runs in the forking
    # thread.
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    out("child exit", os.waitstatus_to_exitcode(status))
    # The parent still records: a second agent registers.
    import numpy as np

    agent = nixl_agent("after-fork", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(4096, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    out("registered after fork")


def failed_start(argv):
    """The instrumentation's start fails for real: the OS refuses the
    threads it starts (the address space is capped for the duration of the
    start only). The program's agents are made regardless."""
    import resource

    import nixl_agent_instrument._hook as hook
    from nixl._api import nixl_agent, nixl_agent_config

    start = hook._native.start

    def capped(*args, **kwargs):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        size = pages * os.sysconf("SC_PAGE_SIZE")
        # Room for small allocations, none for a thread's stack.
        resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 20), hard))
        try:
            return start(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))

    hook._native.start = capped
    nixl_agent("first", nixl_agent_config(backends=["UCX"]))
    out("first agent made")
    hook._native.start = start
    import numpy as np

    agent = nixl_agent("second", nixl_agent_config(backends=["UCX"]))
    out("second agent made")
    buf = np.zeros(4096, dtype=np.uint8)
    descs = agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    agent.deregister_memory(descs)
    out("registered", descs is not None)
    import nixl_agent_instrument as nai

    out("status", nai.status() is not None)


class SignalledHandle:
    """A transfer handle whose number is read once by NIXL; a signal
    handler's KeyboardInterrupt lands at the next read (the wrapper's)."""

    def __init__(self, handle):
        self._real = handle
        self._reads = 0

    @property
    def _handle(self):
        self._reads += 1
        if self._reads > 1:
            raise KeyboardInterrupt("from a signal handler")
        return self._real._handle


def interrupted_transfer(argv):
    import numpy as np
    from nixl._api import nixl_agent, nixl_agent_config

    size = 4096
    src = np.ones(size, dtype=np.uint8)
    dst = np.zeros(size, dtype=np.uint8)
    a = nixl_agent("sender", nixl_agent_config(backends=["UCX"]))
    b = nixl_agent("receiver", nixl_agent_config(backends=["UCX"]))
    a_reg = a.register_memory([(src.ctypes.data, size, 0, "")], "DRAM")
    b_reg = b.register_memory([(dst.ctypes.data, size, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    local = a.get_xfer_descs([(src.ctypes.data, size, 0)], "DRAM")
    remote = b.get_xfer_descs([(dst.ctypes.data, size, 0)], "DRAM")
    handle = a.initialize_xfer("WRITE", local, remote, "receiver", b"done")
    try:
        a.transfer(SignalledHandle(handle))
        out("transfer: no exception")
    except KeyboardInterrupt:
        out("transfer: KeyboardInterrupt")
    extra = np.zeros(size, dtype=np.uint8)
    try:
        descs = a.register_memory([(extra.ctypes.data, size, 0, "")], "DRAM")
        out("register_memory: registered")
        a.deregister_memory(descs)
    except KeyboardInterrupt:
        out("register_memory: KeyboardInterrupt")
    state = "PROC"
    deadline = time.monotonic() + 60
    while state == "PROC":
        if time.monotonic() > deadline:
            out("transfer: still PROC after 60 s")
            sys.exit(3)
        state = a.check_xfer_state(handle)
    a.release_xfer_handle(handle)
    a.remove_remote_agent("receiver")
    a.deregister_memory(a_reg)
    b.deregister_memory(b_reg)
    out("done", state)


def wrapped(argv):
    import nixl._api as api

    originals = getattr(api.nixl_agent, "__nixl_agent_originals__", {})
    out("nixl_agent", " ".join(sorted(originals)))
    for name in ("nixl_xfer_handle", "nixl_prepped_dlist_handle"):
        cls = getattr(api, name)
        out(name, getattr(cls, "__nixl_agent_instrumented__", False))


def crossings(argv):
    """Every function of the extension replaced by a counting shim (the
    wrappers look them up on the module at each call), then registrations
    from a call site named by the framework's data, one named by its
    variable (each cold, then warm) and an explicit block: the calls into
    the extension each makes, by name."""
    import collections

    import numpy as np

    import nixl_agent_instrument as nai
    from nixl_agent_instrument import _native

    counts = collections.Counter()
    for name in dir(_native):
        fn = getattr(_native, name)
        if callable(fn) and not isinstance(fn, type) and not name.startswith("_"):

            def shim(*a, __fn=fn, __name=name, **k):
                counts[__name] += 1
                return __fn(*a, **k)

            setattr(_native, name, shim)

    from nixl._api import nixl_agent, nixl_agent_config

    class KVArgs:
        def __init__(self):
            self.kv = np.zeros(4096, dtype=np.uint8)
            self.kv_data_ptrs = [self.kv.ctypes.data]

    class Manager:
        def __init__(self):
            self.kv_args = KVArgs()
            self.aux = np.zeros(4096, dtype=np.uint8)
            self.agent = nixl_agent("crossings", nixl_agent_config(backends=["UCX"]))

        def register_buffer_to_engine(self):
            # Named by kv_args.kv_data_ptrs, whatever this local is called.
            buffers = [(self.kv_args.kv.ctypes.data, 4096, 0, "")]
            return self.agent.register_memory(buffers, "DRAM")

        def register_aux(self):
            aux_addrs = [(self.aux.ctypes.data, 4096, 0, "")]
            return self.agent.register_memory(aux_addrs, "DRAM")

    m = Manager()

    def measure(what, register):
        counts.clear()
        descs = register()
        reg = sorted(counts.items())
        counts.clear()
        m.agent.deregister_memory(descs)
        out("crossings", what, "register", reg, "deregister", sorted(counts.items()))

    for temperature in ("cold", "warm"):
        measure(f"data-{temperature}", m.register_buffer_to_engine)
        measure(f"variable-{temperature}", m.register_aux)
    counts.clear()
    block = nai.group("scratch_pad")
    out("crossings group", sorted(counts.items()))

    def explicit():
        with block:
            return m.register_aux()

    measure("explicit", explicit)
    out("groups", sorted((g["name"], g["kind"]) for g in nai.status()["groups"]))


def main():
    mode = sys.argv[1]
    {
        "backends": backends,
        "fork-finalizer": fork_finalizer,
        "failed-start": failed_start,
        "interrupted-transfer": interrupted_transfer,
        "wrapped": wrapped,
        "crossings": crossings,
    }[mode](sys.argv[2:])


if __name__ == "__main__":
    main()
