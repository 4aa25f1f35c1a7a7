/* cancel.c - mx_cancel: an unmatched receive is cancelled (result 1, request
 * cleared, never reported, later messages do not land in it); a completed
 * receive is not (result 0, still reported); sends cannot be cancelled
 * (MX_CANCEL_NOT_SUPPORTED through the error handler, the send goes on). */
#include "common.h"

int main(void) {
  char b1[64], b2[64], sb[64];
  mx_status_t st;
  uint32_t result;
  mx_request_t r, r2, s, seen;

  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- an unmatched receive ---- */
  memset(b1, 0, sizeof b1);
  r = t_recv(e1, b1, sizeof b1, 0x10, MX_MATCH_MASK_NONE, CTX(1));
  result = 7;
  CHECK_OK(mx_cancel(e1, &r, &result));
  CHECK(result == 1, "cancel of an unmatched receive: result %u", result);
  CHECK(r == NULL, "cancel did not clear the request");
  /* the message that would have matched becomes unexpected */
  fill(sb, 20, 5);
  s = t_send(e0, to1, sb, 20, 0x10, NULL);
  result = 0;
  CHECK_OK(mx_probe(e1, 5000, 0x10, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1, "message to a cancelled receive is not unexpected");
  CHECK(b1[0] == 0 && b1[19] == 0, "data landed in a cancelled receive");
  /* the cancelled receive is never reported */
  result = 7;
  CHECK_OK(mx_test_any(e1, 0, 0, &st, &result));
  CHECK(result == 0, "cancelled receive reported by test_any (context %p)", st.context);
  seen = NULL;
  CHECK_OK(mx_ipeek(e1, &seen, &result));
  CHECK(result == 0, "cancelled receive reported by ipeek");
  r2 = t_recv(e1, b2, sizeof b2, 0x10, MX_MATCH_MASK_NONE, CTX(2));
  CHECK(t_wait(e1, &r2, &st), "receive after cancel");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x10, 20, 20, CTX(2));
  CHECK(verify(b2, 20, 5) < 0, "data after cancel");
  t_wait(e0, &s, NULL);

  /* ---- cancel among several: only that one goes ---- */
  {
    mx_request_t a = t_recv(e1, b1, 16, 0x20, MX_MATCH_MASK_NONE, CTX(3));
    mx_request_t c = t_recv(e1, b2, 16, 0x20, MX_MATCH_MASK_NONE, CTX(4));
    CHECK_OK(mx_cancel(e1, &a, &result));
    CHECK(result == 1, "cancel first of two");
    s = t_send(e0, to1, sb, 4, 0x20, NULL);
    CHECK(t_wait(e1, &c, &st) && st.context == CTX(4), "the other receive got the message");
    t_wait(e0, &s, NULL);
  }

  /* ---- a completed receive cannot be cancelled, and is still reported ---- */
  r = t_recv(e1, b1, sizeof b1, 0x30, MX_MATCH_MASK_NONE, CTX(5));
  s = t_send(e0, to1, sb, 10, 0x30, NULL);
  t_wait(e0, &s, NULL);
  seen = NULL;
  result = 0;
  CHECK_OK(mx_peek(e1, 5000, &seen, &result));
  CHECK(result == 1 && seen == r, "completed receive not seen by peek");
  result = 7;
  CHECK_OK(mx_cancel(e1, &r, &result));
  CHECK(result == 0, "cancel of a completed receive: result %u", result);
  CHECK(r != NULL, "request cleared by a cancel that did not cancel");
  CHECK(t_wait(e1, &r, &st), "completed receive lost by cancel");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x30, 10, 10, CTX(5));

  /* ---- sends: MX_CANCEL_NOT_SUPPORTED, the send completes normally ---- */
  {
    uint32_t big = 100000;
    unsigned char *bs = xmalloc(big), *br = xmalloc(big);
    fill(bs, big, 8);
    s = t_send(e0, to1, bs, big, 0x40, CTX(6));
    result = 7;
    CHECK_ERR(mx_cancel(e0, &s, &result), MX_CANCEL_NOT_SUPPORTED);
    CHECK(s != NULL, "failed cancel cleared the send");
    r = t_recv(e1, br, big, 0x40, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS && verify(br, big, 8) < 0,
          "rendezvous after a refused cancel");
    CHECK(t_wait(e0, &s, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(6),
          "rendezvous send after a refused cancel");
    s = t_send(e0, to1, sb, 8, 0x41, NULL);
    CHECK_ERR(mx_cancel(e0, &s, &result), MX_CANCEL_NOT_SUPPORTED);
    r = t_recv(e1, b1, 8, 0x41, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS, "eager after a refused cancel");
    t_wait(e0, &s, NULL);
    /* issend too */
    {
      mx_segment_t seg = {sb, 8};
      s = NULL;
      CHECK_OK(mx_issend(e0, &seg, 1, to1, 0x42, NULL, &s));
      CHECK_ERR(mx_cancel(e0, &s, &result), MX_CANCEL_NOT_SUPPORTED);
      r = t_recv(e1, b1, 8, 0x42, MX_MATCH_MASK_NONE, NULL);
      CHECK(t_wait(e1, &r, &st) && t_wait(e0, &s, &st), "issend after a refused cancel");
    }
    free(bs);
    free(br);
  }

  /* ---- cancel with MX_ERRORS_RETURN returns the code too ---- */
  {
    mx_error_handler_t prev = mx_set_error_handler(MX_ERRORS_RETURN);
    s = t_send(e0, to1, sb, 8, 0x50, NULL);
    CHECK_RC(mx_cancel(e0, &s, &result), MX_CANCEL_NOT_SUPPORTED);
    r = t_recv(e1, b1, 8, 0x50, MX_MATCH_MASK_NONE, NULL);
    t_wait(e1, &r, NULL);
    t_wait(e0, &s, NULL);
    mx_set_error_handler(prev);
  }

  /* ---- many receives cancelled, then the endpoint still matches ---- */
  {
    mx_request_t rs[100];
    int ok = 0;
    for (int i = 0; i < 100; i++)
      rs[i] = t_recv(e1, b1, 8, 0x60 + (uint64_t)(i % 3), MX_MATCH_MASK_NONE, NULL);
    for (int i = 99; i >= 0; i--) {
      result = 0;
      if (mx_cancel(e1, &rs[i], &result) == MX_SUCCESS && result == 1 && rs[i] == NULL)
        ok++;
    }
    CHECK(ok == 100, "%d of 100 receives cancelled", ok);
    s = t_send(e0, to1, sb, 8, 0x61, NULL);
    CHECK_OK(mx_probe(e1, 5000, 0x61, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1, "message after mass cancel is not unexpected");
    r = t_recv(e1, b2, 8, 0x61, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &r, &st), "receive after mass cancel");
    t_wait(e0, &s, NULL);
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
