/* memcpy_bw.c - single-threaded memcpy bandwidth, the ceiling of a one-copy
 * intra-node transfer (bench/intranode.sh compiles and runs it).
 *
 *   memcpy_bw SIZE...      e.g. memcpy_bw 4194304 67108864
 *
 * For each size: source and destination buffers (page-aligned, touched
 * first), a few warm-up copies, then timed samples for about 0.4 s (at least
 * 5), each of enough copies to move 4 MiB (one copy from 4 MiB up).
 * Prints one line per size: "size best_MBps median_MBps copies", MB/s being
 * 10^6 bytes per second (as omx_perf and the bench CSVs use). */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Called through a volatile pointer so the copies cannot be elided. */
static void *(*volatile copy)(void *, const void *, size_t) = memcpy;
static volatile unsigned sink;

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SIZE...\n", argv[0]);
    return 2;
  }
  for (int a = 1; a < argc; a++) {
    size_t n = strtoull(argv[a], NULL, 0);
    unsigned char *src, *dst;
    if (n == 0 || posix_memalign((void **)&src, 4096, n) || posix_memalign((void **)&dst, 4096, n)) {
      fprintf(stderr, "bad size or out of memory: %s\n", argv[a]);
      return 1;
    }
    memset(src, 0x5a, n);
    memset(dst, 0xa5, n);
    for (int i = 0; i < 3; i++)
      copy(dst, src, n);
    enum { MAXC = 100000 };
    static double bw[MAXC];
    int c = 0;
    double start = now_s();
    /* small sizes: several copies per timed sample (at least 4 MiB copied) */
    int reps = n < (4u << 20) ? (int)((4u << 20) / n) : 1;
    while (c < MAXC && (c < 5 || now_s() - start < 0.4)) {
      double t0 = now_s();
      for (int r = 0; r < reps; r++)
        copy(dst, src, n);
      double t1 = now_s();
      sink += dst[(size_t)c * 4099 % n];
      bw[c++] = (double)n * reps / ((t1 - t0) * 1e6);
    }
    qsort(bw, (size_t)c, sizeof bw[0], cmp_d);
    printf("%zu %.1f %.1f %d\n", n, bw[c - 1], bw[c / 2], c);
    free(src);
    free(dst);
  }
  return 0;
}
