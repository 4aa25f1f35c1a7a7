"""Many concurrent TCP connections, each carrying checked data: the client opens N
connections at once, writes SIZE bytes of its own pattern on each (cut in pieces,
round robin), half closes each, and the server answers each with the count and
SHA-256 it received; the client checks every answer. One event loop (epoll) per side.
Run unmodified, with or without omx_sockets.

    many.py server PORT N
    many.py client IP PORT N SIZE
"""
import hashlib
import resource
import selectors
import socket
import sys

from common import Tally, listen, read_to_end

# Each carried connection holds three descriptors (socket, private duplicate, eventfd).
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))


def payload(i, size):
    seed = hashlib.sha256(b"conn %d" % i).digest()
    return (seed * (size // len(seed) + 1))[:size]


def server(port, n):
    lsock = listen(port, n)
    sel = selectors.DefaultSelector()
    sel.register(lsock, selectors.EVENT_READ, None)
    state, served = {}, 0
    while served < n:
        for key, _ in sel.select():
            if key.data is None:
                c, _ = lsock.accept()
                c.setblocking(False)
                state[c] = Tally()
                sel.register(c, selectors.EVENT_READ, c)
                continue
            c = key.data
            try:
                d = c.recv(1 << 16)
            except BlockingIOError:
                continue
            if state[c] is None:
                # Answered: the client closes first (see "Not yet" in docs/SOCKETS.md:
                # a last small write and the FIN right behind it can race under load).
                if not d:
                    sel.unregister(c)
                    del state[c]
                    c.close()
                    served += 1
                continue
            if d:
                state[c].update(d)
                continue
            reply = state[c].line()
            state[c] = None
            c.setblocking(True)
            c.sendall(reply.encode())
            c.setblocking(False)
    print("served", served, flush=True)


def client(ip, port, n, size):
    conns = []
    for i in range(n):
        s = socket.socket()
        s.connect((ip, port))
        conns.append(s)
    piece = 16384
    for off in range(0, size, piece):
        for i, s in enumerate(conns):
            s.sendall(payload(i, size)[off : off + piece])
    for s in conns:
        s.shutdown(socket.SHUT_WR)
    bad = 0
    for i, s in enumerate(conns):
        want = Tally(payload(i, size)).line()
        reply = read_to_end(s, len(want))
        if reply.decode() != want:
            print("connection %d: sent %s, server got %r" % (i, want, reply), flush=True)
            bad += 1
        s.close()
    print("%d connections, %d bad" % (n, bad), flush=True)
    sys.exit(1 if bad else 0)


if sys.argv[1] == "server":
    server(int(sys.argv[2]), int(sys.argv[3]))
else:
    client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
