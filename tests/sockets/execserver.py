"""A connection that outlives its process image: the server reads the head of a
request, answers a greeting, then exec()s a new image (directly, or in a forked child
while the parent closes its copy) that reads the rest from the inherited descriptor
and answers with the count and SHA-256 of the whole request; the client checks both
and the greeting. Run unmodified, with or without omx_sockets.

  execserver.py server exec|forkexec|twochildren   listen on PORT, serve one client
  execserver.py client IP SIZE [TRAILER]  send SIZE bytes (after an 8-byte length)

twochildren: no exec; two children are forked before either uses the connection, the
parent closes its copy, the first child reads the rest and answers, then the second
one writes TRAILER ("B") and both end.
  (execserver.py rest FD HEADLEN HEXHEAD  the exec'd image; internal)
"""
import hashlib
import os
import socket
import struct
import sys

from common import Tally, listen, read_exact, read_to_end

PORT = 5558
HEAD = 1 << 20
GREETING = b"G" * 1000


def pattern(n):
    return (bytes(range(251)) * (n // 251 + 1))[:n]


def answer(c, size, ok):
    """The reply the client checks: the request's size and SHA-256 (-1: wrong bytes)."""
    c.sendall(("%d %s" % (size if ok else -1, hashlib.sha256(pattern(size)).hexdigest())).encode())


mode = sys.argv[1]
if mode == "server":
    how = sys.argv[2]
    ls = listen(PORT)
    c, _ = ls.accept()
    ls.close()
    (size,) = struct.unpack("!Q", read_exact(c, 8))
    head = read_exact(c, min(HEAD, size))
    c.sendall(GREETING)
    fd = c.fileno()
    os.set_inheritable(fd, True)
    argv = [sys.executable, sys.argv[0], "rest", str(fd), str(size), hashlib.sha256(head).hexdigest(), str(len(head))]
    if how == "exec":
        os.execv(sys.executable, argv)
    if how == "twochildren":
        r, w = os.pipe()
        first = os.fork()
        if first == 0:
            os.close(r)
            rest = read_exact(c, size - len(head))
            ok = head + rest == pattern(size)
            answer(c, size, ok)
            os.write(w, b"x")
            os._exit(0 if ok else 1)
        second = os.fork()
        if second == 0:
            os.close(w)
            os.read(r, 1)
            c.sendall(b"B")
            os._exit(0)
        c.close()
        codes = [os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in (first, second)]
        sys.exit(max(codes))
    pid = os.fork()
    if pid == 0:
        os.execv(sys.executable, argv)
    c.close()
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
elif mode == "rest":
    fd, size, head_hash, head_len = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    c = socket.socket(fileno=fd)
    rest = read_exact(c, size - head_len)
    whole = pattern(size)
    ok = hashlib.sha256(whole[:head_len]).hexdigest() == head_hash and rest == whole[head_len:]
    answer(c, size, ok)
    c.close()
    print("exec'd image read", size - head_len, "ok" if ok else "WRONG", flush=True)
    sys.exit(0 if ok else 1)
else:
    size = int(sys.argv[3])
    s = socket.socket()
    s.connect((sys.argv[2], PORT))
    data = pattern(size)
    s.sendall(struct.pack("!Q", size) + data)
    greeting = read_exact(s, len(GREETING))
    reply = read_to_end(s)
    want = Tally(data).line() + (sys.argv[4] if len(sys.argv) > 4 else "")
    print("greeting", "ok" if greeting == GREETING else "WRONG", "reply", reply.decode(), flush=True)
    sys.exit(0 if greeting == GREETING and reply.decode() == want else 1)
