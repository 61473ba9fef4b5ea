"""Benchmark of nixl_agent_instrument (docs/python.md),
run by `make bench-python` (scripts/bench-python.sh) with the release wheel.

Three sections, each against a peer measured in the same run:
  1. register_memory / deregister_memory, instrumented (record mode, validation
     on) vs bare (NIXL's own methods, kept by the wrapper), in the same
     process, interleaved, N = 1 ... 16384 regions of 4 KiB in one call (the
     way SGLang registers a buffer list). The cold first call of each
     contender (regions UCX never saw) is reported beside the warm median.
  2. the cold first registration of a fresh process (bench/py/cold.py), the
     one a serving process actually makes, bare vs instrumented, with what
     validation and the call-site read add; and interpreter start-up:
     `python -c "import nixl._api"` bare vs under the hook
     (PYTHONPATH=<bootstrap dir>), fresh interpreters, interleaved.
  3. the data path (bench/py/xfer_bench.py): check_xfer_state polls of a
     transfer in flight, transfer() itself, a 64 MiB WRITE loop, bare vs
     instrumented against a decode peer in another process; and what
     NIXL_AGENT_TRANSPORTS=1 costs (bench/py/transports_bench.py): transfer()
     after a peer's first transfer, with and without it, and that first one.
  4. /metrics while a Python thread holds the GIL (pure-Python spin, default
     switch interval): the extension's server vs prometheus_client's own
     `start_http_server` (what vLLM and SGLang serve their metrics with),
     exposing the same families for three groups, in the same process; the
     load comes from a separate process (bench/py/load.py), one keep-alive
     connection per client, the same for both.

Writes JSON to argv[1] and prints the Markdown tables (stdout).
"""

import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

REGION = 4096
SIZES = [1, 64, 1024, 4096, 16384]
HERE = os.path.dirname(os.path.abspath(__file__))


def reps_for(n):
    return 41 if n <= 64 else 15 if n <= 4096 else 5


def registration(agent, cls):
    bare = cls.__nixl_agent_originals__
    contenders = {
        "bare": (bare["register_memory"], bare["deregister_memory"]),
        "instrumented": (cls.register_memory, cls.deregister_memory),
    }
    rows = []
    for n in SIZES:
        res = {name: {"reg": [], "dereg": [], "cold_reg": None, "cold_dereg": None} for name in contenders}
        # Cold: fresh buffers per contender, never registered before (the
        # contender that goes first alternates with N).
        cold_order = list(contenders.items())
        if SIZES.index(n) % 2:
            cold_order.reverse()
        for name, (reg, dereg) in cold_order:
            buf = np.ones(n * REGION, dtype=np.uint8)
            descs = [(buf.ctypes.data + i * REGION, REGION, 0, "") for i in range(n)]
            t0 = time.perf_counter_ns()
            d = reg(agent, descs, "DRAM")
            t1 = time.perf_counter_ns()
            dereg(agent, d)
            t2 = time.perf_counter_ns()
            res[name]["cold_reg"] = (t1 - t0) / 1e3
            res[name]["cold_dereg"] = (t2 - t1) / 1e3
            res[name]["_keep"] = buf
        # Warm: the same regions again, contenders alternating (order flips).
        buf = np.ones(n * REGION, dtype=np.uint8)
        descs = [(buf.ctypes.data + i * REGION, REGION, 0, "") for i in range(n)]
        names = list(contenders)
        for rep in range(reps_for(n)):
            for name in names if rep % 2 == 0 else reversed(names):
                reg, dereg = contenders[name]
                t0 = time.perf_counter_ns()
                d = reg(agent, descs, "DRAM")
                t1 = time.perf_counter_ns()
                dereg(agent, d)
                t2 = time.perf_counter_ns()
                if rep > 0:  # the first pass warms UCX's cache
                    res[name]["reg"].append((t1 - t0) / 1e3)
                    res[name]["dereg"].append((t2 - t1) / 1e3)
        row = {"n": n}
        for name in names:
            r = res[name]
            row[name] = {
                "reg_us": statistics.median(r["reg"]),
                "dereg_us": statistics.median(r["dereg"]),
                "cold_reg_us": r["cold_reg"],
                "cold_dereg_us": r["cold_dereg"],
            }
        rows.append(row)
    return rows


