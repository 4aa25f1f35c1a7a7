/* memcpy_async.c - time of omx_memcpy_async copies against memcpy (a benchmark,
 * not a test): for each size, the time the application sees (posting), the total
 * until the copy is done, and memcpy's time. Best of REPS runs per size.
 *   memcpy_async [REPS]      (bench/memcpy_async.sh builds and runs it) */
#define _POSIX_C_SOURCE 200809L
#include <mx_extensions.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 5;
  size_t max = 64u << 20;
  char *src = malloc(max), *dst = malloc(max);
  if (!src || !dst) return 1;
  memset(src, 1, max);
  memset(dst, 2, max);
  printf("%10s %12s %12s %12s\n", "bytes", "memcpy_us", "visible_us", "total_us");
  for (size_t n = 64u << 10; n <= max; n *= 4) {
    double sync = 1e30, vis = 1e30, tot = 1e30;
    for (int r = 0; r < reps; r++) {
      double t0 = now_us();
      memcpy(dst, src, n);
      double t1 = now_us();
      uint64_t c;
      if (omx_memcpy_async(dst, src, n, &c) != MX_SUCCESS) return 1;
      double t2 = now_us();
      if (omx_memcpy_wait(c) != MX_SUCCESS) return 1;
      double t3 = now_us();
      if (t1 - t0 < sync) sync = t1 - t0;
      if (t2 - t1 < vis) vis = t2 - t1;
      if (t3 - t1 < tot) tot = t3 - t1;
    }
    printf("%10zu %12.1f %12.1f %12.1f\n", n, sync, vis, tot);
  }
  return 0;
}
