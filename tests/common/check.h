/* check.h - the check harness of omx's C tests (tests/c/api, tests/ofi): one home
 * for checks, their report, time limits and data patterns.
 *
 * A failed check prints "FAIL file:line: ..." on stderr; DONE() prints
 * "<name>: N checks, M failed" and exits 0 only when every check passed.
 * Header-only: each test is built from one .c file.
 */
#ifndef OMX_TEST_CHECK_H
#define OMX_TEST_CHECK_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int t_checks;
static int t_failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    t_checks++;                                                                \
    if (!(cond)) {                                                             \
      t_failures++;                                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                     \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

static inline void t_done(const char *file) {
  const char *base = strrchr(file, '/');
  printf("%s: %d checks, %d failed\n", base ? base + 1 : file, t_checks, t_failures);
  fflush(stdout);
  fflush(stderr);
  /* _exit: skip destructors of a library possibly left in a bad state. */
  _exit(t_failures ? 1 : 0);
}

#define DONE() t_done(__FILE__)

/* A check whose failure makes the rest of the test meaningless. */
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    int req_ok_ = (cond) ? 1 : 0;                                              \
    CHECK(req_ok_, __VA_ARGS__);                                               \
    if (!req_ok_) {                                                            \
      fprintf(stderr, "(aborting test after a required check)\n");             \
      t_done(__FILE__);                                                        \
    }                                                                          \
  } while (0)

/* ---- time ---- */

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* TEST_TIME_FACTOR (default 1, never below): upper time limits are multiplied by it
 * so that a loaded machine can be given more time; lower limits are never scaled. */
static inline double time_factor(void) {
  const char *f = getenv("TEST_TIME_FACTOR");
  double k = f ? atof(f) : 1.0;
  return k >= 1.0 ? k : 1.0;
}

static inline double time_limit_ms(double ms) { return ms * time_factor(); }

static inline void sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ---- data patterns: byte i of a buffer filled with seed ---- */

static inline unsigned char pat(uint32_t seed, size_t i) {
  uint32_t x = (seed + 1u) * 2654435761u ^ ((uint32_t)i * 40503u + (uint32_t)(i >> 7));
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  x ^= x >> 15;
  return (unsigned char)x;
}

static inline void fill(void *buf, size_t len, uint32_t seed) {
  unsigned char *b = buf;
  for (size_t i = 0; i < len; i++)
    b[i] = pat(seed, i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long verify(const void *buf, size_t len, uint32_t seed) {
  const unsigned char *b = buf;
  for (size_t i = 0; i < len; i++)
    if (b[i] != pat(seed, i))
      return (long)i;
  return -1;
}

static inline void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(2);
  }
  return p;
}

#endif
