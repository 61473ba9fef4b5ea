"""Load for bench/py/instrument_bench.py: GET PATH over one keep-alive
HTTP/1.1 connection to ADDR for SECONDS, one request at a time. Prints
{"rps", "p50_ms", "p99_ms", "requests"} as JSON. A process of its own, so
the server under test shares no interpreter lock with its client."""

import json
import socket
import sys
import time


def read_response(sock, buf):
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    length = None
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v.strip())
        elif k == b"transfer-encoding" and b"chunked" in v.lower():
            chunked = True
    if length is not None:
        while len(rest) < length:
            rest += sock.recv(65536)
        return rest[length:]
    if chunked:
        while b"0\r\n\r\n" not in rest:
            rest += sock.recv(65536)
        return rest.split(b"0\r\n\r\n", 1)[1]
    raise ValueError("no length")


def main():
    addr, path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = f"GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n".encode()
    lat = []
    buf = b""
    end = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        try:
            sock.sendall(req)
            buf = read_response(sock, buf)
        except (ConnectionError, OSError):
            sock.close()
            sock = socket.create_connection((host, int(port)))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            buf = b""
            continue
        lat.append(time.perf_counter() - t0)
    elapsed = time.perf_counter() - start
    lat.sort()
    print(json.dumps({
        "requests": len(lat),
        "rps": len(lat) / elapsed,
        "p50_ms": lat[len(lat) // 2] * 1e3,
        "p99_ms": lat[min(len(lat) - 1, len(lat) * 99 // 100)] * 1e3,
    }))


if __name__ == "__main__":
    main()
