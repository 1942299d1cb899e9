#!/usr/bin/env python3
"""The lab's plain socket sender/receiver: 1 MiB writes as fast as the socket takes them; the receiver may stop reading for a while, then reads to the end."""
import argparse
import json
import select
import socket
import threading
import time


def family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def recv(a):
    ls = socket.socket(family(a.bind), socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.rcvbuf:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    ls.bind((a.bind, a.port))
    ls.listen(64)
    ls.settimeout(a.accept_timeout)
    conns = [ls.accept()[0] for _ in range(a.streams)]
    accepted = time.time()
    got = [0] * len(conns)
    open_ = set(range(len(conns)))
    buf = bytearray(1 << 20)
    pause_start = pause_end = None
    while open_:
        if a.pause_for > 0 and pause_start is None and time.time() >= accepted + a.pause_at:
            pause_start = time.time()
            time.sleep(a.pause_for)  # the application stops reading
            pause_end = time.time()
        r, _, _ = select.select([conns[i] for i in open_], [], [], 0.05)
        for c in r:
            i = conns.index(c)
            n = c.recv_into(buf)
            if n == 0:
                open_.discard(i)
                c.close()
            else:
                got[i] += n
    print(json.dumps({"accepted": accepted, "ended": time.time(), "bytes": got,
                      "pause_start": pause_start, "pause_end": pause_end}), flush=True)


def send(a):
    data = memoryview(bytes(1 << 20))
    sent = [0] * a.streams
    started = time.time()

    def one(i):
        s = socket.socket(family(a.to), socket.SOCK_STREAM)
        if a.sndbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, a.sndbuf)  # locks the send buffer
        if a.cport:
            s.bind(("", a.cport + i))
        s.settimeout(10)
        s.connect((a.to, a.port))
        s.settimeout(None)
        end = started + a.seconds
        while time.time() < end and (a.bytes == 0 or sent[i] < a.bytes):
            n = len(data) if a.bytes == 0 else min(len(data), a.bytes - sent[i])
            s.sendall(data[:n])
            sent[i] += n
        s.shutdown(socket.SHUT_WR)
        s.settimeout(a.seconds + 120)
        try:
            while s.recv(65536):
                pass
        except OSError:
            pass
        s.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"started": started, "ended": time.time(), "bytes": sent}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--streams", type=int, default=1)
    r.add_argument("--rcvbuf", type=int, default=0)
    r.add_argument("--pause-at", type=float, default=0.0)
    r.add_argument("--pause-for", type=float, default=0.0)
    r.add_argument("--accept-timeout", type=float, default=30.0)
    s = sub.add_parser("send")
    s.add_argument("--to", required=True)
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--streams", type=int, default=1)
    s.add_argument("--seconds", type=float, required=True)
    s.add_argument("--bytes", type=int, default=0, help="per stream; 0: until --seconds")
    s.add_argument("--sndbuf", type=int, default=0, help="SO_SNDBUF of every stream (0: autotuning)")
    s.add_argument("--cport", type=int, default=0, help="stream i leaves from this port + i (0: ephemeral)")
    a = p.parse_args()
    recv(a) if a.mode == "recv" else send(a)


if __name__ == "__main__":
    main()
