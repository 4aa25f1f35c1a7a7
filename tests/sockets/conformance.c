/* conformance.c - the socket calls of a TCP byte stream, with one set of assertions
 * that the run holds over the kernel (the reference) and over omx (omx_sockets).
 *
 *   conformance server PORT          serves the cases, one connection each
 *   conformance client IP PORT       runs them; prints "ok NAME" / "FAIL NAME: why"
 *
 * Each connection starts with one byte naming its case; the server then plays its part.
 * Never asserts a time: every wait is for an event (data, EOF, a reset). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

enum { C_ECHO = 1, C_PEEK, C_WAITALL, C_HALF_CLOSE, C_CLOSE_DELIVERS, C_EPIPE, C_SILENT,
       C_READ_COUNT, C_SINK, C_LARGE_WRITES, C_BOTH_SHUT, C_UNREAD, C_BOTH_WRITE, C_CLOSER, C_PEEK_SPAN, C_PIECES, C_RESTART, C_LOWAT, C_HELLO_FIRST, C_MANY, C_URGENT, C_URGENT_IN, C_URGENT_BOTH, C_QUIT };

/* Connections of epoll-many (each end's set holds them all). */
#define MANY 50
#define MANY_ROUNDS 40

/* Bytes each end of both-shut-first writes before it shuts down and reads. */
#define BOTH_SHUT (256 << 10)

#define BIG (8 << 20)
/* The large write of peek-waitall-span: read ahead over omx (above 32 KiB). */
#define PEEK_SPAN_BIG 100000
/* Write sizes of large-writes: each side of the direct-write threshold (128 KiB),
 * across the 512 KiB message size, odd ones. */
static const size_t large_sizes[] = {131072, 1048579, 131071, 200000, 3 << 20, 65536 + 5};
#define LARGE_MAX (3 << 20)
static int failures;

static void fail(const char *name, const char *why)
{
    printf("FAIL %s: %s (errno %d %s)\n", name, why, errno, strerror(errno));
    failures++;
}

#define CHECK(name, cond)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fail(name, #cond);                                                             \
            return;                                                                        \
        }                                                                                  \
    } while (0)

static unsigned char pattern(size_t i) { return (unsigned char)(i * 7 + (i >> 13)); }

static int read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* write_full in writes of 64 KiB: below the direct-write size of the omx run, whose
 * blocking writes return only once the peer took them (docs/SOCKETS.md, "Not yet"). */
static int write_chunks(int fd, const unsigned char *buf, size_t n)
{
    for (size_t off = 0; off < n; off += 65536)
        if (write_full(fd, buf + off, n - off < 65536 ? n - off : 65536))
            return -1;
    return 0;
}

/* Reads until EOF; the number of bytes and their sum. */
static uint64_t drain(int fd, uint64_t *sum)
{
    static unsigned char buf[1 << 16];
    uint64_t n = 0;
    ssize_t r;
    *sum = 0;
    while ((r = read(fd, buf, sizeof buf)) > 0 || (r < 0 && errno == EINTR))
        for (ssize_t i = 0; i < r; i++, n++)
            *sum += buf[i];
    return n;
}

static int listener;

/* Bytes each way after the urgent byte (see urgent_exchange). */
#define URGENT_AFTER (1 << 20)

/* After the urgent byte: the client writes URGENT_AFTER bytes, the server checks them,
 * answers 'y' (or 'n'), then writes URGENT_AFTER bytes the client checks. */
static int urgent_exchange_server(int c)
{
    unsigned char *big = malloc(URGENT_AFTER);
    int ok = read_full(c, big, URGENT_AFTER) == 0;
    for (size_t i = 0; ok && i < URGENT_AFTER; i++)
        ok = big[i] == pattern(i);
    for (size_t i = 0; i < URGENT_AFTER; i++)
        big[i] = pattern(i + 1);
    int r = write_full(c, ok ? "y" : "n", 1) == 0 && write_full(c, big, URGENT_AFTER) == 0 ? 0 : -1;
    free(big);
    return r;
}

static const char *urgent_exchange_client(int s)
{
    unsigned char *big = malloc(URGENT_AFTER);
    const char *why = NULL;
    char v = 0;
    for (size_t i = 0; i < URGENT_AFTER; i++)
        big[i] = pattern(i);
    if (write_full(s, big, URGENT_AFTER) || read_full(s, &v, 1) || v != 'y')
        why = "the server did not get the client's MiB after the urgent byte";
    else if (read_full(s, big, URGENT_AFTER))
        why = "the server's MiB after the urgent byte did not come";
    for (size_t i = 0; !why && i < URGENT_AFTER; i++)
        if (big[i] != pattern(i + 1))
            why = "the server's MiB after the urgent byte differs";
    free(big);
    return why;
}

/* "hello", "U" sent with MSG_OOB, "world". */
static int send_urgent(int fd)
{
    return write_full(fd, "hello", 5) == 0 && send(fd, "U", 1, MSG_OOB) == 1 && write_full(fd, "world", 5) == 0
               ? 0
               : -1;
}

/* POLLPRI on s within 20 s. SIGURG may interrupt the wait (the kernel sends it
 * when the urgent pointer arrives): poll again then. */
static int pollpri(int s)
{
    struct pollfd p = {.fd = s, .events = POLLPRI};
    int r;
    while ((r = poll(&p, 1, 20000)) < 0 && errno == EINTR)
        ;
    return r == 1 && (p.revents & POLLPRI);
}

/* The reader's side of send_urgent, as TCP gives it: POLLPRI, the exception set and
 * EPOLLPRI before the urgent byte is read; without SO_OOBINLINE, a read before the
 * mark stops at it (SIOCATMARK true there), the byte comes with recv(MSG_OOB) only
 * (once; EINVAL then), the stream is "helloworld"; with it, the stream is
 * "helloUworld", the mark at 5, and recv(MSG_OOB) is EINVAL. NULL, or what differed. */
static const char *read_urgent(int s, int oob_inline)
{
    char in[16] = {0}, u = 0;
    /* Each read has room for all 11 bytes: a read before the mark must stop at it. */
    size_t got = 0, want = 11;
    long mark_at = -1;
    if (!pollpri(s))
        return "no POLLPRI";
    fd_set ex;
    FD_ZERO(&ex);
    FD_SET(s, &ex);
    struct timeval tv = {0, 0};
    int n;
    while ((n = select(s + 1, NULL, NULL, &ex, &tv)) < 0 && errno == EINTR)
        ;
    if (n != 1 || !FD_ISSET(s, &ex))
        return "not in select's exception set";
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLPRI, .data.fd = s}, out = {0};
    n = ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) ? -1 : epoll_wait(ep, &out, 1, 0);
    while (n < 0 && ep >= 0 && errno == EINTR)
        n = epoll_wait(ep, &out, 1, 0);
    if (ep >= 0)
        close(ep);
    if (n != 1 || !(out.events & EPOLLPRI))
        return "no EPOLLPRI";
    for (;;) {
        int mark = 0;
        if (ioctl(s, SIOCATMARK, &mark) != 0)
            return "SIOCATMARK failed";
        if (mark) {
            if (mark_at >= 0)
                return "SIOCATMARK true twice";
            mark_at = (long)got;
        }
        if ((mark && !oob_inline) || got == want)
            break;
        ssize_t r = read(s, in + got, want - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return "a read before the end failed";
        got += (size_t)r;
    }
    if (mark_at != 5)
        return "SIOCATMARK not true at 5 (once)";
    if (oob_inline) {
        if (memcmp(in, "helloUworld", 11))
            return "the stream is not helloUworld";
        if (recv(s, &u, 1, MSG_OOB) != -1 || errno != EINVAL)
            return "recv(MSG_OOB) with SO_OOBINLINE is not EINVAL";
        return NULL;
    }
    if (got != 5 || memcmp(in, "hello", 5))
        return "the bytes before the mark are not hello";
    if (recv(s, &u, 1, MSG_OOB) != 1 || u != 'U')
        return "recv(MSG_OOB) did not give U";
    if (recv(s, &u, 1, MSG_OOB) != -1 || errno != EINVAL)
        return "a second recv(MSG_OOB) is not EINVAL";
    if (read_full(s, in, 5) || memcmp(in, "world", 5))
        return "the bytes after the mark are not world";
    return NULL;
}

