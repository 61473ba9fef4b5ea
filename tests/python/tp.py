"""Tensor parallelism the way SGLang starts it: one parent, N scheduler
processes started with multiprocessing's ``spawn`` method, one environment
for all (no per-process rank variable). Each worker creates its own NIXL
agent (SGLang's NixlKVManager shape, kv_args carrying its engine rank) and
registers kv + aux, then waits. For tests/python.rs and tests/pod.rs.

    python tp.py N [--null-aux K]

Prints ``rank <i> pid <pid> <registered|raised ...>`` per worker, then
``ranks up``; closing stdin ends every worker and the parent.
"""

import multiprocessing as mp
import os
import sys
import types


def worker(rank, null_aux, queue, stop):
    # The framework is loaded (its default readiness groups: kv + aux).
    sys.modules.setdefault("sglang", types.ModuleType("sglang"))
    import logging

    logging.getLogger("nixl").setLevel(logging.CRITICAL)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import serving

    args = serving.KVArgs(null_aux=null_aux)
    args.engine_rank = rank
    mgr = serving.NixlKVManager(args)
    try:
        mgr.register_buffer_to_engine()
        queue.put((rank, os.getpid(), "registered"))
    except Exception as e:
        queue.put((rank, os.getpid(), f"raised {type(e).__name__}"))
    stop.wait()


def main():
    n = int(sys.argv[1])
    null_aux = int(sys.argv[sys.argv.index("--null-aux") + 1]) if "--null-aux" in sys.argv else -1
    ctx = mp.get_context("spawn")
    queue, stop = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=worker, args=(i, i == null_aux, queue, stop)) for i in range(n)]
    for p in procs:
        p.start()
    for _ in range(n):
        rank, pid, what = queue.get(timeout=120)
        print("rank", rank, "pid", pid, what, flush=True)
    print("ranks up", flush=True)
    sys.stdin.read()
    stop.set()
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()


if __name__ == "__main__":
    main()
