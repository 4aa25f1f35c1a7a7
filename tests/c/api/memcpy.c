/* memcpy.c - omx_memcpy_async/test/wait without any endpoint: sizes 0 to 64 MiB,
 * bad arguments refused, many copies in flight, completion in cookie order.
 * Runs on the process's copy thread, or on omx_copyd when OMX_COPY_SERVICE
 * names a running service (run.sh: memcpy_service). */
#include "common.h"

#include <stdint.h>

static void pattern(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    p[i] = (unsigned char)(i * 131u + seed);
}

int main(void) {
  uint64_t cookie = 0;
  uint32_t done = 7;

  /* Sizes 0 B to 64 MiB, odd offsets included. */
  static const size_t sizes[] = {0, 1, 7, 4095, 4096, 65537, 1u << 20, 3u << 20, 64u << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char *src = malloc(n + 3), *dst = malloc(n + 3);
    CHECK(src && dst, "allocation of %zu\n", n);
    pattern(src, n + 3, (unsigned)k);
    memset(dst, 0xee, n + 3);
    CHECK(omx_memcpy_async(dst + 1, src + 3, n, &cookie) == MX_SUCCESS, "post %zu\n", n);
    CHECK(omx_memcpy_wait(cookie) == MX_SUCCESS, "wait %zu\n", n);
    CHECK(omx_memcpy_test(cookie, &done) == MX_SUCCESS && done == 1, "test %zu\n", n);
    CHECK(memcmp(dst + 1, src + 3, n) == 0, "bytes of %zu\n", n);
    CHECK(dst[0] == 0xee && dst[n + 1] == 0xee, "no byte outside the %zu-byte copy\n", n);
    free(src);
    free(dst);
  }

  /* Bad arguments: a clear error, nothing copied, no cookie spent. */
  char a[64], b[64];
  uint64_t before = cookie, c2 = 0;
  CHECK(omx_memcpy_async(a, a + 8, 16, &c2) == MX_BAD_PARAM_VAL, "overlap refused\n");
  CHECK(omx_memcpy_async(a + 8, a, 16, &c2) == MX_BAD_PARAM_VAL, "overlap refused\n");
  CHECK(omx_memcpy_async(NULL, b, 16, &c2) == MX_BAD_PARAM_VAL, "NULL dst refused\n");
  CHECK(omx_memcpy_async(a, NULL, 16, &c2) == MX_BAD_PARAM_VAL, "NULL src refused\n");
  CHECK(omx_memcpy_async((void *)(UINTPTR_MAX - 8), b, 16, &c2) == MX_BAD_PARAM_VAL,
        "wrapping range refused\n");
  CHECK(omx_memcpy_async(a, b, 16, NULL) == MX_BAD_PARAM_VAL, "NULL cookie refused\n");
  CHECK(omx_memcpy_test(0, &done) == MX_BAD_PARAM_VAL, "cookie 0 unknown\n");
  CHECK(omx_memcpy_test(before + 1, &done) == MX_BAD_PARAM_VAL, "future cookie unknown\n");
  CHECK(omx_memcpy_test(before, NULL) == MX_BAD_PARAM_VAL, "NULL done refused\n");
  CHECK(omx_memcpy_wait(before + 1000) == MX_BAD_PARAM_VAL, "waiting for an unknown cookie\n");
  CHECK(omx_memcpy_async(a, b, 0, &c2) == MX_SUCCESS && c2 == before + 1,
        "refusals spent no cookie\n");

  /* Many in flight (more than any queue holds): each cookie one more than the
   * last, and a completed cookie means every earlier copy completed. */
  enum { N = 3000, LEN = 4096 };
  unsigned char *src = malloc((size_t)N * LEN), *dst = calloc(N, LEN);
  uint64_t *ck = malloc(N * sizeof *ck);
  CHECK(src && dst && ck, "allocation\n");
  pattern(src, (size_t)N * LEN, 99);
  for (int i = 0; i < N; i++) {
    CHECK(omx_memcpy_async(dst + (size_t)i * LEN, src + (size_t)i * LEN, LEN, &ck[i]) ==
              MX_SUCCESS, "post %d\n", i);
    if (i > 0)
      CHECK(ck[i] == ck[i - 1] + 1, "cookies in sequence at %d\n", i);
  }
  int order_ok = 1;
  for (int i = N - 1; i >= 0; i -= 97) {
    if (omx_memcpy_test(ck[i], &done) == MX_SUCCESS && done) {
      for (int j = 0; j < i; j += 13) {
        uint32_t d = 0;
        if (omx_memcpy_test(ck[j], &d) != MX_SUCCESS || !d) order_ok = 0;
      }
    }
  }
  CHECK(order_ok, "a completed cookie has every earlier cookie completed\n");
  CHECK(omx_memcpy_wait(ck[N - 1]) == MX_SUCCESS, "wait for the last\n");
  for (int i = 0; i < N; i++) {
    uint32_t d = 0;
    if (omx_memcpy_test(ck[i], &d) != MX_SUCCESS || !d) order_ok = 0;
  }
  CHECK(order_ok, "every earlier cookie complete after the last\n");
  CHECK(memcmp(dst, src, (size_t)N * LEN) == 0, "every byte of %d copies\n", N);
  free(src);
  free(dst);
  free(ck);
  DONE();
}
