/* forget.c - mx_forget and NULL request pointers: a forgotten request is
 * carried out (its data moves) but never reported by test_any / wait_any /
 * ipeek; the handle is cleared; completed requests can be forgotten too. */
#include "common.h"

/* Nothing at all is reported on ep within ms milliseconds. */
static int quiet(mx_endpoint_t ep, uint32_t ms) {
  mx_status_t st;
  mx_request_t seen = NULL;
  uint32_t result = 0;
  if (mx_wait_any(ep, ms, 0, 0, &st, &result) != MX_SUCCESS || result)
    return 0;
  if (mx_ipeek(ep, &seen, &result) != MX_SUCCESS || result)
    return 0;
  return 1;
}

int main(void) {
  static unsigned char sb[200000], rb[200000];
  mx_status_t st;
  uint32_t result;
  mx_request_t r, s;

  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- a forgotten pending receive still takes its message ---- */
  memset(rb, 0, sizeof rb);
  r = t_recv(e1, rb, 100, 0x1, MX_MATCH_MASK_NONE, CTX(1));
  CHECK_OK(mx_forget(e1, &r));
  CHECK(r == NULL, "forget did not clear the request");
  fill(sb, 100, 11);
  s = t_send(e0, to1, sb, 100, 0x1, NULL);
  CHECK(t_wait(e0, &s, &st) && st.code == MX_STATUS_SUCCESS, "send to a forgotten receive");
  {
    double t0 = now_ms();
    while (verify(rb, 100, 11) >= 0 && now_ms() - t0 < 5000)
      sleep_ms(5);
  }
  CHECK(verify(rb, 100, 11) < 0, "forgotten receive did not get its data");
  CHECK_OK(mx_iprobe(e1, 0x1, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 0, "message to a forgotten receive left unexpected");
  CHECK(quiet(e1, 200), "forgotten receive reported");

  /* ---- forgotten pending rendezvous send: delivered, never reported ---- */
  fill(sb, sizeof sb, 12);
  s = t_send(e0, to1, sb, sizeof sb, 0x2, CTX(2));
  CHECK_OK(mx_forget(e0, &s));
  CHECK(s == NULL, "forget did not clear the send");
  r = t_recv(e1, rb, sizeof rb, 0x2, MX_MATCH_MASK_NONE, CTX(3));
  CHECK(t_wait(e1, &r, &st), "receive from a forgotten send");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x2, sizeof sb, sizeof sb, CTX(3));
  CHECK(verify(rb, sizeof rb, 12) < 0, "data from a forgotten rendezvous send");
  CHECK(quiet(e0, 200), "forgotten send reported");

  /* ---- forgetting completed requests ---- */
  s = t_send(e0, to1, sb, 10, 0x3, CTX(4));
  r = t_recv(e1, rb, 10, 0x3, MX_MATCH_MASK_NONE, CTX(5));
  result = 0;
  CHECK_OK(mx_peek(e1, 5000, &(mx_request_t){NULL}, &result));
  CHECK(result == 1, "receive never completed");
  CHECK_OK(mx_forget(e1, &r));
  CHECK(r == NULL, "forget of a completed receive did not clear it");
  CHECK(quiet(e1, 100), "forgotten completed receive reported");
  {
    double t0 = now_ms();
    result = 0;
    while (!result && now_ms() - t0 < 5000)
      CHECK_OK(mx_ipeek(e0, &(mx_request_t){NULL}, &result));
  }
  CHECK_OK(mx_forget(e0, &s));
  CHECK(quiet(e0, 100), "forgotten completed send reported");

  /* ---- NULL request pointer: posted and forgotten at once ---- */
  {
    mx_segment_t seg = {rb, 64};
    mx_segment_t sseg = {sb, 64};
    memset(rb, 0, 64);
    fill(sb, 64, 13);
    CHECK_OK(mx_irecv(e1, &seg, 1, 0x4, MX_MATCH_MASK_NONE, CTX(6), NULL));
    CHECK_OK(mx_isend(e0, &sseg, 1, to1, 0x4, CTX(7), NULL));
    double t0 = now_ms();
    while (verify(rb, 64, 13) >= 0 && now_ms() - t0 < 5000)
      sleep_ms(5);
    CHECK(verify(rb, 64, 13) < 0, "data through NULL-request send and receive");
    CHECK(quiet(e1, 100) && quiet(e0, 100), "NULL-request operations reported");
    /* issend with a NULL request */
    CHECK_OK(mx_issend(e0, &sseg, 1, to1, 0x5, NULL, NULL));
    r = t_recv(e1, rb, 64, 0x5, MX_MATCH_MASK_NONE, CTX(8));
    CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(8),
          "receive from a NULL-request issend");
    CHECK(quiet(e0, 100), "NULL-request issend reported");
  }

  /* ---- only the forgotten one disappears ---- */
  {
    mx_request_t a = t_recv(e1, rb, 8, 0x6, MX_MATCH_MASK_NONE, CTX(10));
    mx_request_t b = t_recv(e1, rb + 8, 8, 0x7, MX_MATCH_MASK_NONE, CTX(11));
    CHECK_OK(mx_forget(e1, &a));
    mx_request_t s1 = t_send(e0, to1, sb, 8, 0x6, NULL);
    mx_request_t s2 = t_send(e0, to1, sb, 8, 0x7, NULL);
    result = 0;
    CHECK_OK(mx_wait_any(e1, 5000, 0, 0, &st, &result));
    CHECK(result == 1 && st.context == CTX(11), "wait_any: result %u context %p", result,
          st.context);
    (void)b; /* reported through wait_any: its handle is no longer valid */
    t_wait(e0, &s1, NULL);
    t_wait(e0, &s2, NULL);
    CHECK(quiet(e1, 100), "extra completion");
  }

  /* endpoint closes cleanly with forgotten requests still pending */
  r = t_recv(e1, rb, 8, 0x8, MX_MATCH_MASK_NONE, NULL);
  CHECK_OK(mx_forget(e1, &r));
  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
