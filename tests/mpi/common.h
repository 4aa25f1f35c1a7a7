/* common.h - helpers shared by the MPI test programs of tests/mpi.
 *
 * Every check that fails prints one line "rank R: FAIL <test>: <what>" (the
 * first MAX_REPORTS of them per rank) and counts; finish() sums the failures
 * over all ranks, rank 0 prints "<program>: N checks, M failures", and the
 * program exits 1 when any rank failed. A wrong byte is reported with its
 * offset, expected and actual values. */
#ifndef OMX_MPI_TEST_COMMON_H
#define OMX_MPI_TEST_COMMON_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPORTS 20

static int g_rank = -1, g_size = 0;
static long g_checks = 0, g_failures = 0;
static const char *g_test = "init";
static char g_ctx[128]; /* what the test is doing now, for MPI_OK reports */

static inline void test_begin(const char *name)
{
    g_test = name;
    g_ctx[0] = 0;
}

static inline void failf(const char *fmt, ...)
{
    va_list ap;
    g_failures++;
    if (g_failures > MAX_REPORTS)
        return;
    fprintf(stderr, "rank %d: FAIL %s: ", g_rank, g_test);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        g_checks++;                                                                                \
        if (!(cond))                                                                               \
            failf(__VA_ARGS__);                                                                    \
    } while (0)

/* MPI calls: any error code other than MPI_SUCCESS is a failure (the
 * programs set MPI_ERRORS_RETURN on MPI_COMM_WORLD). */
#define MPI_OK(call)                                                                               \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        g_checks++;                                                                                \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char msg_[MPI_MAX_ERROR_STRING];                                                       \
            int len_ = 0;                                                                          \
            MPI_Error_string(rc_, msg_, &len_);                                                    \
            failf("%s:%d: %s returned %d (%s)%s%s", __FILE__, __LINE__, #call, rc_, msg_,           \
                  g_ctx[0] ? " while " : "", g_ctx);                                               \
        }                                                                                          \
    } while (0)

/* The byte at offset i of the message identified by (src, dst, tag, seq). */
static inline unsigned char pattern_byte(int src, int dst, int tag, long seq, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull;
    x ^= ((uint64_t)(unsigned)src << 56) ^ ((uint64_t)(unsigned)dst << 48) ^
         ((uint64_t)(unsigned)tag << 24) ^ (uint64_t)seq;
    x ^= x >> 29;
    return (unsigned char)(x ^ (x >> 17) ^ (i >> 8));
}

static inline void fill(void *buf, size_t len, int src, int dst, int tag, long seq)
{
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i++)
        p[i] = pattern_byte(src, dst, tag, seq, i);
}

/* Checks len bytes; reports the first wrong byte and how many are wrong. */
static inline int verify(const void *buf, size_t len, int src, int dst, int tag, long seq,
                  const char *what)
{
    const unsigned char *p = buf;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pattern_byte(src, dst, tag, seq, i)) {
            if (bad++ == 0)
                first = i;
        }
    }
    g_checks++;
    if (bad) {
        failf("%s: %zu of %zu bytes wrong (src %d dst %d tag %d seq %ld), first at offset %zu: "
              "expected 0x%02x got 0x%02x",
              what, bad, len, src, dst, tag, seq, first,
              pattern_byte(src, dst, tag, seq, first), p[first]);
        return 0;
    }
    return 1;
}

static inline void *xmalloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", g_rank, len);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static inline void start(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

/* Status checks: source, tag and byte count of a completed receive. */
static inline void check_status(const MPI_Status *st, int src, int tag, int count, const char *what)
{
    int n = -1;
    MPI_Get_count(st, MPI_BYTE, &n);
    CHECK(src == MPI_ANY_SOURCE || st->MPI_SOURCE == src, "%s: status source %d, expected %d",
          what, st->MPI_SOURCE, src);
    CHECK(tag == MPI_ANY_TAG || st->MPI_TAG == tag, "%s: status tag %d, expected %d", what,
          st->MPI_TAG, tag);
    CHECK(count < 0 || n == count, "%s: count %d, expected %d", what, n, count);
}

/* With OMX_MPI_EXPECT_LIB=NAME in the environment, a library whose path
 * contains NAME must be mapped into this process (for instance libomx-fi.so:
 * the omx libfabric provider really was loaded, no other transport stood in). */
static inline void check_expected_library(void)
{
    const char *want = getenv("OMX_MPI_EXPECT_LIB");
    if (!want || !*want)
        return;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, want))
            found = 1;
    if (f)
        fclose(f);
    test_begin("transport");
    CHECK(found, "%s is not loaded in this process", want);
}

static inline int finish(const char *prog)
{
    check_expected_library();
    long sums[2] = {g_checks, g_failures}, tot[2] = {0, 0};
    MPI_Allreduce(sums, tot, 2, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s: %d ranks, %ld checks, %ld failures\n", prog, g_size, tot[0], tot[1]);
    fflush(stdout);
    MPI_Finalize();
    return tot[1] ? 1 : 0;
}

/* Message sizes from 0 B to max: every power of two, its neighbours, and the
 * sizes around omx's thresholds (shared-memory rendezvous 4 KiB, fragment
 * 8 KiB-ish with MTU 9000, eager/rendezvous 32 KiB). Returns the count. */
static inline int test_sizes(size_t *out, int cap, size_t max)
{
    static const size_t extra[] = {4095, 4097, 8900, 8960, 8961, 9000, 17000, 32767, 32768, 32769, 65537, 100000, 1000000};
    int n = 0;
    out[n++] = 0;
    for (size_t p = 1; p <= max && n + 3 < cap; p <<= 1) {
        if (p > 2 && out[n - 1] != p - 1)
            out[n++] = p - 1;
        out[n++] = p;
        if (p >= 4 && p + 1 <= max)
            out[n++] = p + 1;
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0] && n < cap; i++)
        if (extra[i] <= max)
            out[n++] = extra[i];
    /* sort, drop duplicates */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            size_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (m == 0 || out[m - 1] != out[i])
            out[m++] = out[i];
    return m;
}

#endif
