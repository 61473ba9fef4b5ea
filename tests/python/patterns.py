"""patterns: NIXL's documented ways for metadata and notifications to arrive
(its examples/python and test/python), in one process, two agents on UCX with
their listeners on: what both front-ends must count alike.

    python patterns.py listener INIT_PORT TARGET_PORT
        the target sends its metadata to the initiator's listener
        (send_local_metadata); the initiator polls check_remote_metadata, then
        WRITEs 3 times with a notification each; the target consumes them with
        check_remote_xfer_done (two) and get_new_notifs (one), and gets one
        send_notif through update_notifs.
    python patterns.py fetch INIT_PORT TARGET_PORT
        the initiator asks the target's listener for its metadata
        (fetch_remote_metadata), polls check_remote_metadata, then READs twice
        with a notification each, consumed with check_remote_xfer_done.

Prints what the program did: `transfers N`, `notifs N` (messages the target
received), `peers 1`. Exit 0. With HOLD_BEFORE_EXIT=1 it reads one line from
stdin before it exits.
"""

import os
import sys
import time

import nixl._utils as nixl_utils
from nixl._api import nixl_agent, nixl_agent_config

os.environ.pop("NIXL_ETCD_ENDPOINTS", None)
SIZE = 4096
IP = "127.0.0.1"


def buffers(n):
    return [(nixl_utils.malloc_passthru(SIZE), SIZE, 0, "") for _ in range(n)]


def until(f, what):
    deadline = time.monotonic() + 20
    while not f():
        if time.monotonic() > deadline:
            print(f"timed out waiting for {what}", flush=True)
            sys.exit(3)
        time.sleep(0.001)


def main():
    mode, init_port, target_port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    target = nixl_agent("target", nixl_agent_config(True, True, target_port, backends=["UCX"]))
    init = nixl_agent("initiator", nixl_agent_config(True, True, init_port, backends=["UCX"]))
    treg = target.get_reg_descs(buffers(2), "DRAM")
    ireg = init.get_reg_descs(buffers(2), "DRAM")
    target.register_memory(treg)
    init.register_memory(ireg)
    if mode == "listener":
        target.send_local_metadata(IP, init_port)
    else:
        init.fetch_remote_metadata("target", IP, target_port)
    until(lambda: init.check_remote_metadata("target"), "the target's metadata")

    op, count = ("WRITE", 3) if mode == "listener" else ("READ", 2)
    transfers, notifs = 0, 0
    for i in range(count):
        tag = f"{mode}-{i}".encode()
        handle = init.initialize_xfer(op, ireg.trim(), treg.trim(), "target", tag)
        state = init.transfer(handle)
        while state not in ("DONE", "ERR"):
            state = init.check_xfer_state(handle)
        if state != "DONE":
            print(f"transfer {i} failed", flush=True)
            sys.exit(3)
        transfers += 1
        init.release_xfer_handle(handle)
        if mode == "listener" and i == 2:
            got = {}

            def fresh():
                for k, v in target.get_new_notifs().items():
                    got.setdefault(k, []).extend(v)
                return bool(got)

            until(fresh, "a notification through get_new_notifs")
            notifs += sum(len(v) for v in got.values())
        else:
            until(lambda: target.check_remote_xfer_done("initiator", tag), f"notification {tag!r}")
            notifs += 1
    if mode == "listener":
        init.send_notif("target", b"standalone")
        until(lambda: b"standalone" in target.update_notifs().get("initiator", []), "a send_notif")
        notifs += 1
    print(f"transfers {transfers}", flush=True)
    print(f"notifs {notifs}", flush=True)
    print("peers 1", flush=True)
    init.remove_remote_agent("target")
    init.deregister_memory(ireg)
    target.deregister_memory(treg)
    sys.stdout.flush()
    if os.environ.get("HOLD_BEFORE_EXIT") == "1":
        sys.stdin.readline()


if __name__ == "__main__":
    main()