static void serve(int c, int kind)
{
    static unsigned char buf[1 << 16];
    uint64_t n, sum, reply[2];
    ssize_t r;
    switch (kind) {
    case C_ECHO:
        while ((r = read(c, buf, sizeof buf)) > 0)
            if (write_full(c, buf, (size_t)r))
                break;
        break;
    case C_URGENT:
        /* After the client's go (its options are set): send_urgent, then the MiBs. */
        if (read_full(c, buf, 1) == 0 && send_urgent(c) == 0)
            urgent_exchange_server(c);
        read(c, buf, 1); /* until the client is done */
        break;
    case C_URGENT_IN: {
        /* "pre", which the client reads only after its urgent byte (over omx, what it
         * holds goes back to be sent again on TCP); then its urgent data, read as TCP
         * gives it; 'y' or 'n'; the MiBs. */
        const char *why = write_full(c, "pre", 3) ? "write" : read_urgent(c, 0);
        if (why)
            fprintf(stderr, "urgent-data-to-server: %s (errno %d)\n", why, errno);
        if (write_full(c, why ? "n" : "y", 1) == 0)
            urgent_exchange_server(c);
        read(c, buf, 1);
        break;
    }
    case C_URGENT_BOTH: {
        /* Urgent data first, then the client's, sent before it read any of ours. */
        const char *why = read_full(c, buf, 1) || send_urgent(c) ? "write" : read_urgent(c, 0);
        if (why)
            fprintf(stderr, "urgent-data-both-ends: %s (errno %d)\n", why, errno);
        if (write_full(c, why ? "n" : "y", 1) == 0)
            urgent_exchange_server(c);
        read(c, buf, 1);
        break;
    }
    case C_PEEK:
        write_full(c, "hello", 5);
        read(c, buf, 1); /* until the client is done */
        break;
    case C_PEEK_SPAN: {
        /* Writes that arrive apart (each after the client's go): "hello", "world",
         * then "xyz" and PEEK_SPAN_BIG bytes (see t_peek_span). */
        unsigned char *big = malloc(PEEK_SPAN_BIG);
        for (size_t i = 0; i < PEEK_SPAN_BIG; i++)
            big[i] = pattern(i);
        if (write_full(c, "hello", 5) == 0 && read_full(c, buf, 1) == 0 && write_full(c, "world", 5) == 0 &&
            read_full(c, buf, 1) == 0 && write_full(c, "xyz", 3) == 0 && read_full(c, buf, 1) == 0)
            write_full(c, big, PEEK_SPAN_BIG);
        free(big);
        read(c, buf, 1); /* until the client is done */
        break;
    }
    case C_PIECES: {
        /* Three small writes, each sent at once, then the FIN (see t_pieces). */
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        write_full(c, "hello", 5);
        write_full(c, "world", 5);
        write_full(c, "abc", 3);
        break;
    }
    case C_RESTART:
        if (read_full(c, buf, 1) == 0)
            write_full(c, "data", 4);
        read(c, buf, 1);
        break;
    case C_LOWAT:
    {
        /* "abc", then "defgh" and "ijk" (each sent at once) after the client's go, then
         * "xy" and the FIN after the next one (see t_rcvlowat). */
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (write_full(c, "abc", 3) == 0 && read_full(c, buf, 1) == 0 && write_full(c, "defgh", 5) == 0 &&
            write_full(c, "ijk", 3) == 0 && read_full(c, buf, 1) == 0)
            write_full(c, "xy", 2);
        break;
    }
    case C_HELLO_FIRST: {
        /* Accepts the client's next connection (no kind byte: untouched until then),
         * says so on this one, then answers that one's go with "data" (see
         * t_epoll_first). */
        int c1 = accept(listener, NULL, NULL);
        write_full(c, "k", 1);
        if (c1 >= 0 && read_full(c1, buf, 1) == 0)
            write_full(c1, "data", 4);
        if (c1 >= 0) {
            read(c1, buf, 1);
            close(c1);
        }
        break;
    }
    case C_MANY: {
        /* Accepts MANY more connections (no kind byte) and echoes them all from one
         * level-triggered epoll set until each ends, then says "d" on this one (see
         * t_epoll_many). */
        int ep = epoll_create1(EPOLL_CLOEXEC), left = MANY;
        struct epoll_event ev = {.events = EPOLLIN}, got[16];
        for (int i = 0; i < MANY; i++) {
            int m = accept(listener, NULL, NULL);
            ev.data.fd = m;
            if (m < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, m, &ev) != 0)
                left--;
        }
        while (left > 0) {
            int n = epoll_wait(ep, got, 16, -1);
            for (int i = 0; i < n; i++) {
                int m = got[i].data.fd;
                r = read(m, buf, sizeof buf);
                if (r > 0 && write_full(m, buf, (size_t)r) == 0)
                    continue;
                epoll_ctl(ep, EPOLL_CTL_DEL, m, NULL);
                close(m);
                left--;
            }
        }
        close(ep);
        write_full(c, "d", 1);
        break;
    }
    case C_WAITALL:
        for (int i = 0; i < 10; i++)
            write_full(c, buf, 100);
        read(c, buf, 1);
        break;
    case C_HALF_CLOSE:
    case C_READ_COUNT:
        n = drain(c, &sum);
        reply[0] = n;
        reply[1] = sum;
        write_full(c, reply, sizeof reply);
        break;
    case C_CLOSE_DELIVERS: {
        unsigned char *big = malloc(BIG);
        for (size_t i = 0; i < BIG; i++)
            big[i] = pattern(i);
        write_full(c, big, BIG);
        free(big);
        break; /* close at once: the bytes must still arrive */
    }
    case C_EPIPE:
        break; /* close at once */
    case C_SILENT:
        /* Reads nothing until the client's second connection says so. The client
         * writes only once this byte came: over omx a read that finds large messages
         * behind the one it takes reads them ahead (their sends then complete), so the
         * kind byte must be read before the first of them is announced. */
        write_full(c, "k", 1);
        close(accept(listener, NULL, NULL));
        n = drain(c, &sum);
        write_full(c, &n, sizeof n);
        break;
    case C_SINK:
        drain(c, &sum);
        break;
    case C_BOTH_WRITE: {
        /* As the client: one write of BOTH_SHUT bytes, then read the client's, then
         * answer their sum (see t_both_write). Neither end reads on the connection
         * once the other's large write may be under way: the client writes once it
         * read the 'k' and sent its go (a second connection), the server once the go
         * came. */
        unsigned char *io = malloc(BOTH_SHUT);
        write_full(c, "k", 1);
        close(accept(listener, NULL, NULL));
        for (size_t i = 0; i < BOTH_SHUT; i++)
            io[i] = pattern(i + 3);
        sum = 0;
        if (write_full(c, io, BOTH_SHUT) == 0 && read_full(c, io, BOTH_SHUT) == 0) {
            for (size_t i = 0; i < BOTH_SHUT; i++)
                sum += io[i];
            write_full(c, &sum, sizeof sum);
        }
        free(io);
        break;
    }
    case C_CLOSER:
        break; /* close at once, nothing unread: a FIN */
    case C_UNREAD:
        read(c, buf, 1); /* one byte of the client's 1000, then close: a reset */
        break;
    case C_BOTH_SHUT: {
        /* As the client: write, shut down, then read to the end (see t_both_shut). */
        unsigned char *out = malloc(BOTH_SHUT);
        for (size_t i = 0; i < BOTH_SHUT; i++)
            out[i] = pattern(i + 3);
        if (write_chunks(c, out, BOTH_SHUT) == 0 && shutdown(c, SHUT_WR) == 0) {
            n = drain(c, &sum);
            if (n != BOTH_SHUT)
                fprintf(stderr, "both-shut-first: the server read %llu bytes\n", (unsigned long long)n);
        }
        free(out);
        break;
    }
    case C_LARGE_WRITES: {
        /* Large blocking writes (over omx sent from this memory, no copy): each is
         * overwritten as soon as its write returns, so a write that returned before
         * the peer had its bytes shows as corrupt data. Then it reads the client's. */
        unsigned char *big = malloc(LARGE_MAX);
        size_t off = 0;
        for (size_t k = 0; k < sizeof large_sizes / sizeof large_sizes[0]; k++) {
            size_t n = large_sizes[k], done = 0;
            for (size_t i = 0; i < n; i++)
                big[i] = pattern(off + i);
            while (done < n) {
                ssize_t w = write(c, big + done, n - done);
                if (w < 0 && errno == EINTR)
                    continue;
                if (w <= 0)
                    break;
                done += (size_t)w;
            }
            memset(big, 0xee, n);
            off += n;
        }
        free(big);
        n = drain(c, &sum);
        reply[0] = n;
        reply[1] = sum;
        write_full(c, reply, sizeof reply);
        break;
    }
    }
}

static int server(int port)
{
    int s = listener = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16)) {
        perror("bind/listen");
        return 1;
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        unsigned char kind;
        if (c < 0)
            continue;
        if (read_full(c, &kind, 1) == 0) {
            if (kind == C_QUIT) {
                close(c);
                return 0;
            }
            serve(c, kind);
        }
        close(c);
    }
}

static struct sockaddr_in peer;

static int dial(int kind, int flags)
{
    int s = socket(AF_INET, SOCK_STREAM | flags, 0);
    unsigned char k = (unsigned char)kind;
    if (connect(s, (struct sockaddr *)&peer, sizeof peer) != 0) {
        if (errno != EINPROGRESS)
            return -1;
        struct pollfd p = {.fd = s, .events = POLLOUT};
        int err = -1;
        socklen_t len = sizeof err;
        poll(&p, 1, -1);
        getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0)
            return -1;
    }
    if (kind && write_full(s, &k, 1))
        return -1;
    return s;
}

/* One byte to the echo service and back: over omx the connection is carried both
 * ways from then on. */
static int echoed_once(int s)
{
    char c;
    return write(s, "a", 1) == 1 && read(s, &c, 1) == 1 && c == 'a';
}

static void t_echo_calls(void)
{
    const char *name = "echo-calls";
    int s = dial(C_ECHO, 0);
    char a[6] = "abcde", b[6] = "fghij", in[32] = {0};
    struct iovec iov[2] = {{a, 5}, {b, 5}};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = 2};
    CHECK(name, s >= 0);
    CHECK(name, write(s, "12345", 5) == 5 && read_full(s, in, 5) == 0 && !memcmp(in, "12345", 5));
    CHECK(name, send(s, "x", 1, 0) == 1 && recv(s, in, 1, MSG_WAITALL) == 1 && in[0] == 'x');
    CHECK(name, writev(s, iov, 2) == 10 && recv(s, in, 10, MSG_WAITALL) == 10);
    CHECK(name, !memcmp(in, "abcdefghij", 10));
    CHECK(name, sendmsg(s, &m, 0) == 10);
    memset(a, 0, 5);
    memset(b, 0, 5);
    m.msg_iovlen = 2;
    CHECK(name, recvmsg(s, &m, MSG_WAITALL) == 10 && !memcmp(a, "abcde", 5) && !memcmp(b, "fghij", 5));
    CHECK(name, sendto(s, "yz", 2, 0, NULL, 0) == 2 && recvfrom(s, in, 2, MSG_WAITALL, NULL, NULL) == 2);
    CHECK(name, !memcmp(in, "yz", 2));
    iov[0].iov_len = iov[1].iov_len = 5;
    CHECK(name, write(s, "0123456789", 10) == 10 && read_full(s, in, 3) == 0 && readv(s, iov, 2) > 0);
    struct sockaddr_in me, him;
    socklen_t l1 = sizeof me, l2 = sizeof him;
    CHECK(name, getsockname(s, (struct sockaddr *)&me, &l1) == 0 && ntohs(me.sin_port) != 0);
    CHECK(name, getpeername(s, (struct sockaddr *)&him, &l2) == 0 && him.sin_port == peer.sin_port);
    int one = 1;
    struct linger lg = {1, 5};
    CHECK(name, setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
    CHECK(name, setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0);
    CHECK(name, setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0);
    close(s);
    printf("ok %s\n", name);
}

