"""Python-side contender of nixl-bench: the wheel's own Python API, used the
way SGLang uses it (one `register_memory(list_of_tuples, "DRAM")` call per
buffer list, one `deregister_memory` for it).

Protocol (the same as the Rust workers', see bench/worker.rs): one JSON object
per line on stdin, one JSON reply per line on stdout.
  {"cmd": "rep", "n": N, "size": S}  -> {"reg_ns": ..., "dereg_ns": ...}
      maps N*S fresh populated bytes (like the Rust side), registers the N
      regions in one call, deregisters them in one call, unmaps.
  {"cmd": "quit"}                    -> exits
The first line written is {"ready": true, ...} once the agent and its UCX
backend exist. NIXL's own log lines go to stderr.
"""

import ctypes
import json
import mmap
import os
import sys
import time

# Alignment of the first region (bench/common.rs ALIGN): the region size.
ALIGN = 64 << 10


def main() -> int:
    # The protocol owns the real stdout; everything else that prints (NIXL's
    # logger writes INFO lines to stdout) goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def reply(obj) -> None:
        proto.write(json.dumps(obj) + "\n")
        proto.flush()

    # Import inside main so an import failure is reported as JSON, not a trace.
    try:
        from nixl_cu12 import nixl_agent, nixl_agent_config
    except Exception as e:  # noqa: BLE001 - report whatever broke the import
        reply({"ready": False, "error": f"import nixl_cu12: {e!r}"})
        return 1

    # Same NIXL agent configuration as the Rust contenders: no progress thread
    # (it busy-polls a core) and no listener; UCX only.
    cfg = nixl_agent_config(
        enable_prog_thread=False, enable_listen_thread=False, backends=["UCX"]
    )
    agent = nixl_agent(f"bench-py-{os.getpid()}", cfg)
    reply(
        {
            "ready": True,
            "python": sys.version.split()[0],
            "numpy": sys.modules["numpy"].__version__,
            "torch_loaded": "torch" in sys.modules,
        }
    )
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    for line in sys.stdin:
        msg = json.loads(line)
        cmd = msg.get("cmd")
        if cmd == "quit":
            break
        if cmd != "rep":
            reply({"error": f"unknown command {cmd!r}"})
            continue
        n, size = int(msg["n"]), int(msg["size"])
        # Like the Rust side (bench/common.rs Arena): one populated mapping,
        # regions from its first ALIGN-aligned address.
        m = mmap.mmap(-1, n * size + ALIGN, flags=flags)
        buf = ctypes.c_char.from_buffer(m)
        base = -(-ctypes.addressof(buf) // ALIGN) * ALIGN
        regions = [(base + i * size, size, 0, "") for i in range(n)]
        t0 = time.perf_counter_ns()
        descs = agent.register_memory(regions, "DRAM")
        t1 = time.perf_counter_ns()
        agent.deregister_memory(descs)
        t2 = time.perf_counter_ns()
        del descs, buf
        m.close()
        reply({"reg_ns": t1 - t0, "dereg_ns": t2 - t1})
    return 0


if __name__ == "__main__":
    sys.exit(main())
