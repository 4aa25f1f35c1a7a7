/* sendrecv.c - mx_isend / mx_irecv / mx_test / mx_wait / mx_context on one
 * host (two endpoints on lo, and an endpoint sending to itself): every
 * protocol size class, receive posted before (expected) and after
 * (unexpected) the message, all status fields (code, source, match_info,
 * msg_length, xfer_length, context), data bytes, replies through
 * status.source, and per-sender ordering. */
#include "common.h"

static uint64_t nic;

/* One message from `from` (address `to` on it) to `into`; endpoint index of
 * the sender is from_eid.  unexpected: the receive is posted after arrival. */
static void one(mx_endpoint_t from, uint32_t from_eid, mx_endpoint_addr_t to, mx_endpoint_t into,
                uint32_t len, uint32_t seed, int unexpected) {
  unsigned char *s = xmalloc(len), *r = xmalloc(len + 8);
  uint64_t match = ((uint64_t)seed << 32) | len;
  mx_request_t sr, rr = NULL;
  mx_status_t st;
  uint32_t result = 0;
  void *ctx = NULL;
  fill(s, len, seed);
  memset(r, 0xee, len + 8);
  if (!unexpected)
    rr = t_recv(into, r, len, match, MX_MATCH_MASK_NONE, CTX(seed));
  sr = t_send(from, to, s, len, match, CTX(seed + 1));
  CHECK_OK(mx_context(&sr, &ctx));
  CHECK(ctx == CTX(seed + 1), "mx_context of a send: %p", ctx);
  if (unexpected) {
    /* make sure it is there before posting */
    CHECK_OK(mx_probe(into, 5000, match, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1, "len %u: message never became unexpected", len);
    rr = t_recv(into, r, len, match, MX_MATCH_MASK_NONE, CTX(seed));
  }
  CHECK_OK(mx_context(&rr, &ctx));
  CHECK(ctx == CTX(seed), "mx_context of a receive: %p", ctx);
  if (!t_wait(into, &rr, &st)) {
    CHECK(0, "len %u (%s): receive did not complete", len, unexpected ? "unexpected" : "expected");
  } else {
    CHECK(rr == NULL, "request not cleared by mx_wait");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, match, len, len, CTX(seed));
    CHECK_SOURCE(st, nic, from_eid);
    long bad = verify(r, len, seed);
    CHECK(bad < 0, "len %u: data differs at byte %ld", len, bad);
    CHECK(r[len] == 0xee, "len %u: wrote past the receive buffer", len);
  }
  /* the send completes too, with the full length */
  memset(&st, 0, sizeof st);
  if (!t_wait(from, &sr, &st)) {
    CHECK(0, "len %u: send did not complete", len);
  } else {
    CHECK_STATUS(st, MX_STATUS_SUCCESS, match, len, len, CTX(seed + 1));
  }
  free(s);
  free(r);
}

