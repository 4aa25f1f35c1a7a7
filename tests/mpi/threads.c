/* threads.c - MPI_THREAD_MULTIPLE: several threads per rank exchange checked
 * messages with the partner rank (r^1) at once, each thread on its own tag
 * and, in a second phase, every thread with MPI_ANY_TAG on its own
 * communicator (duplicates of MPI_COMM_WORLD).
 *
 *   threads [THREADS]    (default 4; even number of ranks >= 2)
 *
 * Exits 0 with a note when the library does not provide
 * MPI_THREAD_MULTIPLE.
 */
#include "common.h"

#include <pthread.h>

#define ITERS 150
#define MAXT 16

static int peer, nthreads = 4;
static MPI_Comm comms[MAXT];
static long t_failures[MAXT];
static pthread_mutex_t report_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t iter_len(int i, int t)
{
    static const size_t l[] = {0, 8, 1000, 9000, 33000, 100000, 4, 64, 262144};
    return l[(i + t) % (int)(sizeof l / sizeof l[0])];
}

/* Each thread reports its own failures (the counters of common.h are not
 * thread-safe), folded into g_failures at the end. */
static void tfail(int t, const char *fmt, long a, long b)
{
    pthread_mutex_lock(&report_lock);
    if (t_failures[t]++ < 5) {
        fprintf(stderr, "rank %d thread %d: FAIL ", g_rank, t);
        fprintf(stderr, fmt, a, b);
        fputc('\n', stderr);
    }
    pthread_mutex_unlock(&report_lock);
}

static void *worker(void *arg)
{
    int t = (int)(long)arg;
    unsigned char *s = malloc(262144), *r = malloc(262144);
    if (!s || !r)
        return NULL;
    for (int phase = 0; phase < 2; phase++) {
        MPI_Comm comm = phase ? comms[t] : MPI_COMM_WORLD;
        int tag = phase ? MPI_ANY_TAG : 100 + t;
        for (int i = 0; i < ITERS; i++) {
            size_t len = iter_len(i, t);
            MPI_Request rq[2];
            MPI_Status st[2];
            fill(s, len, g_rank, peer, 100 + t, i + phase * ITERS);
            memset(r, 0xEE, len);
            int rc = MPI_Irecv(r, (int)len, MPI_BYTE, peer, tag, comm, &rq[0]);
            rc |= MPI_Isend(s, (int)len, MPI_BYTE, peer, 100 + t, comm, &rq[1]);
            rc |= MPI_Waitall(2, rq, st);
            if (rc != MPI_SUCCESS) {
                tfail(t, "MPI call failed at iteration %ld (phase %ld)", i, phase);
                continue;
            }
            int n = -1;
            MPI_Get_count(&st[0], MPI_BYTE, &n);
            if (st[0].MPI_TAG != 100 + t)
                tfail(t, "received tag %ld, expected %ld", st[0].MPI_TAG, 100 + t);
            if ((size_t)n != len)
                tfail(t, "received %ld B, expected %ld", n, (long)len);
            for (size_t k = 0; k < len; k++)
                if (r[k] != pattern_byte(peer, g_rank, 100 + t, i + phase * ITERS, k)) {
                    tfail(t, "message %ld: wrong byte at offset %ld", i, (long)k);
                    break;
                }
        }
    }
    free(s);
    free(r);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (argc > 1)
        nthreads = atoi(argv[1]);
    if (nthreads < 1 || nthreads > MAXT)
        nthreads = 4;
    peer = g_rank ^ 1;
    if (provided < MPI_THREAD_MULTIPLE || peer >= g_size) {
        if (g_rank == 0)
            printf("threads: skipped (%s)\n", peer >= g_size ? "needs an even number of ranks"
                                                             : "MPI_THREAD_MULTIPLE not provided");
        MPI_Finalize();
        return 0;
    }
    for (int t = 0; t < nthreads; t++)
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[t]);
    double t0 = MPI_Wtime();
    pthread_t th[MAXT];
    for (int t = 0; t < nthreads; t++)
        pthread_create(&th[t], NULL, worker, (void *)(long)t);
    for (int t = 0; t < nthreads; t++)
        pthread_join(th[t], NULL);
    test_begin("threads");
    for (int t = 0; t < nthreads; t++) {
        g_checks += 2 * ITERS;
        g_failures += t_failures[t];
        MPI_Comm_free(&comms[t]);
    }
    if (g_rank == 0)
        printf("threads: %d threads x %d exchanges x 2 phases done (%.2f s)\n", nthreads, ITERS,
               MPI_Wtime() - t0);
    return finish("threads");
}