def recording_alone(agent, sizes=(1, 64, 1024, 4096, 16384)):
    """What the instrumentation itself costs a register_memory and
    deregister_memory of N tuples (reading them, validation, the call-site
    answer cached, the recording), with a no-op standing in for NIXL's
    method: the extension's own entry points, warm, median."""
    from nixl_agent_instrument import _native

    rows = []
    for n in sizes:
        buf = np.ones(n * REGION, dtype=np.uint8)
        descs = [(buf.ctypes.data + i * REGION, REGION, 0, "") for i in range(n)]
        noop = lambda self, *a, **k: descs  # noqa: E731 - NIXL returns its list
        reg, dereg = [], []
        for rep in range(reps_for(n) * 4):
            t0 = time.perf_counter_ns()
            _native.register(("bench_alone", "kv"), noop, agent, (descs, "DRAM"), None)
            t1 = time.perf_counter_ns()
            _native.deregister(noop, agent, (descs,), None)
            t2 = time.perf_counter_ns()
            if rep > 0:
                reg.append(t1 - t0)
                dereg.append(t2 - t1)
        rows.append({"n": n, "register_ns": statistics.median(reg), "deregister_ns": statistics.median(dereg)})
    return rows


def array_registration(agent, cls, sizes=(1024, 16384)):
    """register_memory of an N×3 uint64 descriptor array (read as bytes by
    the instrumentation), bare vs instrumented, warm, interleaved."""
    bare = cls.__nixl_agent_originals__
    contenders = {
        "bare": (bare["register_memory"], bare["deregister_memory"]),
        "instrumented": (cls.register_memory, cls.deregister_memory),
    }
    rows = []
    for n in sizes:
        buf = np.ones(n * REGION, dtype=np.uint8)
        arr = np.array([(buf.ctypes.data + i * REGION, REGION, 0) for i in range(n)], dtype=np.uint64)
        times = {name: [] for name in contenders}
        names = list(contenders)
        for rep in range(reps_for(n)):
            for name in names if rep % 2 == 0 else reversed(names):
                reg, dereg = contenders[name]
                t0 = time.perf_counter_ns()
                d = reg(agent, arr, "DRAM")
                t1 = time.perf_counter_ns()
                dereg(agent, d)
                if rep > 0:
                    times[name].append((t1 - t0) / 1e3)
        rows.append({"n": n, **{name: statistics.median(v) for name, v in times.items()}})
    return rows


def startup(python, bootstrap, reps=21):
    env_bare = {k: v for k, v in os.environ.items() if not k.startswith("NIXL_AGENT_") and k != "PYTHONPATH"}
    env_hook = dict(env_bare, PYTHONPATH=bootstrap)
    out = {}
    for what, code in (("empty", "pass"), ("import_nixl", "import nixl._api")):
        times = {"bare": [], "hook": []}
        for rep in range(reps):
            order = [("bare", env_bare), ("hook", env_hook)]
            if rep % 2:
                order.reverse()
            for name, env in order:
                t0 = time.perf_counter_ns()
                subprocess.run([python, "-c", code], env=env, check=True, stdout=subprocess.DEVNULL)
                times[name].append((time.perf_counter_ns() - t0) / 1e6)
        out[what] = {k: statistics.median(v[1:]) for k, v in times.items()}
    return out


def cold_first_registration(python, bootstrap, reps=16):
    """The first register_memory of a fresh process (bench/py/cold.py:
    4,096 × 64 KiB DRAM regions as tuples), bare vs instrumented, and two
    instrumented variants that take one cost away each: validation off, and
    the group named explicitly (no call-site read). Contenders alternate,
    the order rotating each repetition."""
    env_bare = {k: v for k, v in os.environ.items() if not k.startswith("NIXL_AGENT_") and k != "PYTHONPATH"}
    env_hook = dict(env_bare, PYTHONPATH=bootstrap, NIXL_AGENT_LISTEN="127.0.0.1:0")
    contenders = [
        ("bare", env_bare, []),
        ("instrumented", env_hook, []),
        ("validation_off", dict(env_hook, NIXL_AGENT_VALIDATE="off"), []),
        ("explicit_group", env_hook, ["group"]),
    ]
    script = os.path.join(HERE, "cold.py")
    times = {name: [] for name, _, _ in contenders}
    for rep in range(reps):
        k = rep % len(contenders)
        for name, env, args in contenders[k:] + contenders[:k]:
            r = subprocess.run([python, script, *args], env=env, check=True, capture_output=True, text=True)
            times[name].append(float(r.stdout.strip().splitlines()[-1]) / 1e3)
    return {name: statistics.median(v) for name, v in times.items()}


