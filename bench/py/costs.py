"""What the figures in docs/python.md's targets are made of, each measured
apart (timeit, best of 5), in one process under the instrumentation:

  .deps/venv/bin/python bench/py/costs.py

- one post: the clock read that stamps it, the extension's recording of it
  (`_native.xfer_posted` of a real request), a Python frame of the
  wrapper's shape around nothing;
- one post in place (interleaved medians of single calls, not timeit): a
  bare 4 KiB loopback post, the same followed by a no-op Python call, the
  same followed by the extension's recording of it, and the instrumented
  post. The recording right after NIXL's post costs more than in a loop
  of its own: what it touches is no longer in the caches;
- a list of N descriptors: NIXL building an xfer list from an N×3 array
  (its own copy), the instrumentation's summary of that array (read in
  place), numpy's own column sum of the same array, and NIXL serialising
  the list (`__getstate__`, what a list made otherwise is read from);
- a registration list of N tuples: NIXL serialising the `nixlRegDList` it
  builds from them (what reading NIXL's list instead of the tuples would
  cost);
- `register_memory` of 64 tuples, bare vs instrumented (validation at its
  default), interleaved medians: in this process, and in a child without
  CAP_IPC_LOCK under a finite memlock limit (`setpriv`, when run as root) —
  a non-root pod, where validation must also know what the process holds
  locked (/proc/self/status, read at most every 100 ms).
"""

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import timeit

os.environ.setdefault("NIXL_AGENT_LISTEN", "off")
import numpy as np  # noqa: E402

import nixl_agent_instrument as nai  # noqa: E402

nai.instrument()
from nixl._api import nixl_agent, nixl_agent_config  # noqa: E402
from nixl_agent_instrument import _native  # noqa: E402


def best(f, number):
    return min(timeit.repeat(f, number=number, repeat=5)) / number * 1e9


def in_place(agent, h, bare):
    """A post of `h` (DONE when it returns: loopback, shared memory) with
    what follows it, interleaved, median ns of single calls over bare."""
    post, poll = bare["transfer"], bare["check_xfer_state"]
    ns = time.monotonic_ns

    def nothing(a, b, c, d):
        return None

    def bare_post():
        return post(agent, h)

    def then_nothing():
        s = post(agent, h)
        nothing(h, 0, s, None)
        return s

    def then_recording():
        t0 = ns()
        s = post(agent, h)
        _native.xfer_posted(h, t0, s, None)
        return s

    def instrumented():
        return nixl_agent.transfer(agent, h)

    contenders = [bare_post, then_nothing, then_recording, instrumented]
    times = {f: [] for f in contenders}
    for rep in range(20_001):
        for f in contenders if rep % 2 == 0 else contenders[::-1]:
            t0 = time.perf_counter_ns()
            s = f()
            t1 = time.perf_counter_ns()
            while s == "PROC":
                s = poll(agent, h)
            if rep > 0:
                times[f].append(t1 - t0)
    m = {f: statistics.median(v) for f, v in times.items()}
    base = m[bare_post]
    print(f"One 4 KiB loopback post in place, ns over the bare post ({base:.0f} ns), interleaved medians:")
    print(f"  followed by a no-op Python call: {m[then_nothing] - base:+.0f}")
    print(f"  stamped and followed by the extension's recording: {m[then_recording] - base:+.0f}")
    print(f"  instrumented (the wrapper): {m[instrumented] - base:+.0f}")


def registration(agent, bare, n=64):
    """`register_memory` of `n` tuples bare vs instrumented, interleaved:
    median microseconds of each."""
    buf = np.ones(n * 4096, dtype=np.uint8)
    tuples = [(buf.ctypes.data + i * 4096, 4096, 0, "") for i in range(n)]
    contenders = {
        "bare": (bare["register_memory"], bare["deregister_memory"]),
        "instrumented": (nixl_agent.register_memory, nixl_agent.deregister_memory),
    }
    times = {k: [] for k in contenders}
    for rep in range(301):
        for k in list(contenders) if rep % 2 == 0 else list(contenders)[::-1]:
            reg, dereg = contenders[k]
            t0 = time.perf_counter_ns()
            descs = reg(agent, tuples, "DRAM")
            t1 = time.perf_counter_ns()
            dereg(agent, descs)
            if rep:
                times[k].append(t1 - t0)
    return {k: statistics.median(v) / 1000 for k, v in times.items()}


