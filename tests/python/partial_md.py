"""partial_md: NIXL's partial-metadata pattern (its examples/python/partial_md_example.py,
socket exchange), in one process: a target registers two sets of buffers and sends the
initiator the metadata of the first only; the initiator's transfer to the second set is
refused (nixlNotFoundError) and retried, as NIXL documents, until the target sends the
rest; then one READ of the second set completes.

    python partial_md.py retry INIT_PORT TARGET_PORT REFUSALS
        the target sends the rest after the initiator's REFUSALS-th refusal.
    python partial_md.py never INIT_PORT TARGET_PORT SECONDS
        the target never sends it: the initiator retries for SECONDS, then gives up.

Prints `refused N` (the refusals the program saw) and `done` or `gave up`. Exit 0.
With HOLD_BEFORE_EXIT=1 it reads one line from stdin before it exits.
"""

import os
import sys
import time

import nixl._utils as nixl_utils
from nixl._api import nixl_agent, nixl_agent_config
from nixl._bindings import nixlNotFoundError

os.environ.pop("NIXL_ETCD_ENDPOINTS", None)
SIZE = 256
IP = "127.0.0.1"


def buffers(n):
    return [(nixl_utils.malloc_passthru(SIZE), SIZE, 0, "") for _ in range(n)]


def main():
    mode, init_port, target_port, amount = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    target = nixl_agent("target", nixl_agent_config(True, True, target_port, backends=["UCX"]))
    set1, set2 = buffers(4), buffers(4)
    reg1 = target.get_reg_descs(set1, "DRAM")
    reg2 = target.get_reg_descs(set2, "DRAM")
    target.register_memory(reg1)
    target.register_memory(reg2)
    init = nixl_agent("initiator", nixl_agent_config(True, True, init_port, backends=["UCX"]))
    local = buffers(4)
    init_reg = init.get_reg_descs(local, "DRAM")
    init.register_memory(init_reg)
    init_xfer = init_reg.trim()

    target.send_partial_agent_metadata(reg1, True, ["UCX"], IP, init_port)
    while not init.check_remote_metadata("target", reg1.trim()):
        time.sleep(0.001)

    refused = 0
    handle = None
    deadline = time.monotonic() + (float(amount) if mode == "never" else 60)
    while handle is None and time.monotonic() < deadline:
        try:
            handle = init.initialize_xfer("READ", init_xfer, reg2.trim(), "target", b"partial")
        except nixlNotFoundError:
            refused += 1
            if mode == "retry" and refused == int(amount):
                target.send_partial_agent_metadata(reg2, True, ["UCX"], IP, init_port)
            # NIXL logs each refusal on stderr: a pace a test's pipe holds.
            time.sleep(0.02)
    print(f"refused {refused}", flush=True)
    if handle is None:
        print("gave up", flush=True)
    else:
        state = init.transfer(handle)
        while state not in ("DONE", "ERR"):
            state = init.check_xfer_state(handle)
        print("done" if state == "DONE" else "transfer failed", flush=True)
        init.release_xfer_handle(handle)
    init.remove_remote_agent("target")
    init.deregister_memory(init_reg)
    target.deregister_memory(reg1)
    target.deregister_memory(reg2)
    sys.stdout.flush()
    if os.environ.get("HOLD_BEFORE_EXIT") == "1":
        sys.stdin.readline()


if __name__ == "__main__":
    main()