static void t_peek_dontwait_fionread(void)
{
    const char *name = "peek-dontwait-fionread";
    int s = dial(C_PEEK, 0), avail = 0;
    char in[8] = {0};
    struct pollfd p = {.fd = -1, .events = POLLIN};
    CHECK(name, s >= 0);
    p.fd = s;
    CHECK(name, poll(&p, 1, -1) == 1 && (p.revents & POLLIN));
    CHECK(name, ioctl(s, FIONREAD, &avail) == 0 && avail >= 1 && avail <= 5);
    CHECK(name, recv(s, in, 5, MSG_PEEK | MSG_WAITALL) >= 1 && in[0] == 'h');
    CHECK(name, recv(s, in, 5, MSG_WAITALL) == 5 && !memcmp(in, "hello", 5));
    errno = 0;
    CHECK(name, recv(s, in, 1, MSG_DONTWAIT) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    errno = 0;
    CHECK(name, read(s, in, 1) == -1 && errno == EAGAIN);
    struct timeval tv = {0, 20000};
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    errno = 0;
    CHECK(name, recv(s, in, 1, 0) == -1 && (errno == EAGAIN || errno == EWOULDBLOCK));
    close(s);
    printf("ok %s\n", name);
}

/* recv(MSG_PEEK | MSG_WAITALL) waits for the whole length across the peer's writes, as
 * TCP's does, then the same bytes are read: two small writes, then a small one and a
 * large one. Each of the server's writes follows the client's go, so the peek starts
 * with the first write's bytes only. */
static void t_peek_span(void)
{
    const char *name = "peek-waitall-span";
    int s = dial(C_PEEK_SPAN, 0);
    char in[16] = {0};
    unsigned char *pk = malloc(PEEK_SPAN_BIG + 3), *rd = malloc(PEEK_SPAN_BIG + 3);
    struct pollfd p = {.fd = s, .events = POLLIN};
    CHECK(name, s >= 0 && pk && rd);
    CHECK(name, poll(&p, 1, -1) == 1 && (p.revents & POLLIN));
    CHECK(name, write(s, "g", 1) == 1);
    CHECK(name, recv(s, in, 10, MSG_PEEK | MSG_WAITALL) == 10 && !memcmp(in, "helloworld", 10));
    CHECK(name, recv(s, in, 10, MSG_WAITALL) == 10 && !memcmp(in, "helloworld", 10));
    CHECK(name, write(s, "g", 1) == 1);
    CHECK(name, recv(s, in, 3, MSG_PEEK | MSG_WAITALL) == 3 && !memcmp(in, "xyz", 3));
    CHECK(name, write(s, "g", 1) == 1);
    CHECK(name, recv(s, pk, PEEK_SPAN_BIG + 3, MSG_PEEK | MSG_WAITALL) == PEEK_SPAN_BIG + 3);
    CHECK(name, read_full(s, rd, PEEK_SPAN_BIG + 3) == 0 && !memcmp(pk, rd, PEEK_SPAN_BIG + 3));
    CHECK(name, !memcmp(rd, "xyz", 3));
    for (size_t i = 0; i < PEEK_SPAN_BIG; i++)
        CHECK(name, rd[i + 3] == pattern(i));
    errno = 0;
    CHECK(name, recv(s, in, 1, MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT) == -1 && errno == EAGAIN);
    free(pk);
    free(rd);
    close(s);
    printf("ok %s\n", name);
}

/* Bytes of several writes that all arrived are counted and read together, as TCP's
 * buffer holds them: FIONREAD counts all 13 (a program waiting until it counts a whole
 * header written in pieces would wait forever on the first one's 5), one read takes
 * them all, and MSG_TRUNC takes bytes without copying them. The peer's FIN (POLLRDHUP)
 * says that everything arrived. */
static void t_pieces(void)
{
    const char *name = "pieces-fionread-read-trunc";
    char in[32];
    int avail = 0;
    for (int round = 0; round < 2; round++) {
        int s = dial(C_PIECES, 0);
        struct pollfd p = {.fd = s, .events = POLLRDHUP};
        CHECK(name, s >= 0);
        do
            CHECK(name, poll(&p, 1, -1) == 1);
        while (!(p.revents & POLLRDHUP));
        memset(in, 0, sizeof in);
        if (round == 0) {
            CHECK(name, ioctl(s, FIONREAD, &avail) == 0 && avail == 13);
            CHECK(name, recv(s, in, 3, MSG_TRUNC) == 3 && in[0] == 0 && in[2] == 0);
            CHECK(name, read(s, in, sizeof in) == 10 && !memcmp(in, "loworldabc", 10));
        } else {
            CHECK(name, read(s, in, sizeof in) == 13 && !memcmp(in, "helloworldabc", 13));
        }
        CHECK(name, read(s, in, sizeof in) == 0);
        close(s);
    }
    printf("ok %s\n", name);
}

/* Returns once thread `tid` of this process is blocked in a system call (its
 * /proc/self/task/TID/syscall starts with the call's number, not "running"). */
static void wait_blocked(pid_t tid)
{
    char path[64], line[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
    for (;;) {
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        int got = fgets(line, sizeof line, f) != NULL;
        fclose(f);
        if (got && line[0] >= '0' && line[0] <= '9')
            break;
        sched_yield();
    }
}

/* A blocked read that a handler with SA_RESTART interrupts goes on, as the kernel
 * restarts it (signal(7)), even while another signal's handler lacks SA_RESTART: a
 * thread signals the reader once it is blocked in a system call
 * (/proc/self/task/TID/syscall), then asks the server for the bytes. Before, the
 * read first interrupted by that other handler (SIGUSR2) fails with EINTR. Over omx
 * the library did not know which signal came: any handler without SA_RESTART made
 * it EINTR. */
static void on_restart_signal(int sig) { (void)sig; }
static pid_t restart_reader;
static int restart_sock, restart_sig;
static void *restart_kicker(void *arg)
{
    (void)arg;
    wait_blocked(restart_reader);
    pthread_kill(*(pthread_t *)arg, restart_sig);
    if (restart_sig == SIGUSR1)
        write(restart_sock, "g", 1);
    return NULL;
}

static void t_restart(void)
{
    const char *name = "read-sa-restart";
    struct sigaction sa = {.sa_handler = on_restart_signal, .sa_flags = SA_RESTART}, old, old2, got;
    static pthread_t reader;
    pthread_t kicker;
    char in[8] = {0};
    int s = dial(C_RESTART, 0);
    CHECK(name, s >= 0);
    sigemptyset(&sa.sa_mask);
    CHECK(name, sigaction(SIGUSR1, &sa, &old) == 0);
    sa.sa_flags = 0;
    CHECK(name, sigaction(SIGUSR2, &sa, &old2) == 0);
    /* The action reads back as it was set. */
    CHECK(name, sigaction(SIGUSR2, NULL, &got) == 0 && got.sa_handler == on_restart_signal &&
                    !(got.sa_flags & (SA_RESTART | SA_SIGINFO)));
    restart_reader = gettid();
    restart_sock = s;
    reader = pthread_self();
    restart_sig = SIGUSR2;
    CHECK(name, pthread_create(&kicker, NULL, restart_kicker, &reader) == 0);
    errno = 0;
    ssize_t r = recv(s, in, 4, MSG_WAITALL);
    pthread_join(kicker, NULL);
    int interrupted = r == -1 && errno == EINTR;
    restart_sig = SIGUSR1;
    CHECK(name, pthread_create(&kicker, NULL, restart_kicker, &reader) == 0);
    r = recv(s, in, 4, MSG_WAITALL);
    pthread_join(kicker, NULL);
    sigaction(SIGUSR1, &old, NULL);
    sigaction(SIGUSR2, &old2, NULL);
    close(s); /* (the server waits for it) */
    CHECK(name, interrupted);
    CHECK(name, r == 4 && !memcmp(in, "data", 4));
    printf("ok %s\n", name);
}

/* SO_RCVLOWAT 8 (as TCP does, tcp(7) / socket(7)): poll, select and epoll (level and
 * edge) report the connection readable only once 8 bytes are there, a blocking read
 * waits for min(8, len) bytes (across the peer's writes), a non-blocking one takes
 * what is there, and the end of the stream wakes with fewer. Over omx the 3 bytes of
 * the first write were reported readable, and a blocking read returned the 5 of one
 * write. */
static int lowat_sock;
static void *lowat_kicker(void *arg)
{
    (void)arg;
    wait_blocked(restart_reader);
    write(lowat_sock, "g", 1);
    return NULL;
}

static void t_rcvlowat(void)
{
    const char *name = "rcvlowat";
    int s = dial(C_LOWAT, 0), lowat = 8, ep = epoll_create1(EPOLL_CLOEXEC), et = epoll_create1(EPOLL_CLOEXEC);
    char in[16] = {0};
    struct pollfd p = {.fd = s, .events = POLLIN};
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s}, out[2];
    struct timeval zero = {0, 0};
    fd_set r;
    pthread_t kicker;
    /* (A failure closes the connection: the server waits on it.) */
#define LCHECK(cond)                                                                       \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fail(name, #cond);                                                             \
            close(s);                                                                      \
            return;                                                                        \
        }                                                                                  \
    } while (0)
    CHECK(name, s >= 0 && ep >= 0 && et >= 0);
    /* "abc" is there first (the kernel wakes a sleeping reader only once SO_RCVLOWAT
     * bytes wait, whatever its length). */
    LCHECK(recv(s, in, 3, MSG_PEEK) == 3 && !memcmp(in, "abc", 3));
    LCHECK(setsockopt(s, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) == 0);
    LCHECK(epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    ev.events = EPOLLIN | EPOLLET;
    LCHECK(epoll_ctl(et, EPOLL_CTL_ADD, s, &ev) == 0);
    /* A peek of 3 takes min(8, 3): there. */
    LCHECK(recv(s, in, 3, MSG_PEEK) == 3 && !memcmp(in, "abc", 3));
    LCHECK(poll(&p, 1, 0) == 0);
    FD_ZERO(&r);
    FD_SET(s, &r);
    LCHECK(select(s + 1, &r, NULL, NULL, &zero) == 0);
    LCHECK(epoll_wait(ep, out, 2, 0) == 0 && epoll_wait(et, out, 2, 0) == 0);
    /* A non-blocking read takes what is there. */
    LCHECK(recv(s, in, sizeof in, MSG_DONTWAIT) == 3 && !memcmp(in, "abc", 3));
    /* A blocking read of 16 waits for 8 (across two writes: the kernel wakes it only
     * once 8 wait, so it starts with none); the go leaves once it is blocked. */
    restart_reader = gettid();
    lowat_sock = s;
    LCHECK(pthread_create(&kicker, NULL, lowat_kicker, NULL) == 0);
    ssize_t n = read(s, in, sizeof in);
    pthread_join(kicker, NULL);
    LCHECK(n == 8 && !memcmp(in, "defghijk", 8));
    LCHECK(poll(&p, 1, 0) == 0 && epoll_wait(ep, out, 2, 0) == 0);
    /* 2 bytes and the FIN: readable with fewer than 8, read alone, then the end. */
    LCHECK(write(s, "g", 1) == 1);
    LCHECK(poll(&p, 1, -1) == 1 && (p.revents & POLLIN));
    LCHECK(epoll_wait(ep, out, 2, -1) == 1 && (out[0].events & EPOLLIN));
    LCHECK(epoll_wait(et, out, 2, -1) == 1 && (out[0].events & EPOLLIN));
    LCHECK(read(s, in, sizeof in) == 2 && !memcmp(in, "xy", 2));
    LCHECK(read(s, in, sizeof in) == 0);
    close(ep);
    close(et);
    close(s);
    printf("ok %s\n", name);
#undef LCHECK
}

