/* issend.c - mx_issend completes only once the receiver matched the
 * message (any size, even 0 bytes); mx_isend of an eager message completes
 * without a receiver. mx_ibuffered / mx_buffered: an eager send's buffer is
 * reusable at once (up to MX_COPY_SEND_MAX bytes), a rendezvous or
 * synchronous one only when done; receives are not sends (MX_BAD_REQUEST). */
#include "common.h"

static mx_request_t issend(mx_endpoint_t ep, mx_endpoint_addr_t to, void *buf, uint32_t len,
                           uint64_t m, void *ctx) {
  mx_segment_t seg = {buf, len};
  mx_request_t r = NULL;
  CHECK_OK(mx_issend(ep, &seg, 1, to, m, ctx, &r));
  return r;
}

static uint32_t done_yet(mx_endpoint_t ep, mx_request_t *r, mx_status_t *st) {
  uint32_t result = 9;
  CHECK_OK(mx_test(ep, r, st, &result));
  return result;
}

static uint32_t buffered(mx_endpoint_t ep, mx_request_t *r) {
  uint32_t result = 9;
  CHECK_OK(mx_ibuffered(ep, r, &result));
  return result;
}

int main(void) {
  static unsigned char sb[100000], rb[100000];
  static const uint32_t lens[] = {0, 8, 200, 5000, 100000};
  mx_status_t st;
  uint32_t result, copy_max = 0;

  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);
  CHECK_OK(mx_get_info(e0, MX_COPY_SEND_MAX, NULL, 0, &copy_max, sizeof copy_max));

  /* ---- issend waits for the match, whatever the size ---- */
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint32_t len = lens[i];
    fill(sb, len, (uint32_t)i);
    mx_request_t s = issend(e0, to1, sb, len, 0x100 + i, CTX(i + 1));
    CHECK(buffered(e0, &s) == 0, "issend of %u bytes reported buffered", len);
    sleep_ms(i == 0 ? 300 : 60);
    CHECK(done_yet(e0, &s, &st) == 0, "issend of %u bytes completed with no receive posted", len);
    result = 0;
    CHECK_OK(mx_probe(e1, 5000, 0x100 + i, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1 && st.msg_length == len, "issend of %u: not seen by probe", len);
    CHECK(done_yet(e0, &s, &st) == 0, "issend of %u bytes completed on a probe", len);
    mx_request_t r = t_recv(e1, rb, len, 0x100 + i, MX_MATCH_MASK_NONE, CTX(50));
    CHECK(t_wait(e1, &r, &st), "issend of %u: receive", len);
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x100 + i, len, len, CTX(50));
    CHECK(verify(rb, len, (uint32_t)i) < 0, "issend of %u: data", len);
    CHECK(t_wait(e0, &s, &st), "issend of %u: never completed after the match", len);
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x100 + i, len, len, CTX(i + 1));
  }
  /* a posted receive completes an issend */
  {
    mx_request_t r = t_recv(e1, rb, 8, 0x200, MX_MATCH_MASK_NONE, NULL);
    mx_request_t s = issend(e0, to1, sb, 8, 0x200, NULL);
    CHECK(t_wait(e0, &s, &st) && st.code == MX_STATUS_SUCCESS, "issend to a posted receive");
    CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS, "posted receive of an issend");
  }

  /* ---- a small isend completes without any receiver ---- */
  {
    mx_request_t s = t_send(e0, to1, sb, 8, 0x300, CTX(3));
    CHECK(buffered(e0, &s) == 1, "eager isend not buffered");
    CHECK(t_wait(e0, &s, &st), "eager isend did not complete without a receive");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x300, 8, 8, CTX(3));
    mx_request_t r = t_recv(e1, rb, 8, 0x300, MX_MATCH_MASK_NONE, NULL);
    t_wait(e1, &r, NULL);
  }

  /* ---- ibuffered at the eager / rendezvous boundary ---- */
  if (copy_max > 0 && copy_max < sizeof sb) {
    mx_request_t a = t_send(e0, to1, sb, copy_max, 0x400, NULL);
    mx_request_t b = t_send(e0, to1, sb, copy_max + 1, 0x401, NULL);
    CHECK(buffered(e0, &a) == 1, "isend of MX_COPY_SEND_MAX (%u) bytes not buffered", copy_max);
    CHECK(buffered(e0, &b) == 0, "isend of MX_COPY_SEND_MAX + 1 bytes buffered before received");
    result = 9;
    CHECK_OK(mx_buffered(e0, &b, 200, &result));
    CHECK(result == 0, "mx_buffered of an unreceived rendezvous: %u", result);
    mx_request_t r1 = t_recv(e1, rb, copy_max, 0x400, MX_MATCH_MASK_NONE, NULL);
    mx_request_t r2 = t_recv(e1, rb, copy_max + 1, 0x401, MX_MATCH_MASK_NONE, NULL);
    result = 0;
    CHECK_OK(mx_buffered(e0, &b, 5000, &result));
    CHECK(result == 1, "mx_buffered after the receive: %u", result);
    CHECK(t_wait(e1, &r1, NULL) && t_wait(e1, &r2, NULL), "boundary receives");
    CHECK(t_wait(e0, &a, &st) && st.code == MX_STATUS_SUCCESS, "boundary eager send");
    CHECK(t_wait(e0, &b, &st) && st.code == MX_STATUS_SUCCESS,
          "rendezvous send still reported after mx_buffered");
  }

  /* ---- receives are not sends ---- */
  {
    mx_request_t r = t_recv(e1, rb, 8, 0x500, MX_MATCH_MASK_NONE, NULL);
    CHECK_ERR(mx_ibuffered(e1, &r, &result), MX_BAD_REQUEST);
    CHECK_ERR(mx_buffered(e1, &r, 100, &result), MX_BAD_REQUEST);
    CHECK_OK(mx_cancel(e1, &r, &result));
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