int main(void) {
  static const uint32_t lens[] = {0,    1,     7,     32,    33,    128,   129,    1000,
                                  4096, 8191,  8192,  9000,  32767, 32768, 32769,  65536,
                                  100003, 1u << 20, (4u << 20) + 3};
  const size_t nlens = sizeof lens / sizeof lens[0];
  t_init();
  nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY), self = t_connect(e0, 0, TKEY);
  uint32_t seed = 10;

  for (int unexp = 0; unexp < 2; unexp++)
    for (size_t i = 0; i < nlens; i++)
      one(e0, 0, to1, e1, lens[i], seed++, unexp);
  /* to itself */
  for (int unexp = 0; unexp < 2; unexp++)
    for (size_t i = 0; i < nlens; i++)
      one(e0, 0, self, e0, lens[i], seed++, unexp);

  /* reply through the source of a receive, without connecting back */
  {
    char b[64];
    mx_status_t st;
    mx_request_t r = t_recv(e1, b, sizeof b, 1, MX_MATCH_MASK_NONE, NULL);
    mx_request_t s = t_send(e0, to1, b, 8, 1, NULL);
    REQUIRE(t_wait(e1, &r, &st), "hello not received");
    t_wait(e0, &s, NULL);
    mx_endpoint_addr_t back = st.source;
    for (size_t i = 0; i < nlens; i++)
      one(e1, 1, back, e0, lens[i], seed++, (int)(i & 1));
  }

  /* polling with mx_test: result 0 while pending, then 1 with the status */
  {
    char sb[40], rb[40];
    mx_status_t st;
    uint32_t result = 7;
    fill(sb, sizeof sb, 99);
    mx_request_t r = t_recv(e1, rb, sizeof rb, 0x77, MX_MATCH_MASK_NONE, CTX(3));
    CHECK_OK(mx_test(e1, &r, &st, &result));
    CHECK(result == 0 && r != NULL, "mx_test of an unmatched receive: result %u", result);
    mx_request_t s = t_send(e0, to1, sb, sizeof sb, 0x77, CTX(4));
    double t0 = now_ms();
    result = 0;
    while (result == 0 && now_ms() - t0 < 5000)
      CHECK_OK(mx_test(e1, &r, &st, &result));
    CHECK(result == 1 && r == NULL, "mx_test never reported the receive");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x77, 40, 40, CTX(3));
    CHECK(verify(rb, sizeof rb, 99) < 0, "mx_test data");
    result = 0;
    t0 = now_ms();
    while (result == 0 && now_ms() - t0 < 5000)
      CHECK_OK(mx_test(e0, &s, &st, &result));
    CHECK(result == 1 && s == NULL, "mx_test never reported the send");
    /* NULL status is allowed: completion without details */
    s = t_send(e0, to1, sb, 4, 0x78, NULL);
    r = t_recv(e1, rb, 4, 0x78, MX_MATCH_MASK_NONE, NULL);
    result = 0;
    CHECK_OK(mx_wait(e1, &r, 5000, NULL, &result));
    CHECK(result == 1, "mx_wait with a NULL status");
    result = 0;
    CHECK_OK(mx_wait(e0, &s, 5000, NULL, &result));
    CHECK(result == 1, "mx_wait with a NULL status (send)");
  }

  /* per-sender order: 100 messages of one match value arrive in send order */
  {
    enum { N = 100 };
    mx_request_t s[N], r[N];
    static unsigned char sb[N][200], rb[N][200];
    mx_status_t st;
    for (int i = 0; i < N; i++) {
      fill(sb[i], sizeof sb[i], 1000u + (uint32_t)i);
      s[i] = t_send(e0, to1, sb[i], (uint32_t)(i % 3 == 0 ? 200 : 20 + i), 0x5, CTX(i));
    }
    for (int i = 0; i < N; i++)
      r[i] = t_recv(e1, rb[i], sizeof rb[i], 0x5, MX_MATCH_MASK_NONE, CTX(i));
    for (int i = 0; i < N; i++) {
      uint32_t len = (uint32_t)(i % 3 == 0 ? 200 : 20 + i);
      if (!t_wait(e1, &r[i], &st)) {
        CHECK(0, "ordered receive %d did not complete", i);
        continue;
      }
      CHECK(st.msg_length == len && verify(rb[i], len, 1000u + (uint32_t)i) < 0,
            "message %d out of order (length %u)", i, st.msg_length);
    }
    for (int i = 0; i < N; i++)
      CHECK(t_wait(e0, &s[i], &st) && st.code == MX_STATUS_SUCCESS, "ordered send %d", i);
  }

  /* both directions at once, large messages */
  {
    uint32_t len = 3u << 20;
    unsigned char *a = xmalloc(len), *b = xmalloc(len), *ra = xmalloc(len), *rb = xmalloc(len);
    mx_status_t st;
    mx_endpoint_addr_t to0 = t_connect(e1, 0, TKEY);
    fill(a, len, 501);
    fill(b, len, 502);
    mx_request_t r0 = t_recv(e0, ra, len, 9, MX_MATCH_MASK_NONE, NULL);
    mx_request_t r1 = t_recv(e1, rb, len, 9, MX_MATCH_MASK_NONE, NULL);
    mx_request_t s0 = t_send(e0, to1, a, len, 9, NULL);
    mx_request_t s1 = t_send(e1, to0, b, len, 9, NULL);
    CHECK(t_wait(e0, &r0, &st) && st.xfer_length == len && verify(ra, len, 502) < 0,
          "e1 -> e0 large");
    CHECK(t_wait(e1, &r1, &st) && st.xfer_length == len && verify(rb, len, 501) < 0,
          "e0 -> e1 large");
    CHECK(t_wait(e0, &s0, NULL) && t_wait(e1, &s1, NULL), "large sends");
    free(a);
    free(b);
    free(ra);
    free(rb);
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