static void t_waitall(void)
{
    const char *name = "waitall";
    int s = dial(C_WAITALL, 0);
    static char in[1000];
    CHECK(name, s >= 0);
    CHECK(name, recv(s, in, sizeof in, MSG_WAITALL) == (ssize_t)sizeof in);
    close(s);
    printf("ok %s\n", name);
}

static void t_half_close_dup(void)
{
    const char *name = "half-close-dup";
    int s = dial(C_HALF_CLOSE, 0);
    uint64_t reply[2], sum = 0;
    static unsigned char out[1 << 20];
    CHECK(name, s >= 0);
    for (size_t i = 0; i < sizeof out; i++)
        sum += out[i] = pattern(i);
    int d = dup(s), d2 = dup2(s, 77);
    CHECK(name, d >= 0 && d2 == 77);
    CHECK(name, close(s) == 0); /* the stream lives on in its duplicates */
    CHECK(name, write_full(d, out, sizeof out / 2) == 0);
    CHECK(name, write_full(77, out + sizeof out / 2, sizeof out / 2) == 0);
    CHECK(name, shutdown(d, SHUT_WR) == 0);
    errno = 0;
    CHECK(name, send(77, "x", 1, MSG_NOSIGNAL) == -1 && errno == EPIPE);
    CHECK(name, read_full(77, reply, sizeof reply) == 0);
    CHECK(name, reply[0] == sizeof out && reply[1] == sum);
    CHECK(name, read(d, reply, 1) == 0);
    close(d);
    close(77);
    printf("ok %s\n", name);
}

/* The peer's large blocking writes, read in small odd pieces with MSG_PEEK between
 * (every byte checked, the peek equal to the read after it); then large writes of our
 * own, each overwritten once its write returned, counted and summed by the peer. */
static void t_large_writes(void)
{
    const char *name = "large-writes";
    int s = dial(C_LARGE_WRITES, 0);
    size_t total = 0, off = 0, piece = 1000;
    unsigned char *in = malloc(LARGE_MAX), *pk = malloc(LARGE_MAX), *out = malloc(LARGE_MAX);
    uint64_t reply[2], sum = 0, bytes = 0;
    int bad = 0;
    CHECK(name, s >= 0 && in && pk && out);
    for (size_t k = 0; k < sizeof large_sizes / sizeof large_sizes[0]; k++)
        total += large_sizes[k];
    while (off < total && !bad) {
        size_t want = piece < total - off ? piece : total - off;
        ssize_t p = recv(s, pk, want, MSG_PEEK);
        ssize_t r = recv(s, in, want, 0);
        if (p <= 0 || r < p || memcmp(pk, in, (size_t)p)) {
            bad = 1;
            break;
        }
        for (ssize_t i = 0; i < r; i++)
            if (in[i] != pattern(off + (size_t)i))
                bad = 1;
        off += (size_t)r;
        piece = piece * 3 % 200003 + 1; /* 1 B to 200 KB, odd sizes */
    }
    CHECK(name, !bad && off == total);
    for (size_t k = 0; k < sizeof large_sizes / sizeof large_sizes[0]; k++) {
        size_t n = large_sizes[k];
        for (size_t i = 0; i < n; i++)
            sum += out[i] = pattern(bytes + i);
        CHECK(name, write_full(s, out, n) == 0);
        memset(out, 0xee, n);
        bytes += n;
    }
    CHECK(name, shutdown(s, SHUT_WR) == 0);
    CHECK(name, read_full(s, reply, sizeof reply) == 0);
    CHECK(name, reply[0] == bytes && reply[1] == sum);
    char c;
    CHECK(name, read(s, &c, 1) == 0);
    free(in);
    free(pk);
    free(out);
    close(s);
    printf("ok %s\n", name);
}

static void t_close_delivers(void)
{
    const char *name = "close-delivers";
    int s = dial(C_CLOSE_DELIVERS, 0);
    unsigned char *in = malloc(BIG);
    CHECK(name, s >= 0 && in);
    CHECK(name, read_full(s, in, BIG) == 0);
    for (size_t i = 0; i < BIG; i++)
        CHECK(name, in[i] == pattern(i));
    char c;
    CHECK(name, read(s, &c, 1) == 0);
    free(in);
    close(s);
    printf("ok %s\n", name);
}

static volatile sig_atomic_t sigpipes;
static void on_sigpipe(int sig) { (void)sig; sigpipes++; }

static void t_epipe(void)
{
    const char *name = "epipe-sigpipe";
    int s = dial(C_EPIPE, 0), i;
    char c;
    CHECK(name, s >= 0);
    CHECK(name, read(s, &c, 1) == 0); /* the peer closed */
    signal(SIGPIPE, on_sigpipe);
    /* The first writes may be taken; the peer's reset then makes them fail. */
    for (i = 0; i < 1000000; i++) {
        if (send(s, "x", 1, MSG_NOSIGNAL) < 0)
            break;
        sched_yield();
    }
    CHECK(name, i < 1000000 && (errno == EPIPE || errno == ECONNRESET));
    errno = 0;
    CHECK(name, write(s, "x", 1) == -1 && errno == EPIPE && sigpipes == 1);
    signal(SIGPIPE, SIG_DFL);
    close(s);
    printf("ok %s\n", name);
}

static void t_nonblocking_writes(void)
{
    const char *name = "nonblocking-writes";
    int s = dial(C_SILENT, SOCK_NONBLOCK);
    static unsigned char out[1 << 16];
    uint64_t sent = 0, got = 0;
    ssize_t r;
    /* EPOLLOUT, level- (lt) and edge-triggered (et): room to write, as poll's POLLOUT. */
    int lt = epoll_create1(EPOLL_CLOEXEC), et = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLOUT, .data.fd = s}, got_ev[2];
    CHECK(name, s >= 0 && lt >= 0 && et >= 0);
    struct pollfd in = {.fd = s, .events = POLLIN};
    char k = 0;
    CHECK(name, poll(&in, 1, -1) == 1 && read(s, &k, 1) == 1 && k == 'k');
    CHECK(name, epoll_ctl(lt, EPOLL_CTL_ADD, s, &ev) == 0);
    ev.events = EPOLLOUT | EPOLLET;
    CHECK(name, epoll_ctl(et, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK(name, epoll_wait(lt, got_ev, 2, 0) == 1 && got_ev[0].events == EPOLLOUT &&
                    got_ev[0].data.fd == s);
    CHECK(name, epoll_wait(lt, got_ev, 2, 0) == 1); /* level: again */
    CHECK(name, epoll_wait(et, got_ev, 2, 0) == 1 && got_ev[0].events == EPOLLOUT);
    CHECK(name, epoll_wait(et, got_ev, 2, 0) == 0); /* edge: once */
    /* The reader does not read: the writer meets EAGAIN with memory bounded. */
    while ((r = send(s, out, sizeof out, MSG_NOSIGNAL)) > 0 && sent < (256u << 20))
        sent += (uint64_t)r;
    CHECK(name, r == -1 && errno == EAGAIN);
    struct pollfd p = {.fd = s, .events = POLLOUT};
    CHECK(name, poll(&p, 1, 0) == 0); /* full: not writable */
    CHECK(name, epoll_wait(lt, got_ev, 2, 0) == 0 && epoll_wait(et, got_ev, 2, 0) == 0);
    close(dial(0, 0)); /* the reader starts reading */
    /* Room again: one edge, and the level. */
    CHECK(name, epoll_wait(et, got_ev, 2, -1) == 1 && got_ev[0].events == EPOLLOUT);
    CHECK(name, epoll_wait(lt, got_ev, 2, -1) == 1 && got_ev[0].events == EPOLLOUT);
    close(lt);
    close(et);
    CHECK(name, shutdown(s, SHUT_WR) == 0);
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK);
    CHECK(name, read_full(s, &got, sizeof got) == 0 && got == sent);
    close(s);
    printf("ok %s\n", name);
}

/* Blocking writes with SO_SNDTIMEO against a reader that does not read: once the
 * send buffer (over omx: the window) is full, a write gives up after the timeout
 * with EAGAIN (or the bytes it wrote). Over omx it once waited for the reader, and
 * writes of 128 KiB and more (sent from the program's memory) did until the timeout
 * made them copy. */
static void sndtimeo(const char *name, size_t len)
{
    int s = dial(C_SILENT, 0);
    unsigned char *out = calloc(1, len);
    struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
    uint64_t sent = 0, got = 0;
    ssize_t r;
    char k = 0;
    CHECK(name, out != NULL);
    CHECK(name, s >= 0 && read(s, &k, 1) == 1 && k == 'k');
    CHECK(name, setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0);
    while ((r = send(s, out, len, MSG_NOSIGNAL)) > 0 && sent < (256u << 20))
        sent += (uint64_t)r;
    CHECK(name, r == -1 && errno == EAGAIN);
    close(dial(0, 0)); /* the reader starts reading */
    CHECK(name, shutdown(s, SHUT_WR) == 0);
    CHECK(name, read_full(s, &got, sizeof got) == 0 && got == sent);
    close(s);
    free(out);
    printf("ok %s\n", name);
}

static void t_sndtimeo(void)
{
    sndtimeo("sndtimeo", 1 << 16);
    sndtimeo("sndtimeo-large-writes", 1 << 20);
}

/* A blocking write that finds the send buffer (over omx: the window) full, against a
 * reader that does not read, is ended by a signal handler without SA_RESTART: the
 * bytes written so far, then EINTR (signal(7)). A timer rings every 20 ms while the
 * writes go on. Over omx the write waited for the reader through every signal. */
static void on_alarm(int sig) { (void)sig; }
static void t_write_eintr(void)
{
    const char *name = "write-eintr";
    int s = dial(C_SILENT, 0);
    static unsigned char out[1 << 16];
    struct sigaction sa = {.sa_handler = on_alarm, .sa_flags = 0}, old;
    struct itimerval every = {{0, 20000}, {0, 20000}}, off = {{0, 0}, {0, 0}};
    uint64_t sent = 0, got = 0;
    ssize_t r;
    char k = 0;
    CHECK(name, s >= 0 && read(s, &k, 1) == 1 && k == 'k');
    sigemptyset(&sa.sa_mask);
    CHECK(name, sigaction(SIGALRM, &sa, &old) == 0);
    CHECK(name, setitimer(ITIMER_REAL, &every, NULL) == 0);
    while ((r = send(s, out, sizeof out, MSG_NOSIGNAL)) > 0 && sent < (256u << 20))
        sent += (uint64_t)r;
    int e = errno;
    CHECK(name, setitimer(ITIMER_REAL, &off, NULL) == 0);
    sigaction(SIGALRM, &old, NULL);
    CHECK(name, r == -1 && e == EINTR);
    close(dial(0, 0)); /* the reader starts reading */
    CHECK(name, shutdown(s, SHUT_WR) == 0);
    CHECK(name, read_full(s, &got, sizeof got) == 0 && got == sent);
    close(s);
    printf("ok %s\n", name);
}

