/* coll.c - collectives with checked results.
 *
 *   coll         (any number of ranks >= 1)
 *
 * barrier  : a rank that enters late holds everybody (each root in turn
 *            sleeps 100 ms before entering; nobody may leave before the
 *            root's entry time, on the shared wall clock), plus 200
 *            back-to-back barriers
 * bcast    : every root, 0 B .. 4 MiB, data checked on every rank
 * allreduce: MPI_SUM of ints (1 .. 1M elements), MPI_MAX of doubles,
 *            MPI_MIN with MPI_IN_PLACE; exact expected values
 * alltoall : 1 .. 64K ints per peer, every block checked
 * allgather: 1000 bytes per rank
 */
#include "common.h"

#include <time.h>
#include <unistd.h>

/* Wall-clock seconds: the test hosts are namespaces of one machine, so every
 * rank reads the same clock (on real hosts, NTP keeps them within the
 * tolerance below, or the check is off with OMX_MPI_NO_CLOCK_CHECK=1). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void test_barrier(void)
{
    test_begin("barrier");
    for (int i = 0; i < 200; i++)
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (g_size < 2 || getenv("OMX_MPI_NO_CLOCK_CHECK"))
        return;
    /* each root in turn enters late: nobody may leave the barrier before
     * the root entered it */
    for (int root = 0; root < g_size && root < 4; root++) {
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        double entered = 0, left;
        if (g_rank == root) {
            usleep(100000);
            entered = now();
        }
        MPI_OK(MPI_Barrier(MPI_COMM_WORLD));
        left = now();
        MPI_OK(MPI_Bcast(&entered, 1, MPI_DOUBLE, root, MPI_COMM_WORLD));
        CHECK(left >= entered - 0.002,
              "left the barrier %.1f ms before rank %d entered it (after sleeping 100 ms)",
              (entered - left) * 1e3, root);
    }
}

static void test_bcast(void)
{
    static const size_t lens[] = {0, 1, 8, 1000, 4096, 32768, 65536, 100000, 1u << 20, 4u << 20};
    test_begin("bcast");
    unsigned char *b = xmalloc(4u << 20);
    for (int root = 0; root < g_size; root++) {
        for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
            size_t len = lens[k];
            if (g_rank == root)
                fill(b, len, root, -1, 900, (long)k);
            else
                memset(b, 0xEE, len);
            MPI_OK(MPI_Bcast(b, (int)len, MPI_BYTE, root, MPI_COMM_WORLD));
            char what[64];
            snprintf(what, sizeof what, "MPI_Bcast of %zu B from %d", len, root);
            verify(b, len, root, -1, 900, (long)k, what);
        }
    }
    free(b);
}

static void test_allreduce(void)
{
    static const int counts[] = {1, 7, 1000, 65536, 1 << 20};
    test_begin("allreduce");
    int *in = xmalloc(sizeof(int) << 20), *out = xmalloc(sizeof(int) << 20);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int n = counts[k];
        for (int i = 0; i < n; i++)
            in[i] = (g_rank + 1) * (i % 1000) + g_rank;
        memset(out, 0, sizeof(int) * (size_t)n);
        MPI_OK(MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        long tri = (long)g_size * (g_size + 1) / 2, ranks = (long)g_size * (g_size - 1) / 2;
        int bad = 0, first = -1;
        for (int i = 0; i < n; i++) {
            long want = tri * (i % 1000) + ranks;
            if (out[i] != want && bad++ == 0)
                first = i;
        }
        CHECK(bad == 0, "MPI_SUM of %d ints: %d wrong, first [%d] = %d, expected %ld", n, bad, first,
              first >= 0 ? out[first] : 0, first >= 0 ? tri * (first % 1000) + ranks : 0);
    }
    double din[513], dout[513];
    for (int i = 0; i < 513; i++)
        din[i] = (double)((g_rank * 37 + i) % g_size) + 0.5 * i;
    MPI_OK(MPI_Allreduce(din, dout, 513, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    int bad = 0;
    for (int i = 0; i < 513; i++) {
        double want = -1;
        for (int r = 0; r < g_size; r++) {
            double v = (double)((r * 37 + i) % g_size) + 0.5 * i;
            if (v > want)
                want = v;
        }
        bad += dout[i] != want;
    }
    CHECK(bad == 0, "MPI_MAX of 513 doubles: %d wrong", bad);
    long v[3] = {g_rank + 5, -g_rank, 1000 - g_rank};
    MPI_OK(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_LONG, MPI_MIN, MPI_COMM_WORLD));
    CHECK(v[0] == 5 && v[1] == -(g_size - 1) && v[2] == 1000 - (g_size - 1),
          "MPI_MIN in place: %ld %ld %ld", v[0], v[1], v[2]);
    free(in);
    free(out);
}

static void test_alltoall(void)
{
    static const int counts[] = {1, 100, 2000, 65536};
    test_begin("alltoall");
    size_t maxn = (size_t)65536 * (size_t)g_size;
    int *s = xmalloc(sizeof(int) * maxn), *r = xmalloc(sizeof(int) * maxn);
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        int n = counts[k];
        for (int p = 0; p < g_size; p++)
            for (int i = 0; i < n; i++)
                s[(size_t)p * n + i] = g_rank * 1000003 + p * 7919 + i;
        memset(r, 0xEE, sizeof(int) * (size_t)n * (size_t)g_size);
        MPI_OK(MPI_Alltoall(s, n, MPI_INT, r, n, MPI_INT, MPI_COMM_WORLD));
        int bad = 0;
        for (int p = 0; p < g_size; p++)
            for (int i = 0; i < n; i++)
                bad += r[(size_t)p * n + i] != p * 1000003 + g_rank * 7919 + i;
        CHECK(bad == 0, "MPI_Alltoall of %d ints per peer: %d wrong", n, bad);
    }
    free(s);
    free(r);
}

static void test_allgather(void)
{
    test_begin("allgather");
    unsigned char mine[1000], *all = xmalloc(1000 * (size_t)g_size);
    fill(mine, sizeof mine, g_rank, -1, 950, 0);
    MPI_OK(MPI_Allgather(mine, 1000, MPI_BYTE, all, 1000, MPI_BYTE, MPI_COMM_WORLD));
    for (int p = 0; p < g_size; p++) {
        char what[64];
        snprintf(what, sizeof what, "MPI_Allgather block of rank %d", p);
        verify(all + (size_t)p * 1000, 1000, p, -1, 950, 0, what);
    }
    free(all);
}

int main(int argc, char **argv)
{
    start(&argc, &argv);
    double t0 = MPI_Wtime();
    static const struct {
        const char *name;
        void (*fn)(void);
    } tests[] = {{"barrier", test_barrier}, {"bcast", test_bcast}, {"allreduce", test_allreduce},
                 {"alltoall", test_alltoall}, {"allgather", test_allgather}};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        tests[i].fn();
        if (g_rank == 0) {
            printf("%s done (%.2f s)\n", tests[i].name, MPI_Wtime() - t0);
            fflush(stdout);
        }
    }
    return finish("coll");
}