def registration_line(where, m):
    return f"  {where}: bare {m['bare']:.1f}, instrumented {m['instrumented']:.1f} ({m['instrumented'] / m['bare']:.2f}×)"


def registration_child():
    """The child of `registration_as_a_container`: a finite memlock soft
    limit (the hard one, or 64 MiB under an unlimited one), then the rows."""
    _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    limit = hard if hard != resource.RLIM_INFINITY else 64 << 20
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, hard))
    bare = nixl_agent.__nixl_agent_originals__
    agent = nixl_agent("costs-pod", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    print(registration_line(f"without CAP_IPC_LOCK, memlock {limit >> 10} KiB", registration(agent, bare)))


def registration_as_a_container():
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        print("  (not root, or no setpriv: this process is the container case already)")
        return
    subprocess.run(
        [setpriv, "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", sys.executable, __file__, "--registration-child"],
        check=True,
    )


def main():
    bare = nixl_agent.__nixl_agent_originals__
    agent = nixl_agent("costs", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    buf = np.ones(4 * 4096, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    one = lambda a: agent.get_xfer_descs([(a, 4096, 0)], "DRAM")  # noqa: E731
    h = agent.initialize_xfer("WRITE", one(buf.ctypes.data), one(buf.ctypes.data + 8192), agent.name)
    state = agent.transfer(h)
    while state == "PROC":
        state = agent.check_xfer_state(h)
    ns = time.monotonic_ns
    n = 200_000
    empty = best(lambda: None, n)
    print("One post, ns (a lambda's own call subtracted):")
    print(f"  time.monotonic_ns(): {best(lambda: ns(), n) - empty:.0f}")
    print(f"  _native.xfer_posted of a request DONE: {best(lambda: _native.xfer_posted(h, 123456789, 'DONE', None), n) - empty:.0f}")

    def frame(self, handle, notif_msg=b""):
        try:
            s = "DONE"
        except Exception:
            raise
        return s

    print(f"  a Python frame of the wrapper's shape around nothing: {best(lambda: frame(agent, h), n) - empty:.0f}")
    in_place(agent, h, bare)
    h.release()
    print("A list of N descriptors (N×3 uint64 array), ns a descriptor:")
    print("| N | NIXL builds the list | the summary (in place) | numpy column sum | NIXL serialises the list |")
    print("|---:|---:|---:|---:|---:|")
    for rows in (64, 1024, 4096, 16384):
        arr = np.array([(0x10000 + i * 4096, 4096, 0) for i in range(rows)], dtype=np.uint64)
        made = bare["get_xfer_descs"](agent, arr, "DRAM")
        k = 2000
        build = best(lambda: bare["get_xfer_descs"](agent, arr, "DRAM"), k)
        summary = best(lambda: _native.xfer_descs_made(made, (arr, "DRAM"), None), k)
        column = best(lambda: arr[:, 1].sum(), k)
        state = best(lambda: made.__getstate__(), k)
        print(f"| {rows} | {build / rows:.2f} | {summary / rows:.2f} | {column / rows:.2f} | {state / rows:.2f} |")
    from nixl._bindings import DRAM_SEG, nixlRegDList

    print("A registration list of N tuples, ns a descriptor: NIXL serialising its nixlRegDList")
    for rows in (64, 1024, 4096):
        reg = nixlRegDList(DRAM_SEG, [(0x10000 + i * 4096, 4096, 0, "") for i in range(rows)])
        print(f"  N={rows}: {best(lambda: reg.__getstate__(), 200) / rows:.1f}")
    print("register_memory of 64 tuples, µs (interleaved medians, validation at its default):")
    print(registration_line("this process" + (" (root: CAP_IPC_LOCK)" if os.geteuid() == 0 else ""), registration(agent, bare)))
    sys.stdout.flush()
    registration_as_a_container()


if __name__ == "__main__":
    if sys.argv[1:] == ["--registration-child"]:
        registration_child()
    else:
        main()