static void t_readiness_mix(void)
{
    const char *name = "poll-select-epoll-mix";
    int s = dial(C_ECHO, 0), pfd[2], ep = epoll_create1(EPOLL_CLOEXEC), n;
    struct epoll_event ev = {.events = EPOLLIN}, out[4];
    char c;
    CHECK(name, s >= 0 && pipe(pfd) == 0 && ep >= 0);
    ev.data.fd = s;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    ev.data.fd = pfd[0];
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &ev) == 0);
    CHECK(name, epoll_wait(ep, out, 4, 0) == 0);
    CHECK(name, write(pfd[1], "p", 1) == 1);
    CHECK(name, epoll_wait(ep, out, 4, -1) == 1 && out[0].data.fd == pfd[0]);
    CHECK(name, read(pfd[0], &c, 1) == 1);
    CHECK(name, write(s, "e", 1) == 1);
    n = epoll_wait(ep, out, 4, -1);
    CHECK(name, n >= 1 && out[0].data.fd == s);
    /* poll and select see the same. */
    struct pollfd p[2] = {{.fd = pfd[0], .events = POLLIN}, {.fd = s, .events = POLLIN}};
    CHECK(name, poll(p, 2, -1) == 1 && p[1].revents == POLLIN && p[0].revents == 0);
    fd_set r;
    FD_ZERO(&r);
    FD_SET(s, &r);
    FD_SET(pfd[0], &r);
    CHECK(name, select((s > pfd[0] ? s : pfd[0]) + 1, &r, NULL, NULL, NULL) == 1 && FD_ISSET(s, &r));
    CHECK(name, read(s, &c, 1) == 1 && c == 'e');
    CHECK(name, poll(p, 2, 0) == 0);
    /* Edge-triggered: one event per arrival, none while it stays unread. */
    ev.events = EPOLLIN | EPOLLET;
    ev.data.fd = s;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) == 0);
    CHECK(name, write(s, "f", 1) == 1);
    CHECK(name, epoll_wait(ep, out, 4, -1) == 1 && out[0].data.fd == s);
    CHECK(name, epoll_wait(ep, out, 4, 0) == 0);
    CHECK(name, read(s, &c, 1) == 1 && c == 'f');
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL) == 0);
    close(ep);
    close(pfd[0]);
    close(pfd[1]);
    close(s);
    printf("ok %s\n", name);
}

/* Readiness asked for after the data arrived (nobody was looking then): an epoll set
 * joined later, a poll, a select and a thread waiting in poll all see it at once, and
 * nothing once it is read. */
static void *poll_waiter(void *arg)
{
    struct pollfd p = {.fd = *(int *)arg, .events = POLLIN};
    *(int *)arg = poll(&p, 1, -1) == 1 && p.revents == POLLIN;
    return NULL;
}

static void t_readiness_late(void)
{
    const char *name = "readiness-late-watch";
    int s = dial(C_ECHO, 0), ep = epoll_create1(EPOLL_CLOEXEC), waiter;
    struct epoll_event ev = {.events = EPOLLIN}, out[2];
    struct pollfd p = {.events = POLLIN};
    struct timeval zero = {0, 0};
    fd_set r;
    pthread_t t;
    char c[2];
    CHECK(name, s >= 0 && ep >= 0);
    p.fd = ev.data.fd = s;
    /* A blocking peek waits for the echo without taking it. */
    CHECK(name, write(s, "a", 1) == 1 && recv(s, c, 1, MSG_PEEK) == 1 && c[0] == 'a');
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK(name, epoll_wait(ep, out, 2, 0) == 1 && out[0].events == EPOLLIN);
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_DEL, s, NULL) == 0);
    CHECK(name, poll(&p, 1, 0) == 1 && p.revents == POLLIN);
    FD_ZERO(&r);
    FD_SET(s, &r);
    CHECK(name, select(s + 1, &r, NULL, NULL, &zero) == 1 && FD_ISSET(s, &r));
    CHECK(name, read(s, c, 1) == 1 && c[0] == 'a');
    CHECK(name, poll(&p, 1, 0) == 0);
    /* The rest of a message read in part (or its second byte, on TCP). */
    CHECK(name, write(s, "bc", 2) == 2 && read(s, c, 1) == 1 && c[0] == 'b');
    CHECK(name, poll(&p, 1, -1) == 1 && p.revents == POLLIN);
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK(name, epoll_wait(ep, out, 2, 0) == 1 && read(s, c, 1) == 1 && c[0] == 'c');
    CHECK(name, epoll_wait(ep, out, 2, 0) == 0 && poll(&p, 1, 0) == 0);
    /* Another thread waits in poll while this one only writes. */
    waiter = s;
    CHECK(name, pthread_create(&t, NULL, poll_waiter, &waiter) == 0);
    CHECK(name, write(s, "d", 1) == 1);
    CHECK(name, pthread_join(t, NULL) == 0 && waiter == 1);
    CHECK(name, epoll_wait(ep, out, 2, -1) == 1 && read(s, c, 1) == 1 && c[0] == 'd');
    CHECK(name, epoll_wait(ep, out, 2, 0) == 0 && poll(&p, 1, 0) == 0);
    close(ep);
    close(s);
    printf("ok %s\n", name);
}

/* EPOLLONESHOT: one event, then nothing (readable or writable) until EPOLL_CTL_MOD. */
static void t_epoll_oneshot(void)
{
    const char *name = "epoll-oneshot";
    int s = dial(C_ECHO, 0), ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLONESHOT}, out[4];
    struct pollfd p = {.events = POLLIN};
    char c;
    CHECK(name, s >= 0 && ep >= 0);
    p.fd = s;
    /* Write and read once first: a carried connection then writes on omx. */
    CHECK(name, echoed_once(s));
    ev.data.fd = s;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    CHECK(name, epoll_wait(ep, out, 4, -1) == 1 && out[0].data.fd == s &&
                    out[0].events == EPOLLOUT);
    CHECK(name, epoll_wait(ep, out, 4, 0) == 0);
    /* Readable now (poll says so), still nothing from the disarmed member. */
    CHECK(name, write(s, "b", 1) == 1 && poll(&p, 1, -1) == 1);
    CHECK(name, epoll_wait(ep, out, 4, 0) == 0);
    /* Re-armed for reading only: one EPOLLIN, then nothing again. */
    ev.events = EPOLLIN | EPOLLONESHOT;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) == 0);
    CHECK(name, epoll_wait(ep, out, 4, -1) == 1 && out[0].data.fd == s &&
                    out[0].events == EPOLLIN);
    CHECK(name, epoll_wait(ep, out, 4, 0) == 0);
    CHECK(name, read(s, &c, 1) == 1 && c == 'b');
    /* Re-armed for both while readable and writable: one event holding both. */
    CHECK(name, write(s, "c", 1) == 1 && poll(&p, 1, -1) == 1);
    ev.events = EPOLLIN | EPOLLOUT | EPOLLONESHOT;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev) == 0);
    CHECK(name, epoll_wait(ep, out, 4, -1) == 1 && out[0].data.fd == s &&
                    out[0].events == (EPOLLIN | EPOLLOUT));
    CHECK(name, epoll_wait(ep, out, 4, 0) == 0);
    CHECK(name, read(s, &c, 1) == 1 && c == 'c');
    close(ep);
    close(s);
    printf("ok %s\n", name);
}

static void t_sendfile(void)
{
    const char *name = "sendfile";
    char path[] = "/tmp/omx-conformance.XXXXXX";
    int f = mkstemp(path), s = dial(C_READ_COUNT, 0);
    static unsigned char out[3 << 20];
    uint64_t sum = 0, reply[2];
    off_t off = 0;
    CHECK(name, f >= 0 && s >= 0);
    unlink(path);
    for (size_t i = 0; i < sizeof out; i++)
        sum += out[i] = pattern(i);
    CHECK(name, write(f, out, sizeof out) == (ssize_t)sizeof out);
    while (off < (off_t)sizeof out) {
        ssize_t r = sendfile(s, f, &off, sizeof out - (size_t)off);
        CHECK(name, r > 0);
    }
    shutdown(s, SHUT_WR);
    CHECK(name, read_full(s, reply, sizeof reply) == 0 && reply[0] == sizeof out && reply[1] == sum);
    close(f);
    close(s);
    printf("ok %s\n", name);
}

/* One thread blocked reading while another writes what the peer answers: the write
 * must not wait for the read (both would then wait forever). */
struct duplex_reader {
    int fd, ready[2];
    char in[5];
    int ok;
};

static void *duplex_read(void *arg)
{
    struct duplex_reader *r = arg;
    if (write(r->ready[1], "r", 1) == 1)
        r->ok = read_full(r->fd, r->in, sizeof r->in) == 0 && !memcmp(r->in, "duplx", 5);
    return NULL;
}

/* A check's end: its line, "ok" or the failure `why` (with errno as it was), then the
 * connection closed. */
static void end_check(const char *name, int s, const char *why)
{
    if (why)
        fail(name, why);
    else
        printf("ok %s\n", name);
    close(s);
}

static volatile sig_atomic_t sigurgs;
static void on_sigurg(int sig) { (void)sig; sigurgs++; }

/* The server sends "hello", an urgent "U", "world" (read_urgent's checks), SIGURG
 * reaches the socket's owner, then a MiB each way. */
static void urgent_from_server(int oob_inline)
{
    const char *name = oob_inline ? "urgent-data-inline" : "urgent-data";
    int s = dial(C_URGENT, 0), one = 1;
    const char *why;
    struct sigaction sa = {.sa_handler = on_sigurg, .sa_flags = SA_RESTART}, old;
    CHECK(name, s >= 0);
    CHECK(name, !oob_inline || setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &one, sizeof one) == 0);
    CHECK(name, sigaction(SIGURG, &sa, &old) == 0);
    sigurgs = 0;
    CHECK(name, fcntl(s, F_SETOWN, getpid()) == 0 && fcntl(s, F_GETOWN) == getpid());
    CHECK(name, write_full(s, "g", 1) == 0);
    why = read_urgent(s, oob_inline);
    if (why) {
        end_check(name, s, why);
        return;
    }
    /* SIGURG was sent when the urgent pointer came (before POLLPRI): wait for the
     * handler, 20 s at most. */
    for (int i = 0; i < 2000 && sigurgs == 0; i++)
        poll(NULL, 0, 10);
    sigaction(SIGURG, &old, NULL);
    CHECK(name, sigurgs > 0);
    why = urgent_exchange_client(s);
    end_check(name, s, why);
}

