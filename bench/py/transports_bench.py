"""What NIXL_AGENT_TRANSPORTS=1 costs (`make bench-python`'s data-path
section, bench/py/instrument_bench.py): two fresh instrumented processes,
one with the opt-in and one without, each timing transfer() of a 4 KiB
WRITE from a NIXL agent to itself (UCX's default transports: cma on a
CPU-only host), instrumented vs bare (NIXL's own method, kept by the
wrapper), interleaved, after the first transfer to that peer; and the first
transfer itself, where the opt-in waits for UCX's protocol tables.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SMALL = 4096


def child():
    from nixl._api import nixl_agent, nixl_agent_config

    import logging

    logging.getLogger("nixl").setLevel(logging.WARNING)
    cfg = nixl_agent_config(enable_prog_thread=False, backends=["UCX"])
    a = nixl_agent("tb-a", cfg)
    pair = np.zeros(2 * SMALL, dtype=np.uint8)
    a.register_memory([(pair.ctypes.data, pair.nbytes, 0, "")], "DRAM")
    d = lambda x: a.get_xfer_descs([(x, SMALL, 0)], "DRAM")
    # Loopback within the agent (its own name as the peer), as
    # xfer_bench's loopback figure: no progress thread to compete.
    h = a.initialize_xfer("WRITE", d(pair.ctypes.data), d(pair.ctypes.data + SMALL), "tb-a")
    cls = type(a)
    bare = cls.__nixl_agent_originals__
    contenders = {"bare": bare["transfer"], "instrumented": cls.transfer}

    def done(s):
        while s == "PROC":
            s = bare["check_xfer_state"](a, h)

    t0 = time.perf_counter_ns()
    done(cls.transfer(a, h))
    first_us = (time.perf_counter_ns() - t0) / 1e3
    times = {n: [] for n in contenders}
    names = list(contenders)
    for rep in range(int(os.environ.get("TB_REPS", "20001"))):
        for name in names if rep % 2 == 0 else reversed(names):
            t0 = time.perf_counter_ns()
            s = contenders[name](a, h)
            t1 = time.perf_counter_ns()
            done(s)
            if rep > 0:
                times[name].append(t1 - t0)
    h.release()
    import nixl_agent_instrument as nai

    peers = (nai.status() or {}).get("transfers", {}).get("peers", [])
    print(
        json.dumps(
            {
                "first_transfer_us": first_us,
                "transfer_ns": {n: statistics.median(v) for n, v in times.items()},
                "transports": [p.get("transports") for p in peers],
            }
        )
    )


def run(python, bootstrap):
    out = {}
    for label, on in (("off", "0"), ("on", "1")):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("NIXL_AGENT_", "UCX_"))}
        env.update(PYTHONPATH=bootstrap, NIXL_AGENT_TRANSPORTS=on, NIXL_AGENT_LISTEN="off")
        r = subprocess.run(
            [python, __file__, "--child"], env=env, check=True, capture_output=True, text=True
        )
        out[label] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def report(x, p=print):
    p("NIXL_AGENT_TRANSPORTS=1 (bench/py/transports_bench.py): transfer() of a 4 KiB WRITE from an agent to itself (cma), after the first transfer, medians of 20,000 interleaved; and the first transfer to the peer:")
    p()
    p("| opt-in | bare (ns) | instrumented (ns) | added (ns) | first transfer (µs) | transports read |")
    p("|---|---:|---:|---:|---:|---|")
    for label in ("off", "on"):
        r = x[label]
        b, i = r["transfer_ns"]["bare"], r["transfer_ns"]["instrumented"]
        seen = ", ".join(f"{t['op']} {t['scope']} {'+'.join(t['transports'])}" for ts in r["transports"] for t in (ts or [])) or "—"
        p(f"| {label} | {b:.0f} | {i:.0f} | {i - b:+.0f} | {r['first_transfer_us']:.0f} | {seen} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--child"]:
        child()
    else:
        import nixl_agent_instrument as nai

        bootstrap = os.path.join(os.path.dirname(nai.__file__), "_bootstrap")
        report(run(sys.executable, bootstrap))
