"""A program of our own for tests/python_tap.rs: what the host program sees
of its own stdout and stderr while nixl-agent's fd tap is in place
(NIXL_AGENT_CAPTURE=on or NIXL_AGENT_TRANSPORTS=1). Making a NIXL agent
starts the instrumentation, and the tap with it.

    python tap.py abort     200 lines on stdout, one on stderr, os.abort()
    python tap.py _exit     the same, then os._exit(3)
    python tap.py segv      faulthandler on, the same, then a SIGSEGV
    python tap.py exit      the same, then an ordinary exit (status 0)
    python tap.py sigterm   the same, then a SIGTERM (its default: death)
    python tap.py prompt    a line shaped like UCX's, then the unfinished
                            line `[y/N] `; ends after a line on stdin
    python tap.py env       what UCX_PROTO_INFO is once NIXL is imported
    python tap.py cbuffer   a line left in a C FILE's buffer (on a pipe of
                            its own), then a first transfer (a loopback);
                            says whether the buffer was flushed meanwhile
"""

import os
import sys


def lines_then_end(how):
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent("tap", nixl_agent_config(backends=[]))
    if how == "segv":
        import faulthandler

        faulthandler.enable()
    for i in range(200):
        sys.stdout.write(f"line {i} of the program's own output\n")
    sys.stdout.flush()
    sys.stderr.write("the last words on stderr\n")
    sys.stderr.flush()
    if how == "abort":
        os.abort()
    if how == "_exit":
        os._exit(3)
    if how == "sigterm":
        import signal

        os.kill(os.getpid(), signal.SIGTERM)
        signal.pause()
    if how == "segv":
        import ctypes

        ctypes.string_at(0)
    del agent


def prompt():
    from nixl._api import nixl_agent, nixl_agent_config

    agent = nixl_agent("tap", nixl_agent_config(backends=[]))
    # Another process's UCX line (pid 1), or the program's own look-alike.
    sys.stdout.write("[1796185907.212271] [vm:1    :0]   | the program's own table |\n")
    sys.stdout.write("[y/N] ")
    sys.stdout.flush()
    sys.stdin.readline()
    sys.stdout.write("answered\n")
    sys.stdout.flush()
    del agent


def env():
    import nixl._api  # noqa: F401  (the import hook runs here)

    print("UCX_PROTO_INFO", os.environ.get("UCX_PROTO_INFO"), flush=True)


def cbuffer():
    import ctypes

    from peers import loopback

    libc = ctypes.CDLL(None)
    libc.fdopen.restype = ctypes.c_void_p
    libc.fdopen.argtypes = [ctypes.c_int, ctypes.c_char_p]
    libc.fputs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    r, w = os.pipe()
    os.set_blocking(r, False)
    f = libc.fdopen(w, b"w")  # a pipe: fully buffered
    libc.fputs(b"held in the C buffer\n", f)

    a, _src, _b, h = loopback("tap", 1 << 16)
    state = a.transfer(h)
    while state == "PROC":
        state = a.check_xfer_state(h)
    try:
        got = os.read(r, 4096)
    except BlockingIOError:
        got = b""
    print("transfer", state, "c buffer", "flushed" if got else "untouched", flush=True)
    h.release()
    libc.fclose(f)


if __name__ == "__main__":
    how = sys.argv[1]
    if how == "prompt":
        prompt()
    elif how == "env":
        env()
    elif how == "cbuffer":
        cbuffer()
    else:
        lines_then_end(how)