/* The server sends urgent data; once it is there (POLLPRI), the client sends its own
 * before it reads anything (over omx the server left omx first: the client follows it
 * to TCP); each end then reads the other's as TCP gives it. */
static void t_urgent_both(void)
{
    const char *name = "urgent-data-both-ends";
    int s = dial(C_URGENT_BOTH, 0);
    char v = 0;
    CHECK(name, s >= 0);
    CHECK(name, write_full(s, "g", 1) == 0);
    CHECK(name, pollpri(s));
    CHECK(name, send_urgent(s) == 0);
    const char *why = read_urgent(s, 0);
    if (!why && (read_full(s, &v, 1) || v != 'y'))
        why = "the server did not read the client's urgent data as TCP gives it";
    if (!why)
        why = urgent_exchange_client(s);
    end_check(name, s, why);
}

static void t_urgent(void)
{
    urgent_from_server(0);
    urgent_from_server(1);
    const char *name = "urgent-data-to-server";
    int s = dial(C_URGENT_IN, 0);
    char v = 0, pre[3];
    CHECK(name, s >= 0);
    struct pollfd p = {.fd = s, .events = POLLIN};
    CHECK(name, poll(&p, 1, 20000) == 1 && (p.revents & POLLIN));
    CHECK(name, send_urgent(s) == 0);
    CHECK(name, read_full(s, pre, 3) == 0 && !memcmp(pre, "pre", 3));
    CHECK(name, read_full(s, &v, 1) == 0 && v == 'y');
    const char *why = urgent_exchange_client(s);
    end_check(name, s, why);
}

static void t_full_duplex(void)
{
    const char *name = "full-duplex-threads";
    struct duplex_reader r = {.fd = dial(C_ECHO, 0)};
    pthread_t t;
    char c;
    CHECK(name, r.fd >= 0 && pipe(r.ready) == 0);
    CHECK(name, pthread_create(&t, NULL, duplex_read, &r) == 0);
    CHECK(name, read(r.ready[0], &c, 1) == 1);
    for (int i = 0; i < 100; i++)
        sched_yield(); /* most often the reader is blocked by now; correct either way */
    CHECK(name, write_full(r.fd, "duplx", 5) == 0);
    CHECK(name, pthread_join(t, NULL) == 0 && r.ok);
    close(r.ready[0]);
    close(r.ready[1]);
    close(r.fd);
    printf("ok %s\n", name);
}

/* Both ends write more than one eager message (in 64 KiB writes), shut their writing side down, and
 * only then read to the end: TCP's shutdown returns at once, its FIN queued behind the
 * data. Over omx shutdown once waited for the peer to take every byte, and the two
 * ends waited for each other for ever. */
static void t_both_shut(void)
{
    const char *name = "both-shut-first";
    unsigned char *out = malloc(BOTH_SHUT);
    uint64_t sum = 0, want = 0;
    for (size_t i = 0; i < BOTH_SHUT; i++) {
        out[i] = pattern(i + 5);
        want += pattern(i + 3);
    }
    int s = dial(C_BOTH_SHUT, 0);
    CHECK(name, s >= 0 && out);
    CHECK(name, write_chunks(s, out, BOTH_SHUT) == 0);
    CHECK(name, shutdown(s, SHUT_WR) == 0);
    CHECK(name, send(s, "x", 1, MSG_NOSIGNAL) == -1 && errno == EPIPE);
    CHECK(name, drain(s, &sum) == BOTH_SHUT && sum == want);
    close(s);
    free(out);
    printf("ok %s\n", name);
}

/* Both ends make one blocking write of 256 KiB, then read the other's: TCP's buffers
 * take both writes. Over omx a blocking write from 128 KiB on (this run's direct
 * size) returns once the peer pulled it, and the peer pulled only for a read: the two
 * writes waited for each other for ever. */
static void t_both_write(void)
{
    const char *name = "both-write-first";
    unsigned char *io = malloc(BOTH_SHUT);
    uint64_t sum = 0, want = 0, got = 0;
    char k = 0;
    int s = dial(C_BOTH_WRITE, 0);
    CHECK(name, s >= 0 && io && read(s, &k, 1) == 1 && k == 'k');
    close(dial(0, 0)); /* go */
    for (size_t i = 0; i < BOTH_SHUT; i++) {
        io[i] = pattern(i + 5);
        want += pattern(i + 5);
    }
    CHECK(name, write_full(s, io, BOTH_SHUT) == 0);
    CHECK(name, read_full(s, io, BOTH_SHUT) == 0);
    for (size_t i = 0; i < BOTH_SHUT; i++)
        sum += io[i] == pattern(i + 3);
    CHECK(name, sum == BOTH_SHUT);
    CHECK(name, read_full(s, &got, sizeof got) == 0 && got == want);
    close(s);
    free(io);
    printf("ok %s\n", name);
}

/* The server reads one byte of the 1000 the client wrote (in one write: when the
 * first has arrived, all have), then closes: TCP answers the unread bytes with a
 * reset, so the client's read fails with ECONNRESET (not end of file) and its next
 * write with EPIPE. Over omx the kernel socket held none of those bytes: it sent a
 * FIN, and the client read end of file. */
static void t_close_unread(void)
{
    const char *name = "close-unread-reset";
    static unsigned char out[1000];
    char c;
    int s = dial(C_UNREAD, 0);
    CHECK(name, s >= 0 && write_full(s, out, sizeof out) == 0);
    errno = 0;
    CHECK(name, read(s, &c, 1) == -1 && errno == ECONNRESET);
    errno = 0;
    CHECK(name, send(s, out, 10, MSG_NOSIGNAL) == -1 && errno == EPIPE);
    close(s);
    printf("ok %s\n", name);
}

/* The server closes (a FIN); once the client read the end of file, its first write
 * succeeds (TCP queues it; the closed peer answers with a reset), and once the reset
 * came (POLLERR or POLLHUP) the next write fails with EPIPE. Over omx the writes went
 * on succeeding: the kernel socket was looked at once in 16 writes only. */
static void t_write_after_close(void)
{
    const char *name = "write-after-peer-close";
    char c;
    int s = dial(C_CLOSER, 0);
    struct pollfd p = {.fd = s, .events = 0}; /* POLLERR and POLLHUP only */
    CHECK(name, s >= 0 && read(s, &c, 1) == 0);
    CHECK(name, send(s, "1234567890", 10, MSG_NOSIGNAL) == 10);
    do
        CHECK(name, poll(&p, 1, -1) == 1);
    while (!(p.revents & (POLLERR | POLLHUP)));
    errno = 0;
    CHECK(name, send(s, "1234567890", 10, MSG_NOSIGNAL) == -1 && errno == EPIPE);
    close(s);
    printf("ok %s\n", name);
}

/* As write-after-peer-close, but the client never reads: once the FIN is there
 * (POLLRDHUP), the first write succeeds and, once the reset came, the next fails
 * with EPIPE. Over omx the second write went on succeeding (the kernel socket was
 * looked at once in 16 writes): no reset ever came (the wait for it gives up after
 * 10 s, a failure). */
static void t_write_unread_close(void)
{
    const char *name = "write-before-eof";
    int s = dial(C_CLOSER, 0);
    struct pollfd p = {.fd = s, .events = POLLRDHUP};
    CHECK(name, s >= 0);
    do
        CHECK(name, poll(&p, 1, -1) == 1);
    while (!(p.revents & POLLRDHUP));
    CHECK(name, send(s, "1234567890", 10, MSG_NOSIGNAL) == 10);
    p.events = 0; /* POLLERR and POLLHUP only */
    do
        CHECK(name, poll(&p, 1, 10000) == 1);
    while (!(p.revents & (POLLERR | POLLHUP)));
    errno = 0;
    CHECK(name, send(s, "1234567890", 10, MSG_NOSIGNAL) == -1 && errno == EPIPE);
    close(s);
    printf("ok %s\n", name);
}

/* sendmmsg, splice from a pipe, recvmmsg and splice into a pipe on the stream: over
 * omx they went to the kernel socket beside the stream (the bytes of sendmmsg and
 * splice were lost, a splice out read end of file, recvmmsg waited for ever). */
