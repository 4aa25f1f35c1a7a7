/* matching.c - match values and masks: a message matches a receive iff
 * (match & mask) == info; posted receives are tried in posting order,
 * unexpected messages in arrival order; non-matching messages wait as
 * unexpected. Context ids (MX_PARAM_CONTEXT_ID): receives must cover the
 * context-id bits (MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK), and each context
 * id only sees its own messages. */
#include "common.h"

static uint64_t nic;

/* Send len bytes of pattern `seed` with match `m` (forgotten send). */
static void send_m(mx_endpoint_t ep, mx_endpoint_addr_t to, uint64_t m, uint32_t len,
                   uint32_t seed, unsigned char *buf) {
  mx_segment_t seg = {buf, len};
  fill(buf, len, seed);
  CHECK_OK(mx_isend(ep, &seg, 1, to, m, NULL, NULL));
}

/* Wait for receive r and check it got message (m, len, seed). */
static void got(mx_endpoint_t ep, mx_request_t *r, unsigned char *buf, uint64_t m, uint32_t len,
                uint32_t seed, void *ctx, const char *what) {
  mx_status_t st;
  if (!t_wait(ep, r, &st)) {
    CHECK(0, "%s: receive did not complete", what);
    return;
  }
  CHECK(st.code == MX_STATUS_SUCCESS && st.match_info == m && st.msg_length == len &&
            st.context == ctx,
        "%s: got code %d match %#" PRIx64 " length %u context %p, expected match %#" PRIx64
        " length %u context %p",
        what, (int)st.code, st.match_info, st.msg_length, st.context, m, len, ctx);
  CHECK(verify(buf, len, seed) < 0, "%s: data", what);
}

static uint32_t pending(mx_endpoint_t ep, mx_request_t *r) {
  mx_status_t st;
  uint32_t result = 9;
  CHECK_OK(mx_test(ep, r, &st, &result));
  return result == 0;
}

