/* probe.c - MPI_Iprobe, MPI_Probe, MPI_Mprobe/MPI_Improbe + MPI_Mrecv/
 * MPI_Imrecv and MPI_Cancel of posted receives, with checked
 * data. Partners are (r, r^1); even ranks send, odd ranks probe and receive.
 *
 *   probe        (even number of ranks >= 2)
 *
 * iprobe   : MPI_Iprobe polls until each message (0 B .. 1 MiB) is there;
 *            its status gives source, tag and count; MPI_Recv of that count;
 *            a tag nobody sent is never reported
 * probe    : MPI_Probe of a specific tag out of send order, then MPI_ANY_TAG
 *            finds the remaining messages in send order
 * mprobe   : two messages with one tag and one with another; MPI_Mprobe and
 *            MPI_Improbe take them out of matching (MPI_Iprobe no longer
 *            sees them), MPI_Mrecv/MPI_Imrecv receive them in reverse order;
 *            then rank 0 MPI_Mprobes one message from every rank with
 *            MPI_ANY_SOURCE
 * cancel   : MPI_Cancel of a posted receive (specific and any source):
 *            MPI_Test_cancelled is true; a message sent afterwards with the
 *            cancelled receive's tag goes to the next receive; a receive
 *            completed normally is not cancelled
 *
 * Truncation is in truncate.c.
 */
#include "common.h"

#include <unistd.h>

static int peer;
static int is_sender(void)
{
    return (g_rank & 1) == 0;
}

static void send_msg(size_t len, int tag, long seq)
{
    unsigned char *b = xmalloc(len);
    fill(b, len, g_rank, peer, tag, seq);
    MPI_OK(MPI_Send(b, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD));
    free(b);
}

/* Sends n messages at once (MPI_Isend), optionally enters a barrier, then
 * waits for them: receivers may match them in any order. */
static void send_all(const size_t *lens, const int *tags, const long *seqs, int n, int barrier)
{
    MPI_Request rq[8];
    unsigned char *b[8];
    for (int k = 0; k < n && k < 8; k++) {
        rq[k] = MPI_REQUEST_NULL;
        b[k] = xmalloc(lens[k]);
        fill(b[k], lens[k], g_rank, peer, tags[k], seqs[k]);
        MPI_OK(MPI_Isend(b[k], (int)lens[k], MPI_BYTE, peer, tags[k], MPI_COMM_WORLD, &rq[k]));
    }
    if (barrier)
        MPI_Barrier(MPI_COMM_WORLD);
    MPI_OK(MPI_Waitall(n, rq, MPI_STATUSES_IGNORE));
    for (int k = 0; k < n; k++)
        free(b[k]);
}

/* Receives (count from a status) and checks a message from peer. */
static void recv_check(size_t len, int tag, long seq, const char *what)
{
    unsigned char *b = xmalloc(len);
    MPI_Status st;
    MPI_OK(MPI_Recv(b, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &st));
    check_status(&st, peer, tag, (int)len, what);
    verify(b, len, peer, g_rank, tag, seq, what);
    free(b);
}