static void t_mmsg_splice(void)
{
    const char *name = "mmsg-splice";
    int s = dial(C_ECHO, 0), p[2];
    char a[2][8] = {{0}}, in[32] = {0};
    struct iovec v[2] = {{"def", 3}, {"gh", 2}};
    struct mmsghdr m[2] = {{.msg_hdr = {.msg_iov = &v[0], .msg_iovlen = 1}},
                           {.msg_hdr = {.msg_iov = &v[1], .msg_iovlen = 1}}};
    CHECK(name, s >= 0 && pipe(p) == 0);
    CHECK(name, write(s, "abc", 3) == 3);
    CHECK(name, sendmmsg(s, m, 2, 0) == 2 && m[0].msg_len == 3 && m[1].msg_len == 2);
    CHECK(name, write(p[1], "SPLICE", 6) == 6 && splice(p[0], NULL, s, NULL, 6, 0) == 6);
    CHECK(name, write(s, "z", 1) == 1);
    /* The echo of all 15, in order. */
    CHECK(name, recv(s, in, 15, MSG_PEEK | MSG_WAITALL) == 15 && !memcmp(in, "abcdefghSPLICEz", 15));
    CHECK(name, splice(s, NULL, p[1], NULL, 5, 0) == 5 && read(p[0], in, sizeof in) == 5 && !memcmp(in, "abcde", 5));
    v[0].iov_base = a[0];
    v[1].iov_base = a[1];
    v[0].iov_len = v[1].iov_len = 8;
    CHECK(name, recvmmsg(s, m, 2, MSG_DONTWAIT, NULL) == 2 && m[0].msg_len == 8 && !memcmp(a[0], "fghSPLIC", 8));
    CHECK(name, m[1].msg_len == 2 && !memcmp(a[1], "Ez", 2));
    errno = 0;
    CHECK(name, recv(s, in, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN);
    close(p[0]);
    close(p[1]);
    close(s);
    printf("ok %s\n", name);
}

/* While one thread is blocked reading, another's FIONREAD (0), non-blocking read
 * (EAGAIN) and poll (nothing) answer at once, as TCP's; then a write's echo reaches
 * the reader. Over omx the blocked read held the connection: FIONREAD waited for it
 * (for ever: nothing else would come), and the reader once read a false end of
 * file. */
static pid_t blocked_tid;
static void *blocked_read(void *arg)
{
    struct duplex_reader *r = arg;
    __atomic_store_n(&blocked_tid, gettid(), __ATOMIC_RELEASE);
    r->ok = read_full(r->fd, r->in, sizeof r->in) == 0 && !memcmp(r->in, "abcde", 5);
    return NULL;
}

static void t_read_beside_blocked(void)
{
    const char *name = "read-beside-blocked";
    struct duplex_reader r = {.fd = dial(C_ECHO, 0)};
    struct pollfd p = {.fd = r.fd, .events = POLLIN};
    pthread_t t;
    int avail = -1;
    char c, path[64], line[64];
    CHECK(name, r.fd >= 0 && pthread_create(&t, NULL, blocked_read, &r) == 0);
    for (;;) { /* until the reader is blocked in a system call */
        FILE *f;
        /* Atomic: a plain load of this static (its address never escapes) may be
         * hoisted out of the loop, which then never ends (it did, at -O2, once the
         * file grew). */
        while (!__atomic_load_n(&blocked_tid, __ATOMIC_ACQUIRE))
            sched_yield();
        snprintf(path, sizeof path, "/proc/self/task/%d/syscall",
                 (int)__atomic_load_n(&blocked_tid, __ATOMIC_ACQUIRE));
        f = fopen(path, "r");
        line[0] = 0;
        if (f) {
            if (!fgets(line, sizeof line, f))
                line[0] = 0;
            fclose(f);
        }
        if (line[0] >= '0' && line[0] <= '9')
            break;
        sched_yield();
    }
    int fion = ioctl(r.fd, FIONREAD, &avail);
    errno = 0;
    ssize_t d = recv(r.fd, &c, 1, MSG_DONTWAIT);
    int derr = errno, polled = poll(&p, 1, 0);
    CHECK(name, write_full(r.fd, "abcde", 5) == 0 && pthread_join(t, NULL) == 0 && r.ok);
    CHECK(name, fion == 0 && avail == 0);
    CHECK(name, d == -1 && derr == EAGAIN);
    CHECK(name, polled == 0);
    close(r.fd);
    printf("ok %s\n", name);
}

/* Bad arguments answer as the kernel's and leave the stream as it was: a null buffer
 * with a length is EFAULT, an iovec count below 0 or above IOV_MAX (1024) EINVAL.
 * Over omx a null buffer read 0 bytes (an end of file), wrote 0, and the counts were
 * taken (1025 iovecs written). */
static void t_bad_args(void)
{
    const char *name = "bad-arguments";
    int s = dial(C_ECHO, 0);
    static struct iovec iov[1025];
    static char one[1025];
    char in[8];
    /* (Through volatiles: the compiler rejects the constants.) */
    void *volatile nul = NULL;
    volatile int neg = -1;
    for (int i = 0; i < 1025; i++) {
        iov[i].iov_base = &one[i];
        iov[i].iov_len = 1;
    }
    CHECK(name, s >= 0 && write(s, "q", 1) == 1 && recv(s, in, 1, MSG_PEEK) == 1);
    errno = 0;
    CHECK(name, read(s, nul, 10) == -1 && errno == EFAULT);
    errno = 0;
    CHECK(name, recv(s, nul, 10, 0) == -1 && errno == EFAULT);
    errno = 0;
    CHECK(name, write(s, nul, 10) == -1 && errno == EFAULT);
    errno = 0;
    CHECK(name, send(s, nul, 10, MSG_NOSIGNAL) == -1 && errno == EFAULT);
    errno = 0;
    CHECK(name, writev(s, iov, neg) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(name, writev(s, iov, 1025) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(name, readv(s, iov, neg) == -1 && errno == EINVAL);
    errno = 0;
    CHECK(name, readv(s, iov, 1025) == -1 && errno == EINVAL);
    CHECK(name, read(s, in, sizeof in) == 1 && in[0] == 'q');
    close(s);
    printf("ok %s\n", name);
}

/* A connection put in an epoll set before its first read or write, while nothing was
 * written to it: epoll and poll report nothing (the server speaks only after the
 * client's go), then the data. Over omx the server's hello (the library's own bytes
 * on the kernel socket) made it readable at once. */
static void t_epoll_first(void)
{
    const char *name = "epoll-before-first-use";
    int k = dial(C_HELLO_FIRST, 0), s = socket(AF_INET, SOCK_STREAM, 0), ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN}, out[2];
    struct pollfd p = {.events = POLLIN};
    char c = 0, in[8] = {0};
    CHECK(name, k >= 0 && s >= 0 && ep >= 0 && connect(s, (struct sockaddr *)&peer, sizeof peer) == 0);
    ev.data.fd = p.fd = s;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    /* The server accepted the connection (over omx: its hello is there). */
    CHECK(name, read(k, &c, 1) == 1 && c == 'k');
    int quiet = epoll_wait(ep, out, 2, 0) == 0 && poll(&p, 1, 0) == 0;
    CHECK(name, write(s, "g", 1) == 1);
    CHECK(name, epoll_wait(ep, out, 2, -1) == 1 && (out[0].events & EPOLLIN));
    CHECK(name, read_full(s, in, 4) == 0 && !memcmp(in, "data", 4));
    close(ep);
    close(s);
    close(k);
    CHECK(name, quiet);
    printf("ok %s\n", name);
}

static void t_connect_errors(void)
{
    const char *name = "connect-nonblocking-refused";
    struct sockaddr_in closed = peer;
    int s = dial(C_SINK, SOCK_NONBLOCK); /* EINPROGRESS, then SO_ERROR 0 */
    CHECK(name, s >= 0);
    close(s);
    closed.sin_port = htons(ntohs(peer.sin_port) + 1);
    s = socket(AF_INET, SOCK_STREAM, 0);
    errno = 0;
    CHECK(name, connect(s, (struct sockaddr *)&closed, sizeof closed) == -1 && errno == ECONNREFUSED);
    close(s);
    printf("ok %s\n", name);
}

/* Non-blocking writev of three buffers (7 MiB in all, more than the window) until all
 * is written, POLLOUT between: the peer counts and sums every byte. Over omx a
 * non-blocking writev gathers only as much as the window can take. */
static void t_writev_nonblocking(void)
{
    const char *name = "writev-nonblocking";
    size_t sizes[3] = {3 << 20, 5, (4 << 20) + 3}, total = 0, off = 0;
    unsigned char *buf[3];
    uint64_t sum = 0, reply[2];
    int s = dial(C_READ_COUNT, SOCK_NONBLOCK);
    CHECK(name, s >= 0);
    for (int i = 0; i < 3; i++) {
        buf[i] = malloc(sizes[i]);
        for (size_t j = 0; j < sizes[i]; j++, total++) {
            buf[i][j] = pattern(total);
            sum += buf[i][j];
        }
    }
    while (off < total) {
        struct iovec v[3];
        int n = 0;
        size_t skip = off;
        for (int i = 0; i < 3; i++) {
            if (skip >= sizes[i]) {
                skip -= sizes[i];
                continue;
            }
            v[n].iov_base = buf[i] + skip;
            v[n++].iov_len = sizes[i] - skip;
            skip = 0;
        }
        ssize_t r = writev(s, v, n);
        if (r < 0 && errno == EAGAIN) {
            struct pollfd p = {.fd = s, .events = POLLOUT};
            CHECK(name, poll(&p, 1, -1) == 1);
            continue;
        }
        CHECK(name, r > 0);
        off += (size_t)r;
    }
    CHECK(name, shutdown(s, SHUT_WR) == 0);
    CHECK(name, fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) == 0);
    CHECK(name, read_full(s, reply, sizeof reply) == 0);
    CHECK(name, reply[0] == total && reply[1] == sum);
    for (int i = 0; i < 3; i++)
        free(buf[i]);
    close(s);
    printf("ok %s\n", name);
}

/* A connect again on a socket whose non-blocking connect completed (hiredis, so
 * redis-cli and redis-benchmark, does it): 0 or EISCONN, as the kernel says, and the
 * connection works. Over omx it once set the connection up afresh under a new id, and
 * the server's answers went to the id the SYN had offered: the read waited for ever. */
static void t_connect_again(void)
{
    const char *name = "connect-again";
    int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), r, err = -1;
    unsigned char k = C_ECHO;
    char in[5] = {0};
    struct pollfd p = {.events = POLLOUT};
    socklen_t len = sizeof err;
    CHECK(name, s >= 0);
    r = connect(s, (struct sockaddr *)&peer, sizeof peer);
    CHECK(name, r == 0 || errno == EINPROGRESS);
    p.fd = s;
    CHECK(name, poll(&p, 1, -1) == 1 && (p.revents & POLLOUT));
    CHECK(name, getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0);
    r = connect(s, (struct sockaddr *)&peer, sizeof peer);
    CHECK(name, r == 0 || errno == EISCONN);
    CHECK(name, fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) == 0);
    CHECK(name, write_full(s, &k, 1) == 0 && write_full(s, "again", 5) == 0);
    CHECK(name, read_full(s, in, 5) == 0 && !memcmp(in, "again", 5));
    close(s);
    printf("ok %s\n", name);
}


/* MANY connections in one epoll set, each taken out and put back around every request
 * and reply as redis's event loop does (ADD for writing, DEL, ADD for reading, MOD
 * for writing again), level- or edge-triggered: every reply comes whole and right,
 * and no event names a connection that is not in the set. Over omx each member was
 * two kernel registrations and its readiness an eventfd; now one registration, its
 * readiness counted in memory. (The 20 s wait only ends a run that lost a reply.) */
