"""Helpers the socket test programs share (each runs unmodified, with or without
omx_sockets)."""
import hashlib
import socket


def listen(port, backlog=1, v6=False):
    """A listening TCP socket on every address; prints "listening" (run.sh waits for
    it). v6: IPv6 and IPv4-mapped addresses."""
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::" if v6 else "0.0.0.0", port))
    s.listen(backlog)
    print("listening", flush=True)
    return s


def read_exact(s, n):
    """Exactly n bytes from s; an early end of stream fails the program."""
    out = bytearray()
    while len(out) < n:
        d = s.recv(min(n - len(out), 1 << 20))
        if not d:
            raise SystemExit("early end of stream after %d of %d" % (len(out), n))
        out += d
    return bytes(out)


def read_to_end(s, limit=None):
    """Everything s delivers until the peer's end of stream (or limit bytes)."""
    out = bytearray()
    while limit is None or len(out) < limit:
        d = s.recv(1 << 16)
        if not d:
            break
        out += d
    return bytes(out)


class Tally:
    """Count and SHA-256 of a stream, as the line a server answers ("COUNT HEX")."""

    def __init__(self, data=b""):
        self.hash, self.count = hashlib.sha256(), 0
        self.update(data)

    def update(self, data):
        self.hash.update(data)
        self.count += len(data)

    def line(self):
        return "%d %s" % (self.count, self.hash.hexdigest())
