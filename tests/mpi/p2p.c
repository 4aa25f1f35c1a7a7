/* p2p.c - point-to-point MPI tests with checked data.
 *
 *   p2p [MAX_BYTES]     (default 8 MiB; even number of ranks >= 2)
 *
 * blocking   : partners (r, r^1) ping-pong every size 0 .. MAX (MPI_Send,
 *              every third size MPI_Ssend) into a larger buffer; count,
 *              source, tag and every byte checked both ways
 * nonblocking: every rank exchanges every size with every rank, itself
 *              included (sizes above 1 MiB: ring neighbours only), once
 *              with the receives posted first and once with the sends
 *              posted before the receives exist (unexpected messages)
 * anysource  : each root in turn receives K messages of mixed sizes from
 *              every other rank with MPI_ANY_SOURCE/MPI_ANY_TAG; status
 *              tells which message it is; per-source order checked
 * tags       : messages with tags 1..T sent in order, received in reverse
 *              tag order (receives pre-posted), then a specific-tag and
 *              MPI_ANY_TAG mix
 * ordering   : 2000 messages of one tag, mostly small with rendezvous-size
 *              ones interleaved, arrive in send order; once with the
 *              receiver keeping up and once with a late receiver
 * comms      : one tag on MPI_COMM_WORLD, a dup and a split (reversed
 *              ranks), wildcard receives included: no cross-matching
 * datatype   : a strided MPI_Type_vector sent and received into another
 *              layout
 */
#include "common.h"

#include <unistd.h>

#define MAX_SIZES 128

static size_t sizes[MAX_SIZES];
static int nsizes;
static size_t max_bytes = 8u << 20;

