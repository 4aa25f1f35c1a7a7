/* progression.c - the progression and retransmission controls on one host:
 * mx_progress, mx_disable_progression / mx_reenable_progression (idempotent;
 * while disabled, the endpoint takes nothing in, neither in library calls nor in
 * the background: a message sent to it stays pending until re-enabled), and
 * mx_set_request_timeout, which accepts the endpoint default (NULL request)
 * and any valid request: a pending or already completed send, a receive.
 * (tests/c/api/twohost.c checks that the timeouts take effect.) */
#include "common.h"

/* One message e0 -> e1 works. */
static void still_works(mx_endpoint_t e0, mx_endpoint_addr_t to1, mx_endpoint_t e1, uint64_t m) {
  char s[32], r[32];
  mx_status_t st;
  fill(s, sizeof s, (uint32_t)m);
  mx_request_t rr = t_recv(e1, r, sizeof r, m, MX_MATCH_MASK_NONE, CTX(m));
  mx_request_t sr = t_send(e0, to1, s, sizeof s, m, NULL);
  CHECK(t_wait(e1, &rr, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(m) &&
            verify(r, sizeof r, (uint32_t)m) < 0,
        "communication (%#" PRIx64 ")", m);
  t_wait(e0, &sr, NULL);
}

int main(void) {
  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- progression controls ---- */
  CHECK_OK(mx_progress(e0));
  CHECK_OK(mx_disable_progression(e1));
  CHECK_OK(mx_disable_progression(e1)); /* idempotent */
  CHECK_OK(mx_reenable_progression(e1));
  CHECK_OK(mx_reenable_progression(e1));
  CHECK_OK(mx_progress(e1));
  still_works(e0, to1, e1, 0x12);

  /* ---- request timeouts: endpoint default, and any valid request ---- */
  CHECK_OK(mx_set_request_timeout(e0, NULL, 1000));
  CHECK_OK(mx_set_request_timeout(e0, NULL, MX_INFINITE));
  {
    static unsigned char big[100000];
    char b[8] = "x";
    mx_request_t s, r, bs, br;
    /* a rendezvous send still waiting for its receiver */
    bs = t_send(e0, to1, big, sizeof big, 0x13, NULL);
    CHECK_OK(mx_set_request_timeout(e0, bs, 5000));
    CHECK_OK(mx_set_request_timeout(e0, bs, MX_INFINITE));
    /* an eager send (completed at once, not yet collected): still a valid request */
    s = t_send(e0, to1, b, 8, 0x15, NULL);
    sleep_ms(20);
    CHECK_OK(mx_set_request_timeout(e0, s, 5000));
    /* a receive */
    r = t_recv(e1, b, 8, 0x15, MX_MATCH_MASK_NONE, NULL);
    br = t_recv(e1, big, sizeof big, 0x13, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &br, NULL) && t_wait(e1, &r, NULL), "receives after set_request_timeout");
    CHECK(t_wait(e0, &bs, NULL) && t_wait(e0, &s, NULL), "sends after set_request_timeout");
    r = t_recv(e1, b, 8, 0x16, MX_MATCH_MASK_NONE, NULL);
    CHECK_OK(mx_set_request_timeout(e1, r, 1000));
    CHECK_OK(mx_cancel(e1, &r, &(uint32_t){0}));
  }
  still_works(e0, to1, e1, 0x14);

  /* Progression disabled on the receiver: its receive does not complete, whatever
   * mx_test/mx_progress calls and the background thread do, until it is
   * re-enabled; then it completes with the data. */
  {
    char s[32], r[32];
    mx_status_t st;
    uint32_t done = 0;
    fill(s, sizeof s, 0x17);
    mx_request_t rr = t_recv(e1, r, sizeof r, 0x17, MX_MATCH_MASK_NONE, NULL);
    CHECK_OK(mx_disable_progression(e1));
    mx_request_t sr = t_send(e0, to1, s, sizeof s, 0x17, NULL);
    CHECK(t_wait(e0, &sr, NULL), "send while the receiver's progression is disabled");
    for (int i = 0; i < 50 && !done; i++) {
      CHECK_OK(mx_progress(e1));
      CHECK_OK(mx_test(e1, &rr, &st, &done));
      sleep_ms(2);
    }
    CHECK(!done, "a receive completed while progression was disabled");
    CHECK_OK(mx_reenable_progression(e1));
    CHECK(t_wait(e1, &rr, &st) && st.code == MX_STATUS_SUCCESS &&
              verify(r, sizeof r, 0x17) < 0,
          "the receive completes once progression is re-enabled");
  }
  still_works(e0, to1, e1, 0x18);

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
