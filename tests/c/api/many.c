/* many.c - 1000 outstanding requests: 1000 posted receives matched by 1000
 * sends posted in the opposite order; 1000 unexpected messages received
 * later; 1000 sends in flight at once (with rendezvous among them) collected
 * with mx_wait_any / mx_test_any. */
#include "common.h"

#define N 1000

static uint32_t len_of(int i) { return (uint32_t)((i * 37) % 700); }

int main(void) {
  static mx_request_t rr[N], sr[N];
  unsigned char *sbuf = xmalloc((size_t)N * 700), *rbuf = xmalloc((size_t)N * 700);
  mx_status_t st;
  uint32_t result;
  uint64_t nic;
  int done;

  t_init();
  nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- 1000 expected receives, sends in reverse order ---- */
  memset(rbuf, 0, (size_t)N * 700);
  for (int i = 0; i < N; i++)
    rr[i] = t_recv(e1, rbuf + (size_t)i * 700, 700, 0x10000 + (uint64_t)i, MX_MATCH_MASK_NONE,
                   CTX(i + 1));
  for (int i = N - 1; i >= 0; i--) {
    fill(sbuf + (size_t)i * 700, len_of(i), (uint32_t)i);
    sr[i] = t_send(e0, to1, sbuf + (size_t)i * 700, len_of(i), 0x10000 + (uint64_t)i,
                   CTX(i + 1));
  }
  done = 0;
  for (int i = 0; i < N; i++) {
    if (!t_wait(e1, &rr[i], &st)) {
      CHECK(0, "receive %d did not complete", i);
      continue;
    }
    int ok = st.code == MX_STATUS_SUCCESS && st.msg_length == len_of(i) &&
             st.xfer_length == len_of(i) && st.match_info == 0x10000 + (uint64_t)i &&
             st.context == CTX(i + 1) && verify(rbuf + (size_t)i * 700, len_of(i), (uint32_t)i) < 0;
    CHECK(ok, "receive %d: code %d len %u match %#" PRIx64 " ctx %p", i, (int)st.code,
          st.msg_length, st.match_info, st.context);
    done += ok;
  }
  CHECK(done == N, "%d of %d expected receives right", done, N);
  for (int i = 0; i < N; i++)
    CHECK(t_wait(e0, &sr[i], &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(i + 1),
          "send %d", i);

  /* ---- 1000 unexpected messages ---- */
  for (int i = 0; i < N; i++) {
    fill(sbuf + (size_t)i * 700, len_of(i), 5000u + (uint32_t)i);
    sr[i] = t_send(e0, to1, sbuf + (size_t)i * 700, len_of(i), 0x20000 + (uint64_t)i, NULL);
  }
  result = 0;
  CHECK_OK(mx_probe(e1, 10000, 0x20000 + N - 1, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1, "last unexpected message never arrived");
  memset(rbuf, 0, (size_t)N * 700);
  for (int i = N - 1; i >= 0; i--)
    rr[i] = t_recv(e1, rbuf + (size_t)i * 700, 700, 0x20000 + (uint64_t)i, MX_MATCH_MASK_NONE,
                   CTX(i));
  done = 0;
  for (int i = 0; i < N; i++) {
    if (!t_wait(e1, &rr[i], &st))
      continue;
    done += st.code == MX_STATUS_SUCCESS && st.msg_length == len_of(i) && st.context == CTX(i) &&
            verify(rbuf + (size_t)i * 700, len_of(i), 5000u + (uint32_t)i) < 0;
  }
  CHECK(done == N, "%d of %d unexpected receives right", done, N);
  for (int i = 0; i < N; i++)
    CHECK(t_wait(e0, &sr[i], &st) && st.code == MX_STATUS_SUCCESS, "unexpected send %d", i);

  /* ---- 1000 in flight, every 50th a 64 KiB rendezvous; collected in any order ---- */
  {
    unsigned char *big = xmalloc(20u * 65536), *bigr = xmalloc(20u * 65536);
    int seen[N];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
      int isbig = i % 50 == 0;
      unsigned char *s = isbig ? big + (size_t)(i / 50) * 65536 : sbuf + (size_t)i * 700;
      unsigned char *r = isbig ? bigr + (size_t)(i / 50) * 65536 : rbuf + (size_t)i * 700;
      uint32_t len = isbig ? 65536 : len_of(i);
      fill(s, len, 9000u + (uint32_t)i);
      rr[i] = t_recv(e1, r, len, 0x100000 + (uint64_t)i, MX_MATCH_MASK_NONE, CTX(i));
      sr[i] = t_send(e0, to1, s, len, 0x100000 + (uint64_t)i, CTX(i));
    }
    done = 0;
    for (int n = 0; n < N; n++) {
      result = 0;
      CHECK_OK(mx_wait_any(e1, 10000, 0x100000, 0xfffffffffff00000ULL, &st, &result));
      if (result != 1) {
        CHECK(0, "wait_any: only %d of %d receives reported", n, N);
        break;
      }
      int i = (int)(st.match_info - 0x100000);
      if (i < 0 || i >= N || seen[i]) {
        CHECK(0, "wait_any reported match %#" PRIx64 " (twice?)", st.match_info);
        continue;
      }
      seen[i] = 1;
      int isbig = i % 50 == 0;
      uint32_t len = isbig ? 65536 : len_of(i);
      unsigned char *r = isbig ? bigr + (size_t)(i / 50) * 65536 : rbuf + (size_t)i * 700;
      done += st.code == MX_STATUS_SUCCESS && st.xfer_length == len && st.context == CTX(i) &&
              verify(r, len, 9000u + (uint32_t)i) < 0;
    }
    CHECK(done == N, "%d of %d in-flight receives right", done, N);
    /* the sends, by test_any polling */
    done = 0;
    double t0 = now_ms();
    while (done < N && now_ms() - t0 < 10000) {
      result = 0;
      if (mx_test_any(e0, 0, 0, &st, &result) != MX_SUCCESS)
        break;
      if (result)
        done += st.code == MX_STATUS_SUCCESS;
    }
    CHECK(done == N, "%d of %d in-flight sends reported by test_any", done, N);
    result = 1;
    CHECK_OK(mx_test_any(e0, 0, 0, &st, &result));
    CHECK(result == 0, "test_any reported more completions than requests");
    free(big);
    free(bigr);
  }
  (void)nic;
  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  free(sbuf);
  free(rbuf);
  mx_finalize();
  DONE();
}
