"""Both ends write, then read, a client whose first bytes went over TCP before it saw
the server's hello (the server does not touch its connection until they are sent, so
the client cannot have seen a hello). TCP's buffers take both writes before either end
reads; every byte must arrive once and in order.

    tcpfirst.py server PORT FIFO    accepts, waits for the FIFO's byte, then plays
    tcpfirst.py client HOST PORT FIFO
"""
import os
import sys

from common import listen, read_exact
import socket

EARLY = 64 << 10  # written before the server's hello can exist
LATER = 192 << 10  # written after it, while the server writes too
TOTAL = EARLY + LATER


def pattern(n, seed):
    # Starts with zero bytes, like data a probe filter could mistake for probes.
    return bytes((i * seed + (i >> 11)) & 0xFF for i in range(n))


def main():
    role = sys.argv[1]
    if role == "server":
        port, fifo = int(sys.argv[2]), sys.argv[3]
        s, _ = listen(port).accept()
        with open(fifo, "rb") as f:  # the client's early bytes are on their way
            if f.read(1) != b"w":
                raise SystemExit("no go from the client")
        s.sendall(pattern(TOTAL, 11))
        got = read_exact(s, TOTAL)
        if got != pattern(TOTAL, 7):
            raise SystemExit("server: the client's bytes differ")
        s.sendall(b"k")
        print("server ok", flush=True)
    else:
        host, port, fifo = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        s = socket.create_connection((host, port))
        data = pattern(TOTAL, 7)
        s.sendall(data[:EARLY])
        with open(fifo, "wb") as f:
            f.write(b"w")
        s.sendall(data[EARLY:])
        got = read_exact(s, TOTAL)
        if got != pattern(TOTAL, 11):
            raise SystemExit("client: the server's bytes differ")
        if read_exact(s, 1) != b"k":
            raise SystemExit("client: no final byte")
        print("client ok", flush=True)


if __name__ == "__main__":
    main()