static void test_iprobe(void)
{
    static const size_t lens[] = {0, 1, 100, 9000, 40000, 65536, 1u << 20};
    const int n = (int)(sizeof lens / sizeof lens[0]);
    test_begin("iprobe");
    if (is_sender()) {
        for (int k = 0; k < n; k++)
            send_msg(lens[k], 300 + k, k);
    } else {
        for (int k = 0; k < n; k++) {
            int flag = 0;
            MPI_Status st;
            double t0 = MPI_Wtime();
            while (!flag && MPI_Wtime() - t0 < 30.0)
                MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, 300 + k, MPI_COMM_WORLD, &flag, &st));
            char what[64];
            snprintf(what, sizeof what, "MPI_Iprobe of %zu B", lens[k]);
            CHECK(flag, "%s: nothing after 30 s", what);
            if (!flag)
                continue;
            check_status(&st, peer, 300 + k, (int)lens[k], what);
            int count = -1;
            MPI_Get_count(&st, MPI_BYTE, &count);
            if (count >= 0)
                recv_check((size_t)count, 300 + k, k, what);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    int flag = 1;
    MPI_Status st;
    MPI_OK(MPI_Iprobe(MPI_ANY_SOURCE, 399, MPI_COMM_WORLD, &flag, &st));
    CHECK(!flag, "MPI_Iprobe reports tag 399 that nobody sent");
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_probe(void)
{
    static const size_t lens[] = {10, 50000, 3000};
    test_begin("probe");
    if (is_sender()) {
        static const int tags[] = {401, 402, 403};
        static const long seqs[] = {0, 1, 2};
        send_all(lens, tags, seqs, 3, 0);
    } else {
        MPI_Status st;
        MPI_OK(MPI_Probe(peer, 403, MPI_COMM_WORLD, &st));
        check_status(&st, peer, 403, (int)lens[2], "MPI_Probe of tag 403 (sent last)");
        recv_check(lens[2], 403, 2, "tag 403 after MPI_Probe");
        for (int k = 0; k < 2; k++) {
            char what[64];
            snprintf(what, sizeof what, "MPI_Probe(MPI_ANY_TAG) number %d", k + 1);
            MPI_OK(MPI_Probe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
            check_status(&st, peer, 401 + k, (int)lens[k], what);
            recv_check(lens[k], 401 + k, k, what);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_mprobe(void)
{
    test_begin("mprobe");
    /* 501: 1000 B (seq 0) then 200000 B (seq 1); 502: 77 B (seq 2) */
    if (is_sender()) {
        static const size_t lens[] = {1000, 200000, 77};
        static const int tags[] = {501, 501, 502};
        static const long seqs[] = {0, 1, 2};
        send_all(lens, tags, seqs, 3, 1);
    } else {
        MPI_Message ma, mb, mc = MPI_MESSAGE_NULL;
        MPI_Status st;
        MPI_OK(MPI_Mprobe(peer, 501, MPI_COMM_WORLD, &ma, &st));
        check_status(&st, peer, 501, 1000, "first MPI_Mprobe of tag 501");
        MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, 501, MPI_COMM_WORLD, &mb, &st));
        check_status(&st, peer, 501, 200000, "second MPI_Mprobe of tag 501");
        int flag = 0;
        double t0 = MPI_Wtime();
        while (!flag && MPI_Wtime() - t0 < 30.0)
            MPI_OK(MPI_Improbe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &mc, &st));
        CHECK(flag, "MPI_Improbe(MPI_ANY_TAG) found nothing in 30 s");
        if (flag)
            check_status(&st, peer, 502, 77, "MPI_Improbe(MPI_ANY_TAG) after two MPI_Mprobes");
        MPI_Barrier(MPI_COMM_WORLD); /* every message has been sent */
        /* matched messages are gone from matching */
        int f2 = 1;
        MPI_OK(MPI_Iprobe(peer, MPI_ANY_TAG, MPI_COMM_WORLD, &f2, &st));
        CHECK(!f2, "MPI_Iprobe still sees tag %d after it was matched by MPI_Mprobe", st.MPI_TAG);
        f2 = 1;
        MPI_Message md = MPI_MESSAGE_NULL;
        MPI_OK(MPI_Improbe(peer, 501, MPI_COMM_WORLD, &f2, &md, &st));
        CHECK(!f2, "MPI_Improbe finds a third tag-501 message");
        /* receive in reverse order */
        unsigned char *b = xmalloc(200000);
        if (flag) {
            MPI_OK(MPI_Mrecv(b, 77, MPI_BYTE, &mc, &st));
            check_status(&st, peer, 502, 77, "MPI_Mrecv of tag 502");
            verify(b, 77, peer, g_rank, 502, 2, "MPI_Mrecv of tag 502");
            CHECK(mc == MPI_MESSAGE_NULL, "MPI_Mrecv left the message handle set");
        }
        MPI_Request rq = MPI_REQUEST_NULL;
        memset(b, 0xEE, 200000);
        MPI_OK(MPI_Imrecv(b, 200000, MPI_BYTE, &mb, &rq));
        MPI_OK(MPI_Wait(&rq, &st));
        check_status(&st, peer, 501, 200000, "MPI_Imrecv of the second tag-501 message");
        verify(b, 200000, peer, g_rank, 501, 1, "MPI_Imrecv of the second tag-501 message");
        memset(b, 0xEE, 1000);
        MPI_OK(MPI_Mrecv(b, 1000, MPI_BYTE, &ma, &st));
        check_status(&st, peer, 501, 1000, "MPI_Mrecv of the first tag-501 message");
        verify(b, 1000, peer, g_rank, 501, 0, "MPI_Mrecv of the first tag-501 message");
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* rank 0: one message from every other rank, tag 600, via MPI_ANY_SOURCE */
    if (g_rank == 0) {
        int *seen = xmalloc(sizeof(int) * (size_t)g_size);
        memset(seen, 0, sizeof(int) * (size_t)g_size);
        for (int m = 1; m < g_size; m++) {
            MPI_Message msg;
            MPI_Status st;
            int count = -1;
            MPI_OK(MPI_Mprobe(MPI_ANY_SOURCE, 600, MPI_COMM_WORLD, &msg, &st));
            MPI_Get_count(&st, MPI_BYTE, &count);
            int src = st.MPI_SOURCE;
            CHECK(src > 0 && src < g_size && !seen[src], "MPI_Mprobe(MPI_ANY_SOURCE): source %d", src);
            CHECK(count == 5000 + src, "MPI_Mprobe(MPI_ANY_SOURCE): %d B from %d, expected %d", count,
                  src, 5000 + src);
            if (count < 0)
                count = 0;
            unsigned char *b = xmalloc((size_t)count);
            MPI_OK(MPI_Mrecv(b, count, MPI_BYTE, &msg, &st));
            if (src > 0 && src < g_size) {
                seen[src] = 1;
                verify(b, (size_t)count, src, 0, 600, 9, "MPI_Mrecv after MPI_Mprobe(MPI_ANY_SOURCE)");
            }
            free(b);
        }
        free(seen);
    } else {
        size_t len = 5000 + (size_t)g_rank;
        unsigned char *b = xmalloc(len);
        fill(b, len, g_rank, 0, 600, 9);
        MPI_OK(MPI_Send(b, (int)len, MPI_BYTE, 0, 600, MPI_COMM_WORLD));
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

static void test_cancel(void)
{
    test_begin("cancel");
    unsigned char b[4096];
    MPI_Request rq = MPI_REQUEST_NULL;
    MPI_Status st;
    int flag = 0;
    /* nobody ever sends tag 700 */
    MPI_OK(MPI_Irecv(b, sizeof b, MPI_BYTE, MPI_ANY_SOURCE, 700, MPI_COMM_WORLD, &rq));
    MPI_OK(MPI_Cancel(&rq));
    MPI_OK(MPI_Wait(&rq, &st));
    MPI_OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag, "MPI_Test_cancelled false after cancelling an MPI_ANY_SOURCE receive");
    CHECK(rq == MPI_REQUEST_NULL, "request not freed by MPI_Wait after cancel");

    /* cancel a receive for tag 701, then the peer sends tag 701: the next
     * receive gets it */
    MPI_OK(MPI_Irecv(b, sizeof b, MPI_BYTE, peer, 701, MPI_COMM_WORLD, &rq));
    MPI_OK(MPI_Cancel(&rq));
    flag = 0;
    double t0 = MPI_Wtime();
    while (!flag && MPI_Wtime() - t0 < 30.0)
        MPI_OK(MPI_Test(&rq, &flag, &st));
    CHECK(flag, "cancelled receive not complete after 30 s of MPI_Test");
    if (flag) {
        int c = 0;
        MPI_OK(MPI_Test_cancelled(&st, &c));
        CHECK(c, "MPI_Test_cancelled false after cancelling a receive from rank %d", peer);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (is_sender()) {
        send_msg(1234, 701, 1);
        send_msg(100000, 701, 2);
    } else {
        recv_check(1234, 701, 1, "message after a cancelled receive of its tag");
        recv_check(100000, 701, 2, "rendezvous message after a cancelled receive of its tag");
    }

    /* a receive that completes normally is not cancelled */
    if (is_sender()) {
        send_msg(10, 702, 3);
    } else {
        unsigned char *r = xmalloc(10);
        MPI_OK(MPI_Irecv(r, 10, MPI_BYTE, peer, 702, MPI_COMM_WORLD, &rq));
        MPI_OK(MPI_Wait(&rq, &st));
        int c = 1;
        MPI_OK(MPI_Test_cancelled(&st, &c));
        CHECK(!c, "MPI_Test_cancelled true for a receive that completed normally");
        verify(r, 10, peer, g_rank, 702, 3, "receive after the cancel tests");
        free(r);
    }

    /* many receives posted and cancelled, then traffic goes on */
    MPI_Request many[64];
    for (int i = 0; i < 64; i++)
        many[i] = MPI_REQUEST_NULL;
    for (int i = 0; i < 64; i++)
        MPI_OK(MPI_Irecv(b + i, 1, MPI_BYTE, (i & 1) ? peer : MPI_ANY_SOURCE, 710 + i,
                         MPI_COMM_WORLD, &many[i]));
    for (int i = 0; i < 64; i++)
        MPI_OK(MPI_Cancel(&many[i]));
    MPI_Status sts[64];
    MPI_OK(MPI_Waitall(64, many, sts));
    int ncancelled = 0;
    for (int i = 0; i < 64; i++) {
        int c = 0;
        MPI_Test_cancelled(&sts[i], &c);
        ncancelled += c;
    }
    CHECK(ncancelled == 64, "%d of 64 cancelled receives report MPI_Test_cancelled", ncancelled);
    MPI_Barrier(MPI_COMM_WORLD);
    if (is_sender())
        send_msg(64, 720, 4);
    else
        recv_check(64, 720, 4, "message after 64 cancelled receives");
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    start(&argc, &argv);
    peer = g_rank ^ 1;
    if (peer >= g_size) {
        if (g_rank == 0)
            fprintf(stderr, "probe: needs an even number of ranks\n");
        MPI_Finalize();
        return 2;
    }
    double t0 = MPI_Wtime();
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {{"iprobe", test_iprobe}, {"probe", test_probe}, {"mprobe", test_mprobe},
                 {"cancel", test_cancel}};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        tests[i].fn();
        if (g_rank == 0) {
            printf("%s done (%.2f s)\n", tests[i].name, MPI_Wtime() - t0);
            fflush(stdout);
        }
    }
    return finish("probe");
}
