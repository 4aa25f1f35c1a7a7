"""A client whose first call after connect is ioctl(FIONREAD), once the server's
first bytes ("abc") arrived: 3, as over TCP (over omx it once counted the server's
unread hello, 21 bytes). Then a client that connects and closes without reading or
writing: the server's read
must see end of file, as over TCP (no reset). Over omx the server's hello waits unread
in the client's kernel socket; left there, the client's close sent a reset. A first
connection (one byte each way) sets up the two processes' omx partners, so that the
server's accept of the second needs nothing of the client, which waits for the FIFO
outside the library.

    helloclose.py server PORT FIFO    accepts; once its kernel socket has nothing
                                      unacknowledged (the hello, if any, is in the
                                      client's kernel), tells the client through FIFO
    helloclose.py client HOST PORT FIFO
"""
import fcntl
import select
import socket
import struct
import sys
import termios

from common import listen


def unacked(s):
    """Bytes the kernel socket sent or holds that the peer did not acknowledge."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0" * 4))[0]


def main():
    role = sys.argv[1]
    if role == "server":
        port, fifo = int(sys.argv[2]), sys.argv[3]
        ls = listen(port)
        warm, _ = ls.accept()
        if warm.recv(1) != b"w":
            raise SystemExit("server: no warm-up byte")
        warm.sendall(b"r")
        warm.close()
        first, _ = ls.accept()
        first.sendall(b"abc")
        if first.recv(1) != b"k":
            raise SystemExit("server: the FIONREAD client failed")
        first.close()
        s, _ = ls.accept()
        p = select.poll()
        p.register(s, select.POLLIN)
        while unacked(s) > 0:  # a state of the socket, looked at until it holds
            p.poll(1)
        with open(fifo, "wb") as f:
            f.write(b"c")
        p.poll(-1)  # the client's end
        try:
            got = s.recv(16)
        except ConnectionResetError:
            raise SystemExit("server: reset where TCP gives end of file")
        if got != b"":
            raise SystemExit("server: %r where TCP gives end of file" % got)
        print("server ok", flush=True)
    else:
        host, port, fifo = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        warm = socket.create_connection((host, port))
        warm.sendall(b"w")
        if warm.recv(1) != b"r":
            raise SystemExit("client: no warm-up reply")
        warm.close()
        first = socket.create_connection((host, port))
        p = select.poll()
        p.register(first, select.POLLIN)
        p.poll(-1)
        n = struct.unpack("i", fcntl.ioctl(first.fileno(), termios.FIONREAD, b"\0" * 4))[0]
        if n != 3:
            raise SystemExit("client: FIONREAD says %d where TCP says 3" % n)
        if first.recv(16) != b"abc":
            raise SystemExit("client: not the server's first bytes")
        first.sendall(b"k")
        first.close()
        s = socket.create_connection((host, port))
        with open(fifo, "rb") as f:
            if f.read(1) != b"c":
                raise SystemExit("client: no word from the server")
        s.close()
        print("client ok", flush=True)


if __name__ == "__main__":
    main()