int main(void) {
  static unsigned char sb[16][512], rb[16][512];
  mx_request_t r[16];
  mx_status_t st;
  uint32_t result;

  t_init();
  nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- masks, posting order ---- */
  r[0] = t_recv(e1, rb[0], 512, 0x100, 0xf00, CTX(0));              /* 0x1?? */
  r[1] = t_recv(e1, rb[1], 512, 0x100, 0xfff, CTX(1));              /* 0x100 exactly */
  r[2] = t_recv(e1, rb[2], 512, 0, 0, CTX(2));                      /* anything */
  r[3] = t_recv(e1, rb[3], 512, 0xabc0000000000000ULL, 0xfff0000000000000ULL, CTX(3));
  send_m(e0, to1, 0x123, 10, 1, sb[0]);  /* -> r0 */
  got(e1, &r[0], rb[0], 0x123, 10, 1, CTX(0), "mask 0xf00");
  send_m(e0, to1, 0x100, 11, 2, sb[1]);  /* r0 gone -> r1 (before the wildcard) */
  got(e1, &r[1], rb[1], 0x100, 11, 2, CTX(1), "exact 0x100");
  send_m(e0, to1, 0xabcdef0000000001ULL, 12, 3, sb[2]); /* r2 posted before r3 */
  got(e1, &r[2], rb[2], 0xabcdef0000000001ULL, 12, 3, CTX(2), "wildcard first");
  send_m(e0, to1, 0xabc0000000000007ULL, 13, 4, sb[3]);
  got(e1, &r[3], rb[3], 0xabc0000000000007ULL, 13, 4, CTX(3), "high bits");

  /* ---- a message matching no receive waits; others pass it ---- */
  r[4] = t_recv(e1, rb[4], 512, 0x2000, MX_MATCH_MASK_NONE, CTX(4));
  send_m(e0, to1, 0x3000, 20, 5, sb[4]);  /* no match */
  send_m(e0, to1, 0x2000, 21, 6, sb[5]);
  got(e1, &r[4], rb[4], 0x2000, 21, 6, CTX(4), "passes a non-matching message");
  CHECK_OK(mx_iprobe(e1, 0x3000, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1 && st.match_info == 0x3000, "non-matching message not unexpected");
  r[5] = t_recv(e1, rb[5], 512, 0x3000, 0xf000, CTX(5));
  got(e1, &r[5], rb[5], 0x3000, 20, 5, CTX(5), "late receive of the waiting message");

  /* ---- receives that never match stay pending ---- */
  r[6] = t_recv(e1, rb[6], 512, 0x4001, MX_MATCH_MASK_NONE, CTX(6));
  send_m(e0, to1, 0x4000, 30, 7, sb[6]);
  send_m(e0, to1, 0x4003, 31, 8, sb[7]);
  sleep_ms(100);
  CHECK(pending(e1, &r[6]), "receive 0x4001 matched 0x4000/0x4003");

  /* ---- unexpected messages are matched in arrival order ---- */
  for (int i = 0; i < 4; i++)
    send_m(e0, to1, 0x5000 + (uint64_t)(i & 1), 40 + (uint32_t)i, 20u + (uint32_t)i, sb[8 + i]);
  result = 0;
  CHECK_OK(mx_probe(e1, 5000, 0x5001, MX_MATCH_MASK_NONE, &st, &result));
  sleep_ms(50);
  for (int i = 0; i < 4; i++)
    r[8 + i] = t_recv(e1, rb[8 + i], 512, 0x5000, 0xfffffffffffffff0ULL, CTX(8 + i));
  for (int i = 0; i < 4; i++)
    got(e1, &r[8 + i], rb[8 + i], 0x5000 + (uint64_t)(i & 1), 40 + (uint32_t)i, 20u + (uint32_t)i,
        CTX(8 + i), "arrival order");
  /* the two earlier unmatched messages are still there */
  r[12] = t_recv(e1, rb[12], 512, 0x4000, MX_MATCH_MASK_NONE, CTX(12));
  got(e1, &r[12], rb[12], 0x4000, 30, 7, CTX(12), "0x4000 still unexpected");
  r[13] = t_recv(e1, rb[13], 512, 0x4003, MX_MATCH_MASK_NONE, CTX(13));
  got(e1, &r[13], rb[13], 0x4003, 31, 8, CTX(13), "0x4003 still unexpected");
  send_m(e0, to1, 0x4001, 32, 9, sb[14]);
  got(e1, &r[6], rb[6], 0x4001, 32, 9, CTX(6), "0x4001 at last");

  /* ---- bad masks ---- */
  {
    mx_request_t x;
    mx_segment_t seg = {rb[15], 16};
    CHECK_ERR(mx_irecv(e1, &seg, 1, 0x10, 0x0f, NULL, &x), MX_BAD_MATCH_MASK);
    CHECK_ERR(mx_irecv(e1, &seg, 1, ~(uint64_t)0, 0x7fffffffffffffffULL, NULL, &x),
              MX_BAD_MATCH_MASK);
  }

  /* ---- context ids: 8 bits at bit 56 ---- */
  {
    mx_param_t p;
    mx_endpoint_t ec = NULL;
    mx_request_t x = NULL;
    mx_segment_t seg = {rb[15], 16};
    const uint64_t CTXM = 0xff00000000000000ULL;
    memset(&p, 0, sizeof p);
    p.key = MX_PARAM_CONTEXT_ID;
    p.val.context_id.bits = 8;
    p.val.context_id.shift = 56;
    CHECK_OK(mx_open_endpoint(0, 2, TKEY, &p, 1, &ec));
    REQUIRE(ec != NULL, "no context-id endpoint");
    mx_endpoint_addr_t to2 = t_connect(e0, 2, TKEY);
    CHECK_ERR(mx_irecv(ec, &seg, 1, 0, 0, NULL, &x), MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);
    CHECK_ERR(mx_irecv(ec, &seg, 1, 0x5, 0x00ffffffffffffffULL, NULL, &x),
              MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);
    CHECK_ERR(mx_irecv(ec, &seg, 1, 0x0100000000000001ULL, CTXM, NULL, &x),
              MX_BAD_MATCH_MASK);
    CHECK_ERR(mx_irecv(ec, &seg, 1, 0, 0x0f00000000000000ULL, NULL, &x),
              MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);

    /* ctx 1 arrives first; a receive of ctx 2 with a wildcard below takes ctx 2 */
    send_m(e0, to2, 0x0100000000000042ULL, 50, 31, sb[0]);
    send_m(e0, to2, 0x0200000000000042ULL, 51, 32, sb[1]);
    CHECK_OK(mx_probe(ec, 5000, 0x0200000000000042ULL, MX_MATCH_MASK_NONE, &st, &result));
    r[0] = t_recv(ec, rb[0], 512, 0x0200000000000000ULL, CTXM, CTX(20));
    got(ec, &r[0], rb[0], 0x0200000000000042ULL, 51, 32, CTX(20), "context id 2");
    r[1] = t_recv(ec, rb[1], 512, 0x0100000000000000ULL, CTXM, CTX(21));
    got(ec, &r[1], rb[1], 0x0100000000000042ULL, 50, 31, CTX(21), "context id 1");

    /* expected receives on two context ids; test_any per context id */
    r[2] = t_recv(ec, rb[2], 512, 0x0300000000000000ULL, CTXM, CTX(22));
    r[3] = t_recv(ec, rb[3], 512, 0x0400000000000000ULL, CTXM, CTX(23));
    send_m(e0, to2, 0x0400000000000001ULL, 60, 41, sb[2]);
    send_m(e0, to2, 0x0300000000000002ULL, 61, 42, sb[3]);
    CHECK_OK(mx_wait_any(ec, 5000, 0x0300000000000000ULL, CTXM, &st, &result));
    CHECK(result == 1 && st.context == CTX(22) && st.match_info == 0x0300000000000002ULL,
          "wait_any on context id 3: result %u context %p", result, st.context);
    CHECK(verify(rb[2], 61, 42) < 0, "context id 3 data");
    CHECK_OK(mx_wait_any(ec, 5000, 0x0400000000000000ULL, CTXM, &st, &result));
    CHECK(result == 1 && st.context == CTX(23) && st.match_info == 0x0400000000000001ULL,
          "wait_any on context id 4: result %u context %p", result, st.context);
    /* iprobe within one context id */
    send_m(e0, to2, 0x0500000000000009ULL, 70, 51, sb[4]);
    CHECK_OK(mx_probe(ec, 5000, 0x0500000000000000ULL, CTXM, &st, &result));
    CHECK(result == 1 && st.match_info == 0x0500000000000009ULL, "probe on context id 5");
    CHECK_OK(mx_iprobe(ec, 0x0600000000000000ULL, CTXM, &st, &result));
    CHECK(result == 0, "probe on context id 6 saw another context's message");
    r[4] = t_recv(ec, rb[4], 512, 0x0500000000000009ULL, MX_MATCH_MASK_NONE, CTX(24));
    got(ec, &r[4], rb[4], 0x0500000000000009ULL, 70, 51, CTX(24), "context id 5");
    CHECK_OK(mx_close_endpoint(ec));
  }

  /* ---- context ids: 16 bits at bit 0 ---- */
  {
    mx_param_t p;
    mx_endpoint_t ec = NULL;
    mx_request_t x = NULL;
    mx_segment_t seg = {rb[15], 16};
    memset(&p, 0, sizeof p);
    p.key = MX_PARAM_CONTEXT_ID;
    p.val.context_id.bits = 16;
    p.val.context_id.shift = 0;
    CHECK_OK(mx_open_endpoint(0, 3, TKEY, &p, 1, &ec));
    REQUIRE(ec != NULL, "no context-id endpoint");
    mx_endpoint_addr_t to3 = t_connect(e0, 3, TKEY);
    CHECK_ERR(mx_irecv(ec, &seg, 1, 0x10000, 0xffff0000ULL, NULL, &x),
              MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);
    r[0] = t_recv(ec, rb[0], 512, 0x0000000700000abcULL, 0xffffffff0000ffffULL, CTX(30));
    send_m(e0, to3, 0x0000000712340abdULL, 10, 61, sb[0]);
    send_m(e0, to3, 0x00000007ffff0abcULL, 11, 62, sb[1]);
    got(ec, &r[0], rb[0], 0x00000007ffff0abcULL, 11, 62, CTX(30), "16-bit context id");
    r[1] = t_recv(ec, rb[1], 512, 0x0abd, 0xffff, CTX(31));
    got(ec, &r[1], rb[1], 0x0000000712340abdULL, 10, 61, CTX(31), "16-bit context id, other");
    CHECK_OK(mx_close_endpoint(ec));
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
