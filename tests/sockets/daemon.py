"""Servers that outlive their clients, as daemons do (rsync --daemon, openssl s_server,
git daemon), each client a process of its own. Run unmodified, with or without
omx_sockets.

    daemon.py server PORT N MODE    serves N clients in turn, then exits 0 if each
                                    was served right
    daemon.py client IP PORT MODE   one client process; exits 0 once its answer checks

MODE stream: the server answers a 5-byte request with 8 MiB in 4 KiB writes and
closes; the client reads to the end and checks every byte. A client process after
the first reuses the endpoint number of the one before, a new incarnation to the
server's endpoint, which counted its explicit acks against the old one's and dropped
them: the stream stalled with 4 MiB under way (`second-client`).

MODE select: the server forks per connection; the child alone uses it, non-blocking,
select() before every read and write (rsync's daemon): it greets, reads an 8-byte
request, answers 128 KiB. The client, non-blocking too, reads the greeting before it
writes, so the server's select once woke for the library's own control message
alone, and the read after it failed with EAGAIN (`control-not-readable`).
"""
import hashlib
import os
import select
import socket
import sys

from common import listen, read_exact, read_to_end

STREAM = 8 << 20
PIECE = 4096


def stream_body(request):
    seed = hashlib.sha256(request).digest()
    return seed * (STREAM // len(seed))


def sel_read(c, n):
    """n bytes from non-blocking c, select() before every read; EAGAIN after select
    said readable fails the program."""
    out = b""
    while len(out) < n:
        select.select([c], [], [])
        try:
            d = c.recv(n - len(out))
        except BlockingIOError:
            raise SystemExit("EAGAIN from a read that select said was readable")
        if not d:
            break
        out += d
    return out


def sel_write(c, data):
    while data:
        select.select([], [c], [])
        try:
            data = data[c.send(data):]
        except BlockingIOError:
            pass


def select_child(c):
    c.setblocking(False)
    sel_write(c, b"@HELLO 1\n")
    req = sel_read(c, 8)
    if len(req) != 8:
        raise SystemExit("short request")
    sel_write(c, hashlib.sha256(req).digest() * 4096)
    c.shutdown(socket.SHUT_WR)
    if sel_read(c, 1) != b"":
        raise SystemExit("bytes after the request")
    c.close()


def server(port, n, mode):
    lsock = listen(port, n)
    children = []
    for _ in range(n):
        c, _ = lsock.accept()
        if mode == "stream":
            req = read_exact(c, 5)
            body = stream_body(req)
            for i in range(0, len(body), PIECE):
                c.sendall(body[i:i + PIECE])
            c.close()
            continue
        pid = os.fork()
        if pid == 0:
            lsock.close()
            try:
                select_child(c)
            except SystemExit as e:
                print("child:", e, flush=True)
                os._exit(1)
            os._exit(0)
        c.close()
        children.append(pid)
    failed = sum(os.waitpid(p, 0)[1] != 0 for p in children)
    print("served %d, %d children failed" % (n, failed), flush=True)
    sys.exit(1 if failed else 0)


def client(ip, port, mode):
    c = socket.create_connection((ip, port))
    if mode == "stream":
        req = os.urandom(5)
        c.sendall(req)
        got = read_to_end(c)
        if got != stream_body(req):
            raise SystemExit("stream differs: %d of %d bytes" % (len(got), STREAM))
    else:
        c.setblocking(False)
        if sel_read(c, 9) != b"@HELLO 1\n":
            raise SystemExit("bad greeting")
        req = os.urandom(8)
        sel_write(c, req)
        if sel_read(c, 32 * 4096 + 1) != hashlib.sha256(req).digest() * 4096:
            raise SystemExit("answer differs")
    c.close()
    print("client ok", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        client(sys.argv[2], int(sys.argv[3]), sys.argv[4])