def prometheus_client_peer():
    """The same families for three groups, in prometheus_client."""
    import prometheus_client as pc

    reg = pc.CollectorRegistry()
    labels = ["group", "kind", "mem_type", "backend"]
    attempts = pc.Counter("nixl_agent_registration_attempts", "attempts", labels, registry=reg)
    failures = pc.Counter("nixl_agent_registration_failures", "failures", labels + ["reason"], registry=reg)
    duration = pc.Histogram(
        "nixl_agent_registration_duration_seconds",
        "duration",
        labels,
        registry=reg,
        buckets=[1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1, 10, 60],
    )
    descriptors = pc.Histogram(
        "nixl_agent_registration_descriptors", "descriptors", labels, registry=reg, buckets=[1, 8, 64, 512, 4096, 32768]
    )
    registered = pc.Gauge("nixl_agent_registered_bytes", "bytes", ["group", "kind", "mem_type", "device"], registry=reg)
    for g in ("kv", "aux", "state"):
        attempts.labels(g, g, "DRAM", "UCX").inc()
        for r in ("invalid_address", "nixl_backend_error", "unmapped_address", "memlock_limit"):
            failures.labels(g, g, "DRAM", "UCX", r)
        duration.labels(g, g, "DRAM", "UCX").observe(1e-4)
        descriptors.labels(g, g, "DRAM", "UCX").observe(4)
        registered.labels(g, g, "DRAM", "0").set(4096)
    server, thread = pc.start_http_server(0, addr="127.0.0.1", registry=reg)
    return f"127.0.0.1:{server.server_port}"