static void epoll_many(int edge)
{
    const char *name = edge ? "epoll-many-edge" : "epoll-many-level";
    int k = dial(C_MANY, 0), s[MANY], state[MANY], rounds[MANY], have[MANY], ep = epoll_create1(EPOLL_CLOEXEC);
    int done = 0;
    uint32_t want[MANY][4], got[MANY][4];
    struct epoll_event ev, out[64];
    char c = 0;
    CHECK(name, k >= 0 && ep >= 0);
    for (int i = 0; i < MANY; i++) {
        s[i] = dial(0, SOCK_NONBLOCK);
        CHECK(name, s[i] >= 0);
        ev.events = EPOLLOUT;
        ev.data.u64 = (uint64_t)i;
        CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev) == 0);
        state[i] = 0; /* 0: in the set for writing, 1: for reading, 2: out */
        rounds[i] = have[i] = 0;
    }
    while (done < MANY) {
        int n = epoll_wait(ep, out, 64, 20000);
        CHECK(name, n > 0); /* a lost reply */
        for (int e = 0; e < n; e++) {
            uint64_t i = out[e].data.u64;
            CHECK(name, i < MANY && state[i] != 2); /* an event for a member not in the set */
            if (state[i] == 0) {
                CHECK(name, out[e].events & EPOLLOUT);
                for (int w = 0; w < 4; w++)
                    want[i][w] = (uint32_t)(i * 1000003u + rounds[i] * 7u + w);
                CHECK(name, write(s[i], want[i], sizeof want[i]) == sizeof want[i]);
                CHECK(name, epoll_ctl(ep, EPOLL_CTL_DEL, s[i], NULL) == 0);
                ev.events = EPOLLIN | (edge ? EPOLLET : 0);
                ev.data.u64 = i;
                CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s[i], &ev) == 0);
                state[i] = 1;
                continue;
            }
            CHECK(name, out[e].events & EPOLLIN);
            for (;;) {
                ssize_t r = read(s[i], (char *)got[i] + have[i], sizeof got[i] - (size_t)have[i]);
                if (r < 0 && errno == EAGAIN)
                    break;
                CHECK(name, r > 0);
                have[i] += (int)r;
                if (have[i] == (int)sizeof got[i])
                    break;
            }
            if (have[i] < (int)sizeof got[i])
                continue; /* the rest comes with the next event */
            CHECK(name, !memcmp(got[i], want[i], sizeof want[i]));
            have[i] = 0;
            if (++rounds[i] == MANY_ROUNDS) {
                CHECK(name, epoll_ctl(ep, EPOLL_CTL_DEL, s[i], NULL) == 0);
                state[i] = 2;
                done++;
                continue;
            }
            /* Readable and writable asked for, then writable only (redis's MODs). */
            ev.events = EPOLLIN | EPOLLOUT | (edge ? EPOLLET : 0);
            ev.data.u64 = i;
            CHECK(name, epoll_ctl(ep, EPOLL_CTL_MOD, s[i], &ev) == 0);
            ev.events = EPOLLOUT | (edge ? EPOLLET : 0);
            CHECK(name, epoll_ctl(ep, EPOLL_CTL_MOD, s[i], &ev) == 0);
            state[i] = 0;
        }
    }
    CHECK(name, epoll_wait(ep, out, 64, 0) == 0);
    for (int i = 0; i < MANY; i++)
        close(s[i]);
    CHECK(name, read(k, &c, 1) == 1 && c == 'd');
    close(k);
    close(ep);
    printf("ok %s\n", name);
}

static void t_epoll_many(void)
{
    epoll_many(0);
    epoll_many(1);
}

/* An epoll set with a connection in it, watched from outside: another thread polls the
 * epoll descriptor, or waits on another set that holds it. It becomes readable when the
 * connection gets data (the first round: the watcher is blocked before the data comes)
 * or at once when the data came first (the second round, a fresh set), as the
 * kernel's does. Over omx an arrival rings the set's wake-up descriptor only when
 * someone may sleep on the set. */
static int outer_ep;
static volatile pid_t watcher_tid;
static void *epoll_watcher(void *arg)
{
    int *ep = arg;
    struct pollfd p = {.fd = *ep, .events = POLLIN};
    struct epoll_event e;
    watcher_tid = gettid();
    if (outer_ep >= 0)
        *ep = epoll_wait(outer_ep, &e, 1, -1) == 1 && (e.events & EPOLLIN) && e.data.fd == *ep;
    else
        *ep = poll(&p, 1, -1) == 1 && p.revents == POLLIN;
    return NULL;
}

static void epoll_watched(int nested)
{
    const char *name = nested ? "epoll-nested-readable" : "epoll-polled-readable";
    int s = dial(C_ECHO, 0), arg;
    struct epoll_event ev = {.events = EPOLLIN}, out[2];
    pthread_t t;
    char c;
    CHECK(name, s >= 0);
    /* Once written and read: over omx the connection is carried both ways then. */
    CHECK(name, echoed_once(s));
    for (int round = 0; round < 2; round++) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        CHECK(name, ep >= 0);
        outer_ep = -1;
        if (nested) {
            struct epoll_event o = {.events = EPOLLIN, .data.fd = ep};
            outer_ep = epoll_create1(EPOLL_CLOEXEC);
            CHECK(name, outer_ep >= 0 && epoll_ctl(outer_ep, EPOLL_CTL_ADD, ep, &o) == 0);
        }
        if (round == 1) /* the echo is there before the set holds the connection */
            CHECK(name, write(s, "b", 1) == 1 && recv(s, &c, 1, MSG_PEEK) == 1 && c == 'b');
        ev.data.fd = s;
        CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
        arg = ep;
        watcher_tid = 0;
        CHECK(name, pthread_create(&t, NULL, epoll_watcher, &arg) == 0);
        if (round == 0) {
            while (!watcher_tid)
                sched_yield();
            wait_blocked(watcher_tid);
            CHECK(name, write(s, "b", 1) == 1);
        }
        CHECK(name, pthread_join(t, NULL) == 0 && arg == 1);
        CHECK(name, epoll_wait(ep, out, 2, 0) == 1 && out[0].data.fd == s && read(s, &c, 1) == 1 && c == 'b');
        CHECK(name, epoll_wait(ep, out, 2, 0) == 0);
        if (nested)
            close(outer_ep);
        close(ep);
    }
    close(s);
    printf("ok %s\n", name);
}

static void t_epoll_watched(void)
{
    epoll_watched(0);
    epoll_watched(1);
}

/* A thread waits in epoll_wait on a set holding a connection while this thread waits
 * in a blocking MSG_PEEK on it (over omx it may take in the frame itself): the waiter
 * wakes with the connection readable. Then a child
 * forked with the set looks at it (nothing there for it) and exits, and the set still
 * works in the parent. Over omx the set's hub is rung for another waiting thread, and a
 * forked child inherits the set and its hub. */
static volatile pid_t set_waiter_tid;
static void *set_waiter(void *arg)
{
    int *ep = arg;
    struct epoll_event e;
    set_waiter_tid = gettid();
    *ep = epoll_wait(*ep, &e, 1, -1) == 1 && (e.events & EPOLLIN);
    return NULL;
}

static void t_epoll_threads_fork(void)
{
    const char *name = "epoll-threads-fork";
    int s = dial(C_ECHO, 0), ep = epoll_create1(0), arg, status = -1;
    struct epoll_event ev = {.events = EPOLLIN}, out[2];
    pthread_t t;
    pid_t child;
    char c;
    CHECK(name, s >= 0 && ep >= 0);
    CHECK(name, echoed_once(s));
    ev.data.fd = s;
    CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
    arg = ep;
    set_waiter_tid = 0;
    CHECK(name, pthread_create(&t, NULL, set_waiter, &arg) == 0);
    while (!set_waiter_tid)
        sched_yield();
    wait_blocked(set_waiter_tid);
    CHECK(name, write(s, "b", 1) == 1 && recv(s, &c, 1, MSG_PEEK) == 1 && c == 'b');
    CHECK(name, pthread_join(t, NULL) == 0 && arg == 1);
    CHECK(name, read(s, &c, 1) == 1 && c == 'b');
    child = fork();
    CHECK(name, child >= 0);
    if (child == 0)
        _exit(epoll_wait(ep, out, 2, 0) == 0 ? 0 : 1);
    CHECK(name, waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(name, epoll_wait(ep, out, 2, 0) == 0);
    CHECK(name, write(s, "d", 1) == 1);
    CHECK(name, epoll_wait(ep, out, 2, -1) == 1 && out[0].data.fd == s && read(s, &c, 1) == 1 && c == 'd');
    CHECK(name, epoll_wait(ep, out, 2, 0) == 0);
    close(ep);
    close(s);
    printf("ok %s\n", name);
}

/* A thread waits in epoll_wait on a set without any connection yet; this thread then
 * puts a connection in it, and the data comes after (first round) or was there before
 * (second round): the waiter wakes with it, as the kernel's does. Over omx the waiter
 * sleeps in the kernel (the set had no carried member when it started), so the
 * member's arrivals (or its joining, ready) ring the set's hub. */
static void t_epoll_added_while_waiting(void)
{
    const char *name = "epoll-added-while-waiting";
    int s = dial(C_ECHO, 0), arg;
    struct epoll_event ev = {.events = EPOLLIN}, out[2];
    pthread_t t;
    char c;
    CHECK(name, s >= 0);
    CHECK(name, echoed_once(s));
    for (int round = 0; round < 2; round++) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        CHECK(name, ep >= 0);
        if (round == 1)
            CHECK(name, write(s, "b", 1) == 1 && recv(s, &c, 1, MSG_PEEK) == 1 && c == 'b');
        arg = ep;
        set_waiter_tid = 0;
        CHECK(name, pthread_create(&t, NULL, set_waiter, &arg) == 0);
        while (!set_waiter_tid)
            sched_yield();
        wait_blocked(set_waiter_tid);
        ev.data.fd = s;
        CHECK(name, epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) == 0);
        if (round == 0)
            CHECK(name, write(s, "b", 1) == 1);
        CHECK(name, pthread_join(t, NULL) == 0 && arg == 1);
        CHECK(name, epoll_wait(ep, out, 2, 0) == 1 && out[0].data.fd == s && read(s, &c, 1) == 1 && c == 'b');
        CHECK(name, epoll_wait(ep, out, 2, 0) == 0);
        close(ep);
    }
    close(s);
    printf("ok %s\n", name);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "server"))
        return server(atoi(argv[2]));
    if (argc != 4 || strcmp(argv[1], "client")) {
        fprintf(stderr, "usage: conformance server PORT | client IP PORT\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    peer.sin_family = AF_INET;
    peer.sin_port = htons(atoi(argv[3]));
    inet_pton(AF_INET, argv[2], &peer.sin_addr);
    t_echo_calls();
    t_peek_dontwait_fionread();
    t_peek_span();
    t_pieces();
    t_restart();
    t_rcvlowat();
    t_waitall();
    t_half_close_dup();
    t_close_delivers();
    t_large_writes();
    t_epipe();
    t_nonblocking_writes();
    t_sndtimeo();
    t_write_eintr();
    t_readiness_mix();
    t_readiness_late();
    t_epoll_oneshot();
    t_sendfile();
    t_full_duplex();
    t_both_shut();
    t_both_write();
    t_close_unread();
    t_write_after_close();
    t_write_unread_close();
    t_mmsg_splice();
    t_read_beside_blocked();
    t_bad_args();
    t_epoll_first();
    t_connect_errors();
    t_connect_again();
    t_writev_nonblocking();
    t_epoll_many();
    t_epoll_watched();
    t_epoll_threads_fork();
    t_epoll_added_while_waiting();
    t_urgent();
    t_urgent_both();
    int q = dial(C_QUIT, 0);
    close(q);
    printf("%d failed\n", failures);
    return failures != 0;
}
