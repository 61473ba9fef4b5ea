"""What the test programs share: a peer process that publishes its NIXL
metadata in a file, and two agents of one process joined by a WRITE.

Imported by the programs beside it (their directory is first on
``sys.path`` when they run).
"""

import os
import subprocess
import sys
import time


def start_peer(argv, path, env, who, within=30):
    """Starts ``argv`` (given ``--target path``) and waits, at most
    ``within`` seconds, for the metadata it publishes there: returns the
    process and (its buffer's address, its metadata)."""
    if os.path.exists(path):
        os.remove(path)
    peer = subprocess.Popen(argv + ["--target", path], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + within
    while not os.path.exists(path):
        if time.monotonic() > deadline or peer.poll() is not None:
            peer.kill()
            peer.wait()
            raise AssertionError(f"the {who} process never published its metadata")
        time.sleep(0.02)
    raw = open(path, "rb").read()
    return peer, (int.from_bytes(raw[:8], "little"), raw[8:])


def quiet_env():
    """The environment for a peer that must not be instrumented."""
    env = dict(os.environ, NIXL_AGENT_INSTRUMENT="0")
    env.pop("PYTHONPATH", None)
    return env


def loopback(prefix, size, fill=3):
    """Agents ``<prefix>-a`` and ``<prefix>-b`` over UCX in this process,
    ``size`` bytes registered on each, and a WRITE request from a's to
    b's: (a, src, dst, request)."""
    import numpy as np
    from nixl._api import nixl_agent, nixl_agent_config

    a = nixl_agent(f"{prefix}-a", nixl_agent_config(backends=["UCX"]))
    b = nixl_agent(f"{prefix}-b", nixl_agent_config(backends=["UCX"]))
    src = np.full(size, fill, dtype=np.uint8)
    dst = np.zeros(size, dtype=np.uint8)
    a.register_memory([(src.ctypes.data, src.nbytes, 0, "")], "DRAM")
    b.register_memory([(dst.ctypes.data, dst.nbytes, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    request = a.initialize_xfer(
        "WRITE",
        a.get_xfer_descs([(src.ctypes.data, src.nbytes, 0)], "DRAM"),
        a.get_xfer_descs([(dst.ctypes.data, dst.nbytes, 0)], "DRAM"),
        f"{prefix}-b",
    )
    return a, src, (b, dst), request


if __name__ == "__main__":
    sys.exit("a module of the test programs; nothing to run")
