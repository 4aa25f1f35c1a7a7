"""The transcript the fs comparison tests write (posix.py, twoclients.py): each step's
result or errno name, one line each, compared between the mount and a local run."""
import errno

out = []


def note(*a):
    out.append(" ".join(str(x) for x in a))


def call(label, f, *a):
    """Runs f(*a), notes the result or the errno's name, returns the result or None."""
    try:
        r = f(*a)
    except OSError as e:
        note(label, "->", errno.errorcode.get(e.errno, e.errno))
        return None
    note(label, "->", "ok" if r is None else r)
    return r
