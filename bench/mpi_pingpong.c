/* mpi_pingpong.c - MPI ping-pong between ranks 0 and 1 (other ranks idle).
 *
 *   mpi_pingpong [-S min] [-E max] [-r runs] [-t seconds] [-L]
 *
 * Sizes are min, 2*min, ... up to max (default 1 B .. 16 MiB), plus 0 B
 * when min is 0. For each size: one checked exchange (every byte compared),
 * then `runs` timed runs (default 5) of n round trips each, n chosen so that a
 * run lasts about `seconds` (default 0.1 s, at least 3 round trips), after a
 * warm-up of n/10 + 1 round trips. Rank 0 prints one line per size:
 *
 *   size  latency_us  bandwidth_MBps  min_latency_us  round_trips_per_run
 *
 * latency = half a round trip, median over the runs; bandwidth = size /
 * latency in 10^6 B/s. -L times every round trip and adds three columns: the
 * median, 99th percentile and maximum half round trip of all timed ones (us). Lines starting with '#' are comments. Exits non-zero
 * if a checked exchange carried wrong data.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* n round trips of len bytes; returns the elapsed time on rank 0. With `each`,
 * rank 0 also stores every half round trip there (us). */
static double rounds(int rank, char *sbuf, char *rbuf, int len, long n, double *each)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < n; i++) {
        double ti = each ? MPI_Wtime() : 0;
        if (rank == 0) {
            MPI_Send(sbuf, len, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(rbuf, len, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(rbuf, len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(sbuf, len, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
        if (each)
            each[i] = (MPI_Wtime() - ti) / 2.0 * 1e6;
    }
    return MPI_Wtime() - t0;
}

int main(int argc, char **argv)
{
    long min = 1, max = 16L << 20;
    int runs = 5;
    double seconds = 0.1;
    int rank, size, opt, bad = 0, percentiles = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    while ((opt = getopt(argc, argv, "S:E:r:t:L")) != -1) {
        switch (opt) {
        case 'S':
            min = atol(optarg);
            break;
        case 'E':
            max = atol(optarg);
            break;
        case 'r':
            runs = atoi(optarg);
            break;
        case 't':
            seconds = atof(optarg);
            break;
        case 'L':
            percentiles = 1;
            break;
        default:
            if (rank == 0)
                fprintf(stderr, "usage: %s [-S min] [-E max] [-r runs] [-t seconds] [-L]\n", argv[0]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (size < 2 || runs < 1 || runs > 100 || min < 0 || max < min || max > (1L << 30)) {
        if (rank == 0)
            fprintf(stderr, "mpi_pingpong: needs 2 ranks, 1..100 runs, 0 <= min <= max <= 1 GiB\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *sbuf = malloc((size_t)max + 1), *rbuf = malloc((size_t)max + 1);
    if (!sbuf || !rbuf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    memset(sbuf, 0, (size_t)max + 1);
    memset(rbuf, 0, (size_t)max + 1);
    double *t = calloc((size_t)runs, sizeof(double));
    if (rank == 0) {
        char lib[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(lib, &len);
        char *nl = strchr(lib, '\n');
        if (nl)
            *nl = 0;
        printf("# %s; %d runs per size, median\n", lib, runs);
        printf("# size latency_us bandwidth_MBps min_latency_us round_trips_per_run%s\n",
               percentiles ? " p50_us p99_us max_us" : "");
        fflush(stdout);
    }

    long first = min;
    if (min == 0) {
        first = 1;
    }
    for (long len = min; len <= max; len = (len == 0) ? first : len * 2) {
        /* one checked exchange: rank 0 sends a pattern, rank 1 returns it
         * transformed */
        if (rank <= 1) {
            for (long i = 0; i < len; i++)
                sbuf[i] = (char)(rank == 0 ? (i * 7 + len) : 0);
        }
        if (rank == 0) {
            MPI_Send(sbuf, (int)len, MPI_BYTE, 1, 2, MPI_COMM_WORLD);
            MPI_Recv(rbuf, (int)len, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long i = 0; i < len; i++)
                if (rbuf[i] != (char)(~(i * 7 + len))) {
                    fprintf(stderr, "mpi_pingpong: %ld B: byte %ld wrong\n", len, i);
                    bad = 1;
                    break;
                }
        } else if (rank == 1) {
            MPI_Recv(rbuf, (int)len, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long i = 0; i < len; i++)
                rbuf[i] = (char)~rbuf[i];
            MPI_Send(rbuf, (int)len, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
        /* calibrate: time a few round trips (after as many untimed ones:
         * the first messages of a connection pay for setting it up), pick n
         * for `seconds` per run */
        long n = 3;
        rounds(rank, sbuf, rbuf, (int)len, n, NULL);
        double probe = rounds(rank, sbuf, rbuf, (int)len, n, NULL);
        MPI_Bcast(&probe, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        double per = probe / (double)n;
        n = per > 0 ? (long)(seconds / per) : 1000;
        if (n < 3)
            n = 3;
        if (n > 100000)
            n = 100000;
        rounds(rank, sbuf, rbuf, (int)len, n / 10 + 1, NULL);
        double *each = percentiles && rank == 0 ? malloc((size_t)(runs * n) * sizeof(double)) : NULL;
        if (percentiles && rank == 0 && !each)
            MPI_Abort(MPI_COMM_WORLD, 2);
        for (int r = 0; r < runs; r++)
            t[r] = rounds(rank, sbuf, rbuf, (int)len, n, each ? each + r * n : NULL) / (double)n / 2.0 * 1e6;
        if (rank == 0) {
            qsort(t, (size_t)runs, sizeof(double), cmp_double);
            double med = (runs % 2) ? t[runs / 2] : (t[runs / 2 - 1] + t[runs / 2]) / 2.0;
            printf("%ld %.3f %.2f %.3f %ld", len, med, med > 0 ? (double)len / med : 0.0, t[0], n);
            if (each) {
                /* nearest rank over all timed round trips */
                long all = runs * n, r50 = (all + 1) / 2, r99 = (long)(0.99 * (double)all + 0.999999);
                qsort(each, (size_t)all, sizeof(double), cmp_double);
                printf(" %.3f %.3f %.3f", each[r50 - 1], each[(r99 < 1 ? 1 : r99) - 1], each[all - 1]);
            }
            printf("\n");
            fflush(stdout);
        }
        free(each);
        if (len == 0 && first > max)
            break;
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(sbuf);
    free(rbuf);
    free(t);
    MPI_Finalize();
    return bad;
}
