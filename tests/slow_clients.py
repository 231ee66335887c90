#!/usr/bin/env python3
"""How many slow clients it takes to starve `ledger serve` (issue 25, item 8; issue 35, item 2).

For each N it opens N connections, each sending a request head with `Content-Length: 100`
and then 6 bytes of the body, never the rest (`--mode slow-body`, the default), or each
pipelining 100 unauthenticated `GET /openapi.json` and reading nothing (`--mode
never-read`). Holding them open, it asks `GET /healthz` on a
fresh connection and says whether it answered within 5 s. When it did not, it asks again
after the body-read timeout should have cut the slow clients off (35 s by default) and says
whether the service recovered. It prints figures; it asserts nothing. Python 3, stdlib only.

Each slow connection is a file descriptor on both sides, so raise the limits first:

    ulimit -n 20000          # in the shell that runs this script (N + a few are needed)
    ulimit -n 4096           # in the shell that runs `ledger serve`: its descriptor limit
                             # is what starves the service without a connection cap

Run the service against a scratch database, then:

    python3 tests/slow_clients.py --target 127.0.0.1:18099 --token-file token
    python3 tests/slow_clients.py --target 127.0.0.1:18099 --mode never-read \
        --counts 1024 --recheck-after 78

The slow requests POST /v1/contacts with the token (so the handler waits for the body);
`--path /sign-in` without a token does the same with no credentials at all.
"""

import argparse
import selectors
import socket
import time

BODY_START = b'{"jur"'  # 6 of the 100 bytes promised
CONNECT_WAIT = 10.0


def slow_request(host, path, token):
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{auth}"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    return head.encode() + BODY_START


def never_read_request(host):
    """100 pipelined GETs of the OpenAPI document, none of whose answers is ever read."""
    one = f"GET /openapi.json HTTP/1.1\r\nHost: {host}\r\n\r\n"
    return (one * 100).encode()


def open_slow(address, count, request, receive_buffer=None):
    """Starts `count` connections at once; sends the slow request on each that connects
    within CONNECT_WAIT. Returns (sockets, connected, not connected, refused)."""
    selector = selectors.DefaultSelector()
    sockets, refused = [], 0
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:
            # A client that reads nothing needs no room for what it does not read.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.setblocking(False)
        error = sock.connect_ex(address)
        if error not in (0, 115):  # EINPROGRESS
            refused += 1
            sock.close()
            continue
        sockets.append(sock)
        selector.register(sock, selectors.EVENT_WRITE)
    connected = 0
    deadline = time.monotonic() + CONNECT_WAIT
    while connected + refused < count and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            selector.unregister(sock)
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                refused += 1
                continue
            try:
                sock.send(request)
                connected += 1
            except OSError:
                refused += 1
    selector.close()
    return sockets, connected, count - connected - refused, refused


def healthz(address, host, timeout):
    """Seconds until GET /healthz answered 200, or None if not within `timeout`."""
    start = time.monotonic()
    try:
        with socket.create_connection(address, timeout=timeout) as sock:
            sock.settimeout(max(0.1, timeout - (time.monotonic() - start)))
            sock.sendall(
                f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            answer = b""
            while b"\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    return None
                answer += chunk
            if not answer.startswith(b"HTTP/1.1 200"):
                return None
            return time.monotonic() - start
    except OSError:
        return None


def still_open(sockets):
    """How many of the slow connections the service has not closed. Each is read until the
    service has nothing more for now (open), or until its end or a reset (closed): an
    answer in the buffer (a 408, or the GETs' answers) says nothing either way."""
    open_count = 0
    for sock in sockets:
        try:
            while sock.recv(1 << 20):
                pass
        except BlockingIOError:
            open_count += 1
        except OSError:
            pass
    return open_count


def measure(address, host, count, request, probe_timeout, recheck_after, receive_buffer, settle):
    started = time.monotonic()
    sockets, connected, waiting, refused = open_slow(address, count, request, receive_buffer)
    # Past the listen backlog, some handshakes finish only on the kernel's retry (1 s, 3 s):
    # a probe sent at once could overtake them and find a place that is theirs.
    time.sleep(settle)
    answered = healthz(address, host, probe_timeout)
    line = (
        f"N={count:>5}: sent {connected:>5}, still connecting {waiting:>5}, refused {refused:>5}; "
        f"healthz within {probe_timeout:.0f} s: "
        + (f"yes ({answered:.2f} s)" if answered is not None else "NO")
    )
    if answered is None and recheck_after > 0:
        time.sleep(max(0.0, started + recheck_after - time.monotonic()))
        again = healthz(address, host, probe_timeout)
        line += f"; after {recheck_after:.0f} s: " + (
            f"yes ({again:.2f} s)" if again is not None else "NO (still starved)"
        )
    line += f"; slow connections still open at the end: {still_open(sockets)}"
    print(line, flush=True)
    for sock in sockets:
        sock.close()
    # Let the service see the closes before the next round.
    time.sleep(2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="127.0.0.1:18080", help="host:port of ledger serve")
    parser.add_argument("--counts", default="10,100,1000,5000", help="values of N, comma-separated")
    parser.add_argument(
        "--mode",
        choices=["slow-body", "never-read"],
        default="slow-body",
        help="slow-body: a POST whose body never arrives; never-read: 100 GETs, no read",
    )
    parser.add_argument("--path", default="/v1/contacts", help="where the slow POSTs go")
    parser.add_argument("--token-file", help="file holding a writer token for the slow POSTs")
    parser.add_argument("--probe-timeout", type=float, default=5.0, help="seconds healthz may take")
    parser.add_argument(
        "--settle",
        type=float,
        default=4.0,
        help="seconds between opening the slow connections and the first healthz",
    )
    parser.add_argument(
        "--recheck-after",
        type=float,
        default=35.0,
        help="when starved, ask again this many seconds after the slow clients started; 0: never",
    )
    args = parser.parse_args()
    host, port = args.target.rsplit(":", 1)
    address = (host, int(port))
    token = open(args.token_file).read().strip() if args.token_file else None
    if args.mode == "never-read":
        request = never_read_request(host)
    else:
        request = slow_request(host, args.path, token)
    for count in (int(n) for n in args.counts.split(",")):
        measure(
            address,
            host,
            count,
            request,
            args.probe_timeout,
            args.recheck_after,
            8192 if args.mode == "never-read" else None,
            args.settle,
        )


if __name__ == "__main__":
    main()
