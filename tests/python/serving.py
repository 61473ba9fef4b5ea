"""A serving process of our own that calls NIXL's Python API the way SGLang
and vLLM do (same calls, order, mem types and descriptor shapes), for
tests/python.rs. Run it bare or under nixl-agent-instrument; what it prints
is deterministic so that both runs can be compared byte for byte.

    python serving.py sglang [--null-aux] [--corrupt-aux] [--hold]
    python serving.py vllm [--hold]
    python serving.py transfer
    python serving.py deregister [--hold]
    python serving.py spin           (registers, then spins in pure Python)
    python serving.py explicit
    python serving.py badcalls [--hold]
    python serving.py evil [--hold]  (nixl-agent's own lookup fails)
    python serving.py fork [--hold]  (registers, forks, the child registers)
    python serving.py duplicate [--hold]  (one list with a region twice, then
                                           deregistered: NIXL crashes)
    python serving.py dies exception|os_exit|sigkill [--wait]
                            (SGLang's registration with aux at address 0;
                            the failure kills the process: uncaught,
                            os._exit(1) or SIGKILL. --wait: after creating
                            the agent, print AGENT and wait for a line)
"""

import ctypes
import logging
import os
import stat
import sys
import threading
import time
import traceback
import uuid

import numpy as np
from nixl._api import nixl_agent, nixl_agent_config

# NIXL's INFO lines carry timestamps; keep runs comparable.
logging.getLogger("nixl").setLevel(logging.WARNING)

KV_LAYERS = 4
KV_BYTES = 1 << 16
AUX_BYTES = 4096
STATE_BYTES = 8192
# An address no process maps on x86-64 Linux (above the 47-bit user space
# a corrupted pointer often lands in), which NIXL/UCX accept silently.
CORRUPT = 0x7E0000000000


def out(*parts):
    print(*parts, flush=True)


def fd_kind(fd):
    m = os.fstat(fd).st_mode
    return "fifo" if stat.S_ISFIFO(m) else "reg" if stat.S_ISREG(m) else "chr" if stat.S_ISCHR(m) else "other"


def hold():
    """Waits for the test to probe, then to close stdin."""
    out("HOLD")
    sys.stdin.readline()


class KVArgs:
    def __init__(self, corrupt_aux=False, null_aux=False):
        self.kv = [np.zeros(KV_BYTES, dtype=np.uint8) for _ in range(KV_LAYERS)]
        self.aux = np.zeros(AUX_BYTES, dtype=np.uint8)
        self.state = [np.zeros(STATE_BYTES, dtype=np.uint8)]
        self.kv_data_ptrs = [a.ctypes.data for a in self.kv]
        self.kv_data_lens = [a.nbytes for a in self.kv]
        aux_ptr = self.aux.ctypes.data
        if null_aux:
            aux_ptr = 0
        if corrupt_aux:
            aux_ptr = CORRUPT
        self.aux_data_ptrs = [aux_ptr]
        self.aux_data_lens = [AUX_BYTES]
        self.state_data_ptrs = [[a.ctypes.data for a in self.state]]
        self.state_data_lens = [[a.nbytes for a in self.state]]
        self.gpu_id = 0