static void test_blocking(void)
{
    test_begin("blocking");
    int peer = g_rank ^ 1;
    if (peer >= g_size)
        return;
    unsigned char *buf = xmalloc(max_bytes + 64);
    for (int k = 0; k < nsizes; k++) {
        size_t len = sizes[k];
        int tag = 10 + k;
        MPI_Status st;
        char what[64];
        snprintf(g_ctx, sizeof g_ctx, "exchanging %zu B with rank %d (t=%.3f s)", len, peer, MPI_Wtime());
        if ((g_rank & 1) == 0) {
            fill(buf, len, g_rank, peer, tag, k);
            if (k % 3 == 2)
                MPI_OK(MPI_Ssend(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            else
                MPI_OK(MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            memset(buf, 0xEE, len + 64);
            MPI_OK(MPI_Recv(buf, (int)len + 64, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
            snprintf(what, sizeof what, "reply of %zu B", len);
            check_status(&st, peer, tag, (int)len, what);
            verify(buf, len, peer, g_rank, tag, k, what);
        } else {
            memset(buf, 0xEE, len + 64);
            MPI_OK(MPI_Recv(buf, (int)len + 64, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
            snprintf(what, sizeof what, "message of %zu B", len);
            check_status(&st, peer, tag, (int)len, what);
            verify(buf, len, peer, g_rank, tag, k, what);
            /* the bytes after the message are untouched */
            size_t spill = 0;
            for (size_t i = len; i < len + 64; i++)
                spill += buf[i] != 0xEE;
            CHECK(spill == 0, "%s: %zu bytes written past the message", what, spill);
            fill(buf, len, g_rank, peer, tag, k);
            if (k % 3 == 1)
                MPI_OK(MPI_Ssend(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
            else
                MPI_OK(MPI_Send(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
        }
    }
    free(buf);
}

/* One round of the nonblocking exchange: size index k, peers chosen by the
 * caller; unexpected=1 posts the sends, then a barrier, then the receives. */
static void exchange(int k, const int *peers, int npeers, int unexpected)
{
    size_t len = sizes[k];
    int tag = 2000 + k;
    unsigned char **sb = xmalloc(sizeof(*sb) * npeers), **rb = xmalloc(sizeof(*rb) * npeers);
    MPI_Request *req = xmalloc(sizeof(*req) * 2 * npeers);
    MPI_Status *st = xmalloc(sizeof(*st) * 2 * npeers);
    for (int i = 0; i < 2 * npeers; i++)
        req[i] = MPI_REQUEST_NULL; /* a failed post leaves nothing to wait for */
    for (int i = 0; i < npeers; i++) {
        sb[i] = xmalloc(len);
        rb[i] = xmalloc(len);
        fill(sb[i], len, g_rank, peers[i], tag, unexpected);
        memset(rb[i], 0xEE, len);
    }
    snprintf(g_ctx, sizeof g_ctx, "exchanging %zu B with %d peers", len, npeers);
    if (!unexpected) {
        for (int i = 0; i < npeers; i++)
            MPI_OK(MPI_Irecv(rb[i], (int)len, MPI_BYTE, peers[i], tag, MPI_COMM_WORLD, &req[i]));
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < npeers; i++)
            MPI_OK(MPI_Isend(sb[i], (int)len, MPI_BYTE, peers[i], tag, MPI_COMM_WORLD,
                             &req[npeers + i]));
    } else {
        for (int i = 0; i < npeers; i++)
            MPI_OK(MPI_Isend(sb[i], (int)len, MPI_BYTE, peers[i], tag, MPI_COMM_WORLD,
                             &req[npeers + i]));
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < npeers; i++)
            MPI_OK(MPI_Irecv(rb[i], (int)len, MPI_BYTE, peers[i], tag, MPI_COMM_WORLD, &req[i]));
    }
    MPI_OK(MPI_Waitall(2 * npeers, req, st));
    for (int i = 0; i < npeers; i++) {
        char what[96];
        snprintf(what, sizeof what, "%zu B from rank %d (%s)", len, peers[i],
                 unexpected ? "sent before the receive" : "receive pre-posted");
        check_status(&st[i], peers[i], tag, (int)len, what);
        verify(rb[i], len, peers[i], g_rank, tag, unexpected, what);
        free(sb[i]);
        free(rb[i]);
    }
    free(sb);
    free(rb);
    free(req);
    free(st);
}

static void test_nonblocking(void)
{
    test_begin("nonblocking");
    int *peers = xmalloc(sizeof(int) * (size_t)g_size);
    for (int unexpected = 0; unexpected < 2; unexpected++) {
        for (int k = 0; k < nsizes; k++) {
            int n = 0;
            if (sizes[k] <= (1u << 20)) {
                for (int i = 0; i < g_size; i++)
                    peers[n++] = i;
            } else {
                /* ring: receive from the left and send to the right would
                 * need two peer lists; exchanging with both neighbours keeps
                 * one list (and is symmetric). */
                peers[n++] = (g_rank + 1) % g_size;
                if (g_size > 2)
                    peers[n++] = (g_rank + g_size - 1) % g_size;
            }
            exchange(k, peers, n, unexpected);
        }
    }
    free(peers);
}

/* anysource: message j from a sender has tag 500 + j and this size. */
#define ANY_K 24
static size_t any_len(int j)
{
    static const size_t l[] = {0, 1, 8, 100, 1000, 4096, 8192, 9000, 32768, 40000, 100000, 1u << 20};
    return l[j % (int)(sizeof l / sizeof l[0])];
}

static void test_anysource(void)
{
    test_begin("anysource");
    unsigned char *buf = xmalloc((1u << 20) + 64);
    for (int root = 0; root < g_size; root++) {
        if (g_rank == root) {
            int *next = xmalloc(sizeof(int) * (size_t)g_size);
            for (int i = 0; i < g_size; i++)
                next[i] = 0;
            for (int m = 0; m < (g_size - 1) * ANY_K; m++) {
                MPI_Status st;
                MPI_OK(MPI_Recv(buf, (1 << 20) + 64, MPI_BYTE, MPI_ANY_SOURCE, MPI_ANY_TAG,
                                MPI_COMM_WORLD, &st));
                int src = st.MPI_SOURCE, j = st.MPI_TAG - 500, n = -1;
                MPI_Get_count(&st, MPI_BYTE, &n);
                CHECK(src >= 0 && src < g_size && src != root, "root %d: bad source %d", root, src);
                if (src < 0 || src >= g_size || src == root)
                    continue;
                CHECK(j == next[src], "root %d: from rank %d got tag %d, expected %d (order)",
                      root, src, st.MPI_TAG, 500 + next[src]);
                if (j < 0 || j >= ANY_K)
                    continue;
                next[src] = j + 1;
                CHECK((size_t)n == any_len(j), "root %d: message %d from %d has %d B, expected %zu",
                      root, j, src, n, any_len(j));
                char what[64];
                snprintf(what, sizeof what, "root %d message %d from %d", root, j, src);
                verify(buf, any_len(j), src, root, 500 + j, root, what);
            }
            free(next);
        } else {
            for (int j = 0; j < ANY_K; j++) {
                size_t len = any_len(j);
                fill(buf, len, g_rank, root, 500 + j, root);
                MPI_OK(MPI_Send(buf, (int)len, MPI_BYTE, root, 500 + j, MPI_COMM_WORLD));
            }
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(buf);
}

#define NTAGS 40
static size_t tag_len(int t)
{
    return (t % 4 == 0) ? 70000 + (size_t)t : (t % 4 == 1) ? 0 : (size_t)t * 97;
}

static void test_tags(void)
{
    test_begin("tags");
    int peer = g_rank ^ 1;
    if (peer >= g_size)
        return;
    unsigned char *b[NTAGS];
    MPI_Request req[NTAGS];
    MPI_Status st[NTAGS];
    for (int t = 0; t < NTAGS; t++) {
        b[t] = xmalloc(tag_len(t + 1));
        req[t] = MPI_REQUEST_NULL;
    }
    /* both directions at once: even ranks send first, odd ranks receive
     * first, then the roles swap */
    for (int phase = 0; phase < 2; phase++) {
        int sending = ((g_rank & 1) == phase);
        if (sending) {
            MPI_Barrier(MPI_COMM_WORLD);
            for (int t = 0; t < NTAGS; t++) {
                fill(b[t], tag_len(t + 1), g_rank, peer, t + 1, phase);
                MPI_OK(MPI_Isend(b[t], (int)tag_len(t + 1), MPI_BYTE, peer, t + 1, MPI_COMM_WORLD,
                                 &req[t]));
            }
            MPI_OK(MPI_Waitall(NTAGS, req, st));
        } else {
            for (int t = NTAGS - 1; t >= 0; t--) {
                memset(b[t], 0xEE, tag_len(t + 1));
                MPI_OK(MPI_Irecv(b[t], (int)tag_len(t + 1), MPI_BYTE, peer, t + 1, MPI_COMM_WORLD,
                                 &req[t]));
            }
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_OK(MPI_Waitall(NTAGS, req, st));
            for (int t = 0; t < NTAGS; t++) {
                char what[64];
                snprintf(what, sizeof what, "tag %d (reverse order)", t + 1);
                check_status(&st[t], peer, t + 1, (int)tag_len(t + 1), what);
                verify(b[t], tag_len(t + 1), peer, g_rank, t + 1, phase, what);
            }
        }
    }
    /* mix: tags 1..NTAGS sent in order; the receiver takes the odd tags by
     * number first (unexpected ones for the even tags pile up), then
     * MPI_ANY_TAG must deliver the even tags in send order. */
    int sending = (g_rank & 1) == 0;
    if (sending) {
        for (int t = 0; t < NTAGS; t++) {
            fill(b[t], tag_len(t + 1), g_rank, peer, t + 1, 7);
            MPI_OK(MPI_Isend(b[t], (int)tag_len(t + 1), MPI_BYTE, peer, t + 1, MPI_COMM_WORLD,
                             &req[t]));
        }
        MPI_OK(MPI_Waitall(NTAGS, req, st));
    } else {
        for (int t = 0; t < NTAGS; t += 2) {
            MPI_OK(MPI_Recv(b[t], (int)tag_len(t + 1), MPI_BYTE, peer, t + 1, MPI_COMM_WORLD, &st[0]));
            char what[64];
            snprintf(what, sizeof what, "tag %d by number", t + 1);
            check_status(&st[0], peer, t + 1, (int)tag_len(t + 1), what);
            verify(b[t], tag_len(t + 1), peer, g_rank, t + 1, 7, what);
        }
        unsigned char *any = xmalloc(80000);
        for (int t = 1; t < NTAGS; t += 2) {
            MPI_OK(MPI_Recv(any, 80000, MPI_BYTE, peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st[0]));
            char what[64];
            snprintf(what, sizeof what, "MPI_ANY_TAG expecting tag %d", t + 1);
            check_status(&st[0], peer, t + 1, (int)tag_len(t + 1), what);
            if (st[0].MPI_TAG == t + 1)
                verify(any, tag_len(t + 1), peer, g_rank, t + 1, 7, what);
        }
        free(any);
    }
    for (int t = 0; t < NTAGS; t++)
        free(b[t]);
    MPI_Barrier(MPI_COMM_WORLD);
}

#define NORDER 2000
static size_t order_len(int i)
{
    if (i % 500 == 499)
        return 300000;
    if (i % 50 == 25)
        return 40000;
    return 8 + (size_t)(i % 57);
}

static void test_ordering(void)
{
    test_begin("ordering");
    int peer = g_rank ^ 1;
    if (peer >= g_size)
        return;
    unsigned char *buf = xmalloc(300000 + 64);
    for (int late = 0; late < 2; late++) {
        if ((g_rank & 1) == 0) {
            for (int i = 0; i < NORDER; i++) {
                size_t len = order_len(i);
                fill(buf, len, g_rank, peer, 77, i);
                memcpy(buf, &i, sizeof i); /* the sequence number leads */
                MPI_OK(MPI_Send(buf, (int)len, MPI_BYTE, peer, 77, MPI_COMM_WORLD));
            }
        } else {
            if (late)
                usleep(300000); /* let the eager messages queue up unexpected */
            int bad = 0;
            for (int i = 0; i < NORDER; i++) {
                MPI_Status st;
                int seq = -1, n = -1;
                MPI_OK(MPI_Recv(buf, 300000 + 64, MPI_BYTE, peer, 77, MPI_COMM_WORLD, &st));
                MPI_Get_count(&st, MPI_BYTE, &n);
                if (n >= (int)sizeof seq)
                    memcpy(&seq, buf, sizeof seq);
                if (seq != i || (size_t)n != order_len(i)) {
                    if (bad++ < 5)
                        CHECK(0, "%s receiver: message %d has sequence %d and %d B (expected %zu)",
                              late ? "late" : "prompt", i, seq, n, order_len(i));
                    continue;
                }
                /* put the pattern back under the sequence number, check all */
                fill(buf, sizeof seq, peer, g_rank, 77, i);
                char what[64];
                snprintf(what, sizeof what, "message %d", i);
                verify(buf, (size_t)n, peer, g_rank, 77, i, what);
            }
            CHECK(bad == 0, "%d of %d messages out of order or of the wrong size", bad, NORDER);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(buf);
}

/* comms: the same tag on MPI_COMM_WORLD, a duplicate of it and a split
 * (reversed ranks) must not cross-match, even with MPI_ANY_SOURCE and
 * MPI_ANY_TAG receives posted on one communicator first. */
static void test_comms(void)
{
    test_begin("comms");
    int peer = g_rank ^ 1;
    if (peer >= g_size)
        return;
    MPI_Comm dup, rev;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_OK(MPI_Comm_split(MPI_COMM_WORLD, 0, g_size - g_rank, &rev));
    int rpeer = g_size - 1 - peer; /* peer's rank in rev */
    MPI_Comm comms[3] = {MPI_COMM_WORLD, dup, rev};
    int peers[3] = {peer, peer, rpeer};
    unsigned char *b[3];
    MPI_Request rq[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status st[3];
    for (int c = 0; c < 3; c++)
        b[c] = xmalloc(50000);
    for (int round = 0; round < 2; round++) {
        size_t len = round ? 50000 : 300; /* eager, then rendezvous */
        if ((g_rank & 1) == 0) {
            /* send on rev, world, dup in that order, same tag */
            static const int order[3] = {2, 0, 1};
            for (int i = 0; i < 3; i++) {
                int c = order[i];
                fill(b[c], len, g_rank, peer, 42, c);
                MPI_OK(MPI_Isend(b[c], (int)len, MPI_BYTE, peers[c], 42, comms[c], &rq[c]));
            }
            MPI_OK(MPI_Waitall(3, rq, st));
        } else {
            /* wildcards on world and dup, specific on rev */
            for (int c = 0; c < 3; c++) {
                memset(b[c], 0xEE, len);
                MPI_OK(MPI_Irecv(b[c], (int)len, MPI_BYTE, c == 2 ? peers[c] : MPI_ANY_SOURCE,
                                 c == 1 ? MPI_ANY_TAG : 42, comms[c], &rq[c]));
            }
            MPI_OK(MPI_Waitall(3, rq, st));
            for (int c = 0; c < 3; c++) {
                char what[64];
                snprintf(what, sizeof what, "%zu B on communicator %d", len, c);
                check_status(&st[c], peers[c], 42, (int)len, what);
                verify(b[c], len, peer, g_rank, 42, c, what);
            }
        }
    }
    for (int c = 0; c < 3; c++)
        free(b[c]);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&rev);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* datatype: a strided vector (every other int of 2 x 40000) is sent and
 * received as a vector of another layout; only the selected ints move. */
static void test_datatype(void)
{
    test_begin("datatype");
    int peer = g_rank ^ 1;
    if (peer >= g_size)
        return;
    const int n = 40000;
    int *a = xmalloc(sizeof(int) * 2 * (size_t)n), *r = xmalloc(sizeof(int) * 3 * (size_t)n);
    MPI_Datatype even, third;
    MPI_OK(MPI_Type_vector(n, 1, 2, MPI_INT, &even));
    MPI_OK(MPI_Type_vector(n, 1, 3, MPI_INT, &third));
    MPI_OK(MPI_Type_commit(&even));
    MPI_OK(MPI_Type_commit(&third));
    if ((g_rank & 1) == 0) {
        for (int i = 0; i < 2 * n; i++)
            a[i] = (i % 2) ? -1 : i / 2 * 7 + g_rank;
        MPI_OK(MPI_Send(a, 1, even, peer, 43, MPI_COMM_WORLD));
    } else {
        for (int i = 0; i < 3 * n; i++)
            r[i] = -2;
        MPI_Status st;
        MPI_OK(MPI_Recv(r, 1, third, peer, 43, MPI_COMM_WORLD, &st));
        int bad = 0, count = -1;
        for (int i = 0; i < 3 * n; i++) {
            int want = (i % 3) ? -2 : i / 3 * 7 + peer;
            bad += r[i] != want;
        }
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(bad == 0, "vector datatype: %d of %d ints wrong", bad, 3 * n);
        CHECK(count == n, "vector datatype: MPI_Get_count(MPI_INT) %d, expected %d", count, n);
    }
    MPI_Type_free(&even);
    MPI_Type_free(&third);
    free(a);
    free(r);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    start(&argc, &argv);
    if (argc > 1)
        max_bytes = (size_t)strtoull(argv[1], NULL, 0);
    nsizes = test_sizes(sizes, MAX_SIZES, max_bytes);
    if (g_size % 2 != 0 && g_rank == 0)
        fprintf(stderr, "p2p: odd number of ranks, the last one has no partner\n");
    double t0 = MPI_Wtime();
    test_blocking();
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("blocking done (%.2f s, %d sizes up to %zu B)\n", MPI_Wtime() - t0, nsizes, max_bytes);
    test_nonblocking();
    if (g_rank == 0)
        printf("nonblocking done (%.2f s)\n", MPI_Wtime() - t0);
    test_anysource();
    if (g_rank == 0)
        printf("anysource done (%.2f s)\n", MPI_Wtime() - t0);
    test_tags();
    if (g_rank == 0)
        printf("tags done (%.2f s)\n", MPI_Wtime() - t0);
    test_ordering();
    if (g_rank == 0)
        printf("ordering done (%.2f s)\n", MPI_Wtime() - t0);
    test_comms();
    test_datatype();
    if (g_rank == 0)
        printf("comms, datatype done (%.2f s)\n", MPI_Wtime() - t0);
    return finish("p2p");
}
