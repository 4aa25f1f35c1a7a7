/* testany.c - mx_test_any / mx_wait_any (oldest completed request whose
 * match value matches, completed and freed), omx_test_any_completed (the
 * same without a progress pass) and mx_ipeek / mx_peek (oldest completed
 * request of any kind, left for mx_test / mx_wait). */
#include "common.h"

int main(void) {
  char b[8][32], sb[32] = "payload";
  mx_status_t st;
  uint32_t result;
  mx_request_t r[8], seen, s;

  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- nothing completed ---- */
  result = 5;
  CHECK_OK(mx_test_any(e1, 0, 0, &st, &result));
  CHECK(result == 0, "test_any on an idle endpoint");
  seen = CTX(1);
  result = 5;
  CHECK_OK(mx_ipeek(e1, &seen, &result));
  CHECK(result == 0, "ipeek on an idle endpoint");

  /* ---- three receives, two complete; select by match ---- */
  r[0] = t_recv(e1, b[0], 32, 0x10, MX_MATCH_MASK_NONE, CTX(10));
  r[1] = t_recv(e1, b[1], 32, 0x20, MX_MATCH_MASK_NONE, CTX(20));
  r[2] = t_recv(e1, b[2], 32, 0x30, MX_MATCH_MASK_NONE, CTX(30));
  s = t_send(e0, to1, sb, 8, 0x30, NULL);
  t_wait(e0, &s, NULL);
  result = 0;
  CHECK_OK(mx_peek(e1, 5000, &seen, &result));
  CHECK(result == 1 && seen == r[2], "peek: oldest completed is the 0x30 receive");
  s = t_send(e0, to1, sb, 9, 0x10, NULL);
  t_wait(e0, &s, NULL);
  result = 5;
  CHECK_OK(mx_test_any(e1, 0x20, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 0, "test_any 0x20: the 0x20 receive is not complete");
  result = 0;
  CHECK_OK(mx_wait_any(e1, 5000, 0x10, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1, "wait_any 0x10 found nothing");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x10, 9, 9, CTX(10));
  /* peek still shows the 0x30 one (not consumed by peeks) */
  result = 0;
  CHECK_OK(mx_ipeek(e1, &seen, &result));
  CHECK(result == 1 && seen == r[2], "ipeek after wait_any: %p, expected %p", (void *)seen,
        (void *)r[2]);
  result = 0;
  CHECK_OK(mx_ipeek(e1, &seen, &result));
  CHECK(result == 1 && seen == r[2], "second ipeek: not the same request");
  /* wildcard test_any takes it */
  result = 0;
  CHECK_OK(mx_test_any(e1, 0, 0, &st, &result));
  CHECK(result == 1, "wildcard test_any");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x30, 8, 8, CTX(30));
  result = 5;
  CHECK_OK(mx_test_any(e1, 0, 0, &st, &result));
  CHECK(result == 0, "test_any: nothing left");
  result = 5;
  CHECK_OK(mx_ipeek(e1, &seen, &result));
  CHECK(result == 0, "ipeek: nothing left");

  /* ---- masked wait_any with a late completion ---- */
  s = t_send(e0, to1, sb, 10, 0x20, NULL);
  result = 0;
  CHECK_OK(mx_wait_any(e1, 5000, 0x20, 0xf0, &st, &result));
  CHECK(result == 1, "wait_any 0x2? found nothing");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x20, 10, 10, CTX(20));
  t_wait(e0, &s, NULL);

  /* ---- ipeek then mx_test/mx_wait of the peeked request; FIFO order ---- */
  for (int i = 3; i < 6; i++)
    r[i] = t_recv(e1, b[i], 32, 0x40 + (uint64_t)i, MX_MATCH_MASK_NONE, CTX(40 + i));
  for (int i = 5; i >= 3; i--) {
    s = t_send(e0, to1, sb, (uint32_t)i, 0x40 + (uint64_t)i, NULL);
    t_wait(e0, &s, NULL);
    result = 0;
    CHECK_OK(mx_peek(e1, 5000, &seen, &result));
    CHECK(result == 1 && seen == r[5], "peek: oldest completion should stay r5");
  }
  for (int i = 5; i >= 3; i--) {
    result = 0;
    CHECK_OK(mx_peek(e1, 5000, &seen, &result));
    CHECK(result == 1 && seen == r[i], "peek order: got %p, expected r%d %p", (void *)seen, i,
          (void *)r[i]);
    if (result != 1)
      break;
    result = 0;
    CHECK_OK(mx_test(e1, &seen, &st, &result));
    CHECK(result == 1 && seen == NULL, "mx_test of the peeked request");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x40 + (uint64_t)i, (uint32_t)i, (uint32_t)i,
                 CTX(40 + i));
  }

  /* ---- send completions go through test_any too (by the send's match) ---- */
  {
    mx_request_t ss[3];
    for (int i = 0; i < 3; i++)
      ss[i] = t_send(e0, to1, sb, 4, 0x700 + (uint64_t)i, CTX(70 + i));
    for (int i = 2; i >= 0; i--) {
      result = 0;
      CHECK_OK(mx_wait_any(e0, 5000, 0x700 + (uint64_t)i, MX_MATCH_MASK_NONE, &st, &result));
      CHECK(result == 1 && st.context == CTX(70 + i) && st.match_info == 0x700 + (uint64_t)i,
            "send %d via wait_any: result %u ctx %p", i, result, st.context);
    }
    (void)ss;
    for (int i = 0; i < 3; i++) {
      r[i] = t_recv(e1, b[i], 32, 0x700 + (uint64_t)i, MX_MATCH_MASK_NONE, NULL);
      t_wait(e1, &r[i], NULL);
    }
  }

  /* ---- omx_test_any_completed: what has completed, without polling ---- */
  {
    result = 5;
    CHECK_OK(omx_test_any_completed(e1, 0, 0, &st, &result));
    CHECK(result == 0, "test_any_completed on an idle endpoint");
    r[0] = t_recv(e1, b[0], 32, 0x800, MX_MATCH_MASK_NONE, CTX(80));
    s = t_send(e0, to1, sb, 5, 0x800, NULL);
    t_wait(e0, &s, NULL);
    result = 0;
    CHECK_OK(mx_peek(e1, 5000, &seen, &result)); /* completes it, leaves it */
    CHECK(result == 1 && seen == r[0], "peek before test_any_completed");
    result = 5;
    CHECK_OK(omx_test_any_completed(e1, 0x801, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 0, "test_any_completed 0x801 took the 0x800 receive");
    result = 0;
    CHECK_OK(omx_test_any_completed(e1, 0x800, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1, "test_any_completed 0x800");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x800, 5, 5, CTX(80));
    result = 5;
    CHECK_OK(omx_test_any_completed(e1, 0, 0, &st, &result));
    CHECK(result == 0, "test_any_completed: nothing left");
    CHECK_ERR(omx_test_any_completed(e1, 0x11, 0x10, &st, &result), MX_BAD_MATCH_MASK);
  }

  /* ---- bad masks ---- */
  CHECK_ERR(mx_test_any(e1, 0x11, 0x10, &st, &result), MX_BAD_MATCH_MASK);
  CHECK_ERR(mx_wait_any(e1, 100, 0x11, 0x10, &st, &result), MX_BAD_MATCH_MASK);

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