class NixlKVManager:
    """SGLang's python/sglang/srt/disaggregation/nixl/conn.py shape."""

    def __init__(self, kv_args, kv_mem="DRAM"):
        self.kv_args = kv_args
        self.kv_mem = kv_mem
        # SGLang: an agent with no backends, then create_backend.
        # (SGLang names it uuid4(); a stable uuid keeps NIXL's lines comparable)
        self.agent = nixl_agent(str(uuid.uuid5(uuid.NAMESPACE_DNS, "prefill-0")), nixl_agent_config(backends=[]))
        self.agent.create_backend("UCX")
        self.kv_descs = []

    def register_buffer_to_engine(self):
        for mem_kind in [self.kv_mem]:
            kv_addrs = []
            for kv_data_ptr, kv_data_len in zip(self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens):
                kv_addrs.append((kv_data_ptr, kv_data_len, self.kv_args.gpu_id, ""))
            kv_descs = self.agent.register_memory(kv_addrs, mem_kind)
            if not kv_descs:
                raise Exception(f"NIXL memory registration failed for {mem_kind} kv tensors")
            self.kv_descs.append(kv_descs)
        # (not SGLang's: what NIXL's metadata holds before aux, for the tests)
        self.metadata_before_aux = len(self.agent.get_agent_metadata())
        aux_addrs = []
        for aux_data_ptr, aux_data_len in zip(self.kv_args.aux_data_ptrs, self.kv_args.aux_data_lens):
            aux_addrs.append((aux_data_ptr, aux_data_len, 0, ""))
        self.aux_descs = self.agent.register_memory(aux_addrs, "DRAM")
        if not self.aux_descs:
            raise Exception("NIXL memory registration failed for aux tensors")
        state_addrs = []
        for comp_ptrs, comp_lens in zip(self.kv_args.state_data_ptrs or [], self.kv_args.state_data_lens or []):
            for state_data_ptr, state_data_len in zip(comp_ptrs, comp_lens):
                if state_data_ptr == 0 or state_data_len == 0:
                    continue
                state_addrs.append((state_data_ptr, state_data_len, self.kv_args.gpu_id, ""))
        if state_addrs:
            self.state_descs = self.agent.register_memory(state_addrs, "DRAM")


def describe(e):
    """What a program sees of an exception, minus addresses."""
    tb = traceback.extract_tb(e.__traceback__)
    origin = tb[-1]
    return f"{type(e).__module__}.{type(e).__qualname__} args={e.args!r} origin={os.path.basename(origin.filename)}:{origin.name}"


def sglang(argv):
    args = KVArgs(corrupt_aux="--corrupt-aux" in argv, null_aux="--null-aux" in argv)
    mgr = NixlKVManager(args)
    try:
        mgr.register_buffer_to_engine()
        out("registered", len(mgr.kv_descs), mgr.aux_descs.descCount())
    except Exception as e:
        out("raised", describe(e))
        out("metadata grew by", len(mgr.agent.get_agent_metadata()) - mgr.metadata_before_aux)
    out("continued")
    if "--hold" in argv:
        hold()


class NixlConnectorWorker:
    """vLLM's nixl_connector.py shape: default agent config, get_reg_descs,
    then register_memory with explicit backends."""

    def __init__(self):
        self.nixl_wrapper = nixl_agent(str(uuid.uuid4()), None)
        self.nixl_backends = ["UCX"]

    def register_kv_caches(self, kv_caches):
        caches_data = []
        for cache in kv_caches:
            caches_data.append((cache.ctypes.data, cache.nbytes, 0, ""))
        descs = self.nixl_wrapper.get_reg_descs(caches_data, "DRAM")
        self.nixl_wrapper.register_memory(descs, backends=self.nixl_backends)
        self._registered_descs = [descs]


def vllm(argv):
    caches = [np.zeros(KV_BYTES, dtype=np.uint8) for _ in range(KV_LAYERS * 2)]
    w = NixlConnectorWorker()
    w.register_kv_caches(caches)
    out("registered", len(caches))
    if "--hold" in argv:
        hold()