def load(addr, seconds, python):
    out = subprocess.run(
        [python, os.path.join(HERE, "load.py"), addr, "/metrics", str(seconds)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def metrics_under_gil(agent_addr, python, seconds=3.0):
    peer = prometheus_client_peer()
    stop = threading.Event()

    def spin():
        x = 0
        while not stop.is_set():
            x += 1

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        result = {}
        for rep in range(2):
            for name, addr in (("extension", agent_addr), ("prometheus_client", peer)):
                r = load(addr, seconds, python)
                if rep == 1:
                    result[name] = r
    finally:
        stop.set()
        spinner.join()
    return result


def fmt(v):
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def main():
    out_path = sys.argv[1]
    import nixl_agent_instrument as nai
    from nixl._api import nixl_agent, nixl_agent_config

    import logging

    logging.getLogger("nixl").setLevel(logging.WARNING)  # NIXL's INFO lines go to stdout
    nai.instrument()
    python = sys.executable
    bootstrap = os.path.join(os.path.dirname(nai.__file__), "_bootstrap")
    # Fresh processes first, while this one has no NIXL agent whose threads
    # would compete with theirs for the cores.
    boot = startup(python, bootstrap)
    cold = cold_first_registration(python, bootstrap)
    sys.path.insert(0, HERE)
    import transports_bench

    transports = transports_bench.run(python, bootstrap)
    # No progress thread (registration does not use it; its polling would
    # only add noise on a small machine), the same for both contenders.
    agent = nixl_agent("bench", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    reg_rows = registration(agent, nixl_agent)
    array_rows = array_registration(agent, nixl_agent)
    alone = recording_alone(agent)
    sys.path.insert(0, HERE)
    import xfer_bench

    # An agent on UCX's default transports for the loopback figure; then
    # UCX's TCP transport (read when the backend is made; the peer inherits
    # it): the stopped peer then holds a transfer in flight.
    # No progress thread (its polling would compete with the measured
    # thread for this machine's two cores; the poll loop progresses it).
    local_agent = nixl_agent("bench-local", nixl_agent_config(enable_prog_thread=False, backends=["UCX"]))
    os.environ["UCX_TLS"] = "tcp"
    xfer_agent = nixl_agent("bench-prefill", nixl_agent_config(backends=["UCX"]))
    data_path = xfer_bench.run(xfer_agent, nixl_agent, python, local_agent)
    agent_addr = nai.address()
    served = metrics_under_gil(agent_addr, python)
    result = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "registration": reg_rows,
        "array_registration": array_rows,
        "recording_alone": alone,
        "startup_ms": boot,
        "cold_first_registration_ms": cold,
        "data_path": data_path,
        "transports": transports,
        "metrics_under_gil": served,
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)

    p = print
    p(f"Machine: {result['machine']}, NIXL 1.5.1 (nixl-cu12 wheel), UCX, DRAM, no GPU.")
    p()
    p("register_memory + deregister_memory, µs (one call of N × 4 KiB regions; median of warm interleaved repetitions; record mode, validation on):")
    p()
    p("| N | bare register | instrumented | ratio | added | bare deregister | instrumented | ratio | cold register bare | cold instrumented |")
    p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in reg_rows:
        b, i = r["bare"], r["instrumented"]
        p(
            f"| {r['n']} | {fmt(b['reg_us'])} | {fmt(i['reg_us'])} | {i['reg_us'] / b['reg_us']:.2f}× | {fmt(i['reg_us'] - b['reg_us'])} "
            f"| {fmt(b['dereg_us'])} | {fmt(i['dereg_us'])} | {i['dereg_us'] / b['dereg_us']:.2f}× "
            f"| {fmt(b['cold_reg_us'])} | {fmt(i['cold_reg_us'])} |"
        )
    p()
    p("register_memory of an N×3 uint64 descriptor array, µs (4 KiB regions; warm, interleaved, median):")
    p()
    p("| N | bare | instrumented | ratio | added per region |")
    p("|---:|---:|---:|---:|---:|")
    for r in array_rows:
        b, i = r["bare"], r["instrumented"]
        p(f"| {r['n']} | {fmt(b)} | {fmt(i)} | {i / b:.2f}× | {(i - b) * 1e3 / r['n']:.0f} ns |")
    p()
    p("The instrumentation alone: register_memory + deregister_memory of N × 4 KiB tuples through the extension, a no-op standing in for NIXL's method (warm, median):")
    p()
    p("| N | register µs | ns a region | deregister µs |")
    p("|---:|---:|---:|---:|")
    for r in alone:
        p(f"| {r['n']} | {fmt(r['register_ns'] / 1e3)} | {r['register_ns'] / r['n']:.1f} | {fmt(r['deregister_ns'] / 1e3)} |")
    p()
    p("The first register_memory of a fresh process, ms (4,096 × 64 KiB DRAM regions as a list of tuples; fresh processes, contenders alternating, median of 16):")
    p()
    b, i = cold["bare"], cold["instrumented"]
    p("| bare | instrumented | ratio | added | of which validation | of which the call-site read | the rest (reading, recording) |")
    p("|---:|---:|---:|---:|---:|---:|---:|")
    v, c = i - cold["validation_off"], i - cold["explicit_group"]
    p(f"| {b:.2f} | {i:.2f} | {i / b:.2f}× | {i - b:+.2f} | {v:+.2f} | {c:+.2f} | {i - b - v - c:+.2f} |")
    p()
    p("Interpreter start-up, ms (fresh `python -c`, median of 20 interleaved):")
    p()
    p("| program | bare | with the hook | added |")
    p("|---|---:|---:|---:|")
    for what, label in (("empty", "`pass`"), ("import_nixl", "`import nixl._api`")):
        b, h = boot[what]["bare"], boot[what]["hook"]
        p(f"| {label} | {b:.1f} | {h:.1f} | {h - b:+.1f} |")
    p()
    xfer_bench.report(data_path, p)
    p()
    transports_bench.report(transports, p)
    p()
    p("/metrics while a Python thread holds the GIL (pure-Python spin), 3 s of keep-alive load from another process:")
    p()
    p("| server | requests/s | p50 ms | p99 ms |")
    p("|---|---:|---:|---:|")
    for name, label in (("extension", "nixl_agent_instrument (Rust threads)"), ("prometheus_client", "prometheus_client start_http_server")):
        s = served[name]
        p(f"| {label} | {s['rps']:.0f} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} |")
    e, c = served["extension"], served["prometheus_client"]
    p()
    p(f"Throughput ratio {e['rps'] / max(c['rps'], 1e-9):.0f}×, p99 {e['p99_ms']:.2f} ms vs {c['p99_ms']:.2f} ms.")


if __name__ == "__main__":
    main()