def transfer(argv):
    size = 1 << 20
    src = np.frombuffer(os.urandom(size), dtype=np.uint8).copy()
    dst = np.zeros(size, dtype=np.uint8)
    a = nixl_agent("sender", nixl_agent_config(backends=["UCX"]))
    b = nixl_agent("receiver", nixl_agent_config(backends=["UCX"]))
    a_reg = a.register_memory([(src.ctypes.data, size, 0, "")], "DRAM")
    b_reg = b.register_memory([(dst.ctypes.data, size, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    local = a.get_xfer_descs([(src.ctypes.data, size, 0)], "DRAM")
    remote = b.get_xfer_descs([(dst.ctypes.data, size, 0)], "DRAM")
    handle = a.initialize_xfer("WRITE", local, remote, "receiver", b"done")
    state = a.transfer(handle)
    deadline = time.time() + 30
    while state != "DONE" and time.time() < deadline:
        state = a.check_xfer_state(handle)
        if state == "ERR":
            break
    a.release_xfer_handle(handle)
    out("transfer", state, "bytes match" if np.array_equal(src, dst) else "bytes DIFFER")
    a.remove_remote_agent("receiver")
    a.deregister_memory(a_reg)
    b.deregister_memory(b_reg)


def deregister(argv):
    mgr = NixlKVManager(KVArgs())
    mgr.register_buffer_to_engine()
    out("registered")
    if "--hold" in argv:
        hold()
    for d in mgr.kv_descs:
        mgr.agent.deregister_memory(d)
    mgr.agent.deregister_memory(mgr.aux_descs)
    out("deregistered")
    if "--hold" in argv:
        hold()


def spin(argv):
    mgr = NixlKVManager(KVArgs())
    mgr.register_buffer_to_engine()
    stop = threading.Event()

    def busy():
        x = 0
        while not stop.is_set():
            x += 1

    # A thread that wants the GIL now waits up to 250 ms for it: anything
    # that needed the GIL to answer a probe would show it.
    sys.setswitchinterval(0.25)
    threads = [threading.Thread(target=busy)]
    for t in threads:
        t.start()
    hold()
    stop.set()
    for t in threads:
        t.join()


def explicit(argv):
    import nixl_agent_instrument as nai

    nai.instrument()
    agent = nixl_agent("explicit", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(AUX_BYTES, dtype=np.uint8)
    with nai.group("scratch_pad", kind="aux"):
        agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    metrics = nai.metrics()
    line = [l for l in metrics.splitlines() if l.startswith("nixl_agent_registered_bytes{") and "scratch_pad" in l]
    out("explicit", line[0] if line else "missing")
    out("address", nai.address() is not None)
    out("http", nai.status()["http"])


def badcalls(argv):
    """Calls NIXL's Python API rejects before NIXL itself sees them."""
    agent = nixl_agent("badcalls", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(AUX_BYTES, dtype=np.uint8)
    for call in (
        lambda: agent.register_memory([], "DRAM"),
        lambda: agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "HBM"),
        lambda: agent.register_memory(),
    ):
        try:
            call()
            out("accepted")
        except Exception as e:
            out("raised", describe(e))
    if "--hold" in argv:
        hold()


def evil(argv):
    """A failure inside nixl-agent's wrapping (its call-site lookup made to
    raise, as a bug there would): the call must go ahead untouched."""
    from nixl_agent_instrument import _site

    def broken(*args, **kwargs):
        raise RuntimeError("the call-site lookup cannot be printed")

    _site.facts = broken
    agent = nixl_agent("evil", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(AUX_BYTES, dtype=np.uint8)
    for _ in range(3):
        d = agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
        agent.deregister_memory(d)
    out("evil caller registered", d.descCount())
    if "--hold" in argv:
        hold()


def recorded_groups():
    """What this process's own recording holds, when instrumented."""
    import nixl_agent_instrument as nai

    st = nai.status()
    if st is None:
        return None
    return sorted((g["name"], g["descriptors"]) for g in st["groups"] if g["descriptors"])


def forked(argv):
    """Registers, forks; the child creates its own agent and registers.
    ``--orphan``: the parent exits at once, the child lives on until its
    stdin closes."""
    mgr = NixlKVManager(KVArgs())
    mgr.register_buffer_to_engine()
    if "--orphan" in argv:
        # The test looks at the parent's socket, then lets it fork.
        out("parent listening")
        sys.stdin.readline()
    pid = os.fork()
    if pid == 0:
        child = nixl_agent("child", nixl_agent_config(backends=["UCX"]))
        buf = np.zeros(AUX_BYTES, dtype=np.uint8)
        aux_addrs = [(buf.ctypes.data, buf.nbytes, 0, "")]
        child.register_memory(aux_addrs, "DRAM")
        out("child registered")
        out("child recorded", recorded_groups())
        if "--orphan" in argv:
            out("child pid", os.getpid())
            sys.stdin.read()
        # os._exit (as multiprocessing's fork children end) skips atexit:
        # the rank is retired first, or it would count as one that died.
        import nixl_agent_instrument as nai

        nai.shutdown()
        os._exit(0)
    if "--orphan" in argv:
        out("parent exits")
        return
    _, status = os.waitpid(pid, 0)
    out("child exit", os.waitstatus_to_exitcode(status))
    if "--hold" in argv:
        hold()


def dropped(argv):
    """SGLang's shape, then the agent goes away (NIXL releases its memory)."""
    import gc

    mgr = NixlKVManager(KVArgs())
    mgr.register_buffer_to_engine()
    out("registered")
    if "--hold" in argv:
        hold()
    del mgr
    gc.collect()
    out("dropped")
    if "--hold" in argv:
        hold()


def partial(argv):
    """Calls A and C succeed, then B fails, then A is deregistered."""
    agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=["UCX"]))
    bufs = [np.zeros(4096, dtype=np.uint8) for _ in range(2)]
    kv_addrs = [(bufs[0].ctypes.data, 4096, 0, "")]
    kv_a = agent.register_memory(kv_addrs, "DRAM")
    kv_addrs = [(bufs[1].ctypes.data, 4096, 0, "")]
    kv_c = agent.register_memory(kv_addrs, "DRAM")
    kv_addrs = [(0, 4096, 0, "")]
    try:
        agent.register_memory(kv_addrs, "DRAM")
        out("B registered")
    except Exception as e:
        out("B failed", type(e).__name__)
    agent.deregister_memory(kv_a)
    out("A deregistered")
    if "--hold" in argv:
        hold()
    agent.deregister_memory(kv_c)


def interrupted(argv):
    """A signal handler's exception (KeyboardInterrupt, SystemExit) landing
    while the instrumentation works: at its start with the first agent, or
    while the first call site is read. The program must see it, as it would
    have from the bare call, and NIXL's call must not go ahead."""
    import nixl_agent_instrument._hook as hook

    where, which = argv[0], argv[1]
    exc = {"kbd": KeyboardInterrupt, "exit": SystemExit}[which]

    def signalled(*args, **kwargs):
        raise exc("from a signal handler")

    if where == "start":
        hook._native.start = signalled
        try:
            nixl_agent("interrupted", nixl_agent_config(backends=["UCX"]))
            out("no exception")
        except BaseException as e:
            out("caught", type(e).__name__)
        return
    agent = nixl_agent("interrupted", nixl_agent_config(backends=["UCX"]))
    hook._site.facts = signalled
    buf = np.zeros(AUX_BYTES, dtype=np.uint8)
    before = len(agent.get_agent_metadata())
    try:
        agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
        out("no exception")
    except BaseException as e:
        out("caught", type(e).__name__)
    out("metadata grew", len(agent.get_agent_metadata()) > before)


def groups(argv):
    """One nai.group instance entered by interleaving threads and tasks:
    each exit resets its own entry's token, nothing leaks into the block."""
    import asyncio
    import threading

    import nixl_agent_instrument as nai
    from nixl_agent_instrument import _site

    g = nai.group("scratch_pad", kind="aux")
    errors = []
    gate = threading.Barrier(2)

    def thread_body():
        try:
            with g:
                gate.wait(timeout=5)  # both inside at once
                gate.wait(timeout=5)  # and out in the other order
        except BaseException as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=thread_body) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def task_body(delay):
        with g:
            await asyncio.sleep(delay)
            if _site.explicit.get() != ("scratch_pad", "aux"):
                errors.append("wrong group inside a task")

    async def tasks():
        await asyncio.gather(task_body(0.02), task_body(0.01), task_body(0.0))

    asyncio.run(tasks())
    with g:
        with g:
            pass
        inner_ok = _site.explicit.get() == ("scratch_pad", "aux")
    out("groups", "errors" if errors else "clean", errors, inner_ok, _site.explicit.get())


def hung(argv):
    """A deregistration that outlives a short deadline: 65,536 regions in one
    list (NIXL removes them one by one from a sorted list)."""
    n = int(argv[0]) if argv and argv[0].isdigit() else 65536
    agent = nixl_agent(str(uuid.uuid4()), nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(n * 4096, dtype=np.uint8)
    base = buf.ctypes.data
    kv_addrs = [(base + i * 4096, 4096, 0, "") for i in range(n)]
    kv_descs = agent.register_memory(kv_addrs, "DRAM")
    out("registered", n)
    if "--hold" in argv:
        hold()
    t0 = time.time()
    agent.deregister_memory(kv_descs)
    out("deregistered in", round(time.time() - t0, 1))
    if "--hold" in argv:
        hold()


def wrapped(argv):
    """SGLang's shape with the framework loaded and no NIXL_AGENT_EXPECT, and
    another wrapper (a tracer) installed on nixl_agent.register_memory after
    the instrumentation: its frame sits between SGLang's and ours."""
    import functools
    import types

    sys.modules.setdefault("sglang", types.ModuleType("sglang"))
    original = nixl_agent.register_memory

    @functools.wraps(original)
    def traced(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    nixl_agent.register_memory = traced
    mgr = NixlKVManager(KVArgs())
    mgr.register_buffer_to_engine()
    out("registered")
    if "--hold" in argv:
        hold()


def duplicate(argv):
    """One aux list that holds the same 4 KiB region twice: NIXL 1.5 (UCX)
    accepts it, and deregistering it kills the process with SIGSEGV."""
    agent = nixl_agent("duplicate", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(AUX_BYTES, dtype=np.uint8)
    aux_addrs = [(buf.ctypes.data, buf.nbytes, 0, ""), (buf.ctypes.data, buf.nbytes, 0, "")]
    try:
        descs = agent.register_memory(aux_addrs, "DRAM")
    except Exception as e:
        out("raised", describe(e))
        return
    out("registered", descs.descCount())
    if "--hold" in argv:
        hold()
    agent.deregister_memory(descs)
    out("deregistered")


def _tracer_on_register_memory():
    """Another wrapper on nixl_agent.register_memory, installed after the
    instrumentation (a tracer, a decorator, a framework shim)."""
    import functools

    original = nixl_agent.register_memory

    @functools.wraps(original)
    def traced(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    nixl_agent.register_memory = traced


class RenamedKVManager:
    """SGLang's NixlKVManager with its locals renamed (as a refactor
    upstream would): no buffer word in any variable the call passes."""

    def __init__(self, kv_args):
        self.kv_args = kv_args
        self.agent = nixl_agent(str(uuid.uuid5(uuid.NAMESPACE_DNS, "prefill-r")), nixl_agent_config(backends=[]))
        self.agent.create_backend("UCX")

    def register_buffer_to_engine(self):
        entries = [(p, n, self.kv_args.gpu_id, "") for p, n in zip(self.kv_args.kv_data_ptrs, self.kv_args.kv_data_lens)]
        self.first = self.agent.register_memory(entries, "DRAM")
        entries2 = [(p, n, 0, "") for p, n in zip(self.kv_args.aux_data_ptrs, self.kv_args.aux_data_lens)]
        self.second = self.agent.register_memory(entries2, "DRAM")



class RenamedConnectorWorker:
    """vLLM's NixlConnectorWorker with renamed locals; like vLLM it keeps
    the base addresses in self.kv_caches_base_addr before registering."""

    def __init__(self):
        self.nixl_wrapper = nixl_agent(str(uuid.uuid4()), None)
        self.nixl_backends = ["UCX"]
        self.engine_id = "e0"
        self.tp_rank = 0
        self.kv_caches_base_addr = {}

    def register_kv_caches(self, kv_caches):
        rows = [(c.ctypes.data, c.nbytes, 0, "") for c in kv_caches]
        self.kv_caches_base_addr[self.engine_id] = {self.tp_rank: [c.ctypes.data for c in kv_caches]}
        handle = self.nixl_wrapper.get_reg_descs(rows, "DRAM")
        self.nixl_wrapper.register_memory(handle, backends=self.nixl_backends)



def renamed(argv):
    """SGLang- or vLLM-shaped code with renamed locals, the framework
    loaded, no NIXL_AGENT_EXPECT; ``--wrapped``: with another wrapper on
    nixl_agent.register_memory."""
    import types

    framework = "vllm" if "--vllm" in argv else "sglang"
    sys.modules.setdefault(framework, types.ModuleType(framework))
    if "--wrapped" in argv:
        _tracer_on_register_memory()
    if framework == "sglang":
        mgr = RenamedKVManager(KVArgs())
        mgr.register_buffer_to_engine()
    else:
        caches = [np.zeros(KV_BYTES, dtype=np.uint8) for _ in range(KV_LAYERS)]
        w = RenamedConnectorWorker()
        w.register_kv_caches(caches)
        mgr = (w, caches)
    out("registered")
    if "--hold" in argv:
        hold()


def bare_agent(argv):
    """No framework: an agent, then (after the first HOLD) one registration."""
    agent = nixl_agent("plain", nixl_agent_config(backends=["UCX"]))
    hold()
    buf = np.zeros(AUX_BYTES, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    out("registered")
    hold()


def qualname(argv):
    """The qualified name of a method as Python 3.9/3.10 give it: their code
    objects lack co_qualname (stood in for here), the class is found from
    the frame's self."""
    from nixl_agent_instrument import _site

    class OldCode:
        def __init__(self, code):
            for a in ("co_name", "co_argcount", "co_varnames", "co_filename", "co_firstlineno"):
                setattr(self, a, getattr(code, a))

    class Frame:
        def __init__(self, code, local):
            self.f_code, self.f_locals = OldCode(code), local

    class Subclass(NixlKVManager):
        pass

    method = NixlKVManager.register_buffer_to_engine.__code__
    out("qualname", _site._qualname(Frame(method, {"self": Subclass.__new__(Subclass)})))
    out("qualname function", _site._qualname(Frame(describe.__code__, {})))


class NoList(np.ndarray):
    """An array that says so when something turns it into Python objects."""

    def tolist(self):
        out("tolist called")
        return np.ndarray.tolist(self)


def arrays(argv):
    """N×3 descriptor arrays, as NIXL's binding takes them (uint64, C order),
    then shapes NIXL refuses: what each call returns or raises."""
    # NIXL logs its refusals with a timestamp: keep the runs comparable.
    logging.getLogger("nixl").setLevel(logging.CRITICAL)
    agent = nixl_agent("arrays", nixl_agent_config(backends=["UCX"]))
    buf = np.zeros(8 * AUX_BYTES, dtype=np.uint8)
    rows = np.array([(buf.ctypes.data + i * AUX_BYTES, AUX_BYTES, 0) for i in range(8)], dtype=np.uint64)
    kv_rows = rows.view(NoList)
    descs = agent.register_memory(kv_rows, "DRAM")
    out("registered", descs.descCount())
    for label, bad in (
        ("1-D", np.arange(6, dtype=np.uint64).view(NoList)),
        ("float64", rows.astype(np.float64).view(NoList)),
        ("Fortran order", np.asfortranarray(rows).view(NoList)),
    ):
        try:
            agent.register_memory(bad, "DRAM")
            out(label, "registered")
        except Exception as e:
            out(label, "raised", type(e).__name__)
    if "--hold" in argv:
        hold()


def dies(argv):
    """The seed failure, and the process dying of it as serving processes
    do: SGLang's scheduler raises, multiprocessing children end with
    os._exit, a supervisor may kill."""
    how = argv[0]
    args = KVArgs(null_aux=True)
    mgr = NixlKVManager(args)
    out("AGENT")
    if "--wait" in argv:
        sys.stdin.readline()
    try:
        mgr.register_buffer_to_engine()
    except Exception as e:
        out("raised", type(e).__name__)
        if how == "os_exit":
            os._exit(1)
        if how == "sigkill":
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        raise
    out("registered: the failure did not happen")


def main():
    mode = sys.argv[1]
    out("fds", fd_kind(1), fd_kind(2), sys.stdout.isatty(), sys.stderr.isatty())
    sys.stderr.write("program stderr line\n")
    sys.stderr.flush()
    {"sglang": sglang, "vllm": vllm, "badcalls": badcalls, "evil": evil, "fork": forked, "transfer": transfer, "deregister": deregister, "spin": spin, "explicit": explicit, "dropped": dropped, "partial": partial, "interrupted": interrupted, "groups": groups, "hung": hung, "wrapped": wrapped, "duplicate": duplicate, "renamed": renamed, "plain": bare_agent, "qualname": qualname, "arrays": arrays, "dies": dies}[
        mode
    ](sys.argv[2:])


if __name__ == "__main__":
    main()
