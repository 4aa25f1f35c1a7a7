/* connect.c - mx_connect and mx_iconnect on one host (lo): success, self,
 * wrong key (MX_BAD_CONNECTION_KEY / MX_STATUS_BAD_KEY), endpoint not open
 * (MX_CONNECTION_FAILED / MX_STATUS_ENDPOINT_CLOSED), bad endpoint index
 * (MX_BAD_ENDPOINT_ID / MX_STATUS_BAD_ENDPOINT), unknown nic
 * (MX_NIC_NOT_FOUND); an endpoint closed and reopened over and over connects
 * and sends with addresses of its own; the iconnect status carries the given
 * match_info and context, its source is the new address. */
#include "common.h"

#define OTHER_KEY 0x0badcafeu

/* Post an iconnect and wait for it; returns its status. */
static mx_status_t iconnect_wait(mx_endpoint_t ep, uint64_t nic, uint32_t eid, uint32_t key,
                                 uint64_t match, void *ctx) {
  mx_request_t r = NULL;
  mx_status_t st;
  memset(&st, 0, sizeof st);
  st.code = MX_STATUS_PENDING;
  CHECK_OK(mx_iconnect(ep, nic, eid, key, match, ctx, &r));
  if (r)
    CHECK(t_wait(ep, &r, &st), "iconnect to %u did not complete", eid);
  return st;
}

int main(void) {
  t_init();
  uint64_t nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY), e2 = t_open(2, OTHER_KEY);
  mx_endpoint_addr_t a;
  mx_status_t st;
  double t0;

  /* ---- blocking connect ---- */
  t0 = now_ms();
  CHECK_OK(mx_connect(e0, nic, 1, TKEY, 5000, &a));
  CHECK(t_addr_eid(a, NULL) == 1, "connect address designates endpoint %ld", t_addr_eid(a, NULL));
  CHECK_OK(mx_connect(e0, nic, 2, OTHER_KEY, MX_INFINITE, &a));
  CHECK(t_addr_eid(a, NULL) == 2, "connect with MX_INFINITE");
  CHECK_OK(mx_connect(e0, nic, 0, TKEY, 5000, &a));
  CHECK(t_addr_eid(a, NULL) == 0, "self connect");
  /* connecting twice to the same endpoint is fine */
  CHECK_OK(mx_connect(e0, nic, 1, TKEY, 5000, &a));
  CHECK(now_ms() - t0 < time_limit_ms(3000), "4 local connects took %.0f ms", now_ms() - t0);

  /* wrong key, on either side */
  CHECK_ERR(mx_connect(e0, nic, 1, OTHER_KEY, 5000, &a), MX_BAD_CONNECTION_KEY);
  CHECK_ERR(mx_connect(e0, nic, 2, TKEY, 5000, &a), MX_BAD_CONNECTION_KEY);
  CHECK_ERR(mx_connect(e0, nic, 0, OTHER_KEY, 5000, &a), MX_BAD_CONNECTION_KEY);
  /* endpoint not open: fails at once (the board answers for it) */
  t0 = now_ms();
  CHECK_ERR(mx_connect(e0, nic, 9, TKEY, 5000, &a), MX_CONNECTION_FAILED);
  CHECK(now_ms() - t0 < time_limit_ms(2000), "connect to a closed endpoint took %.0f ms",
        now_ms() - t0);
  /* index beyond the endpoints of a board */
  CHECK_ERR(mx_connect(e0, nic, 40, TKEY, 5000, &a), MX_BAD_ENDPOINT_ID);
  CHECK_ERR(mx_connect(e0, nic, 300, TKEY, 5000, &a), MX_BAD_ENDPOINT_ID);
  /* nic id no board was heard of: NIC not found, once discovery had its chance (the
   * shorter of the timeout and a name lookup's wait), whatever the timeout */
  t0 = now_ms();
  CHECK_ERR(mx_connect(e0, 0x0000123456789abcULL, 0, TKEY, 300, &a), MX_NIC_NOT_FOUND);
  CHECK(now_ms() - t0 < time_limit_ms(3000), "connect to an unknown nic took %.0f ms",
        now_ms() - t0);
  t0 = now_ms();
  CHECK_ERR(mx_connect(e0, 0x0000123456789abcULL, 0, TKEY, MX_INFINITE, &a), MX_NIC_NOT_FOUND);
  CHECK(now_ms() - t0 < time_limit_ms(5000), "infinite connect to an unknown nic took %.0f ms",
        now_ms() - t0);

  /* ---- a closed endpoint ---- */
  {
    mx_endpoint_t e5 = t_open(5, TKEY);
    mx_endpoint_addr_t to5;
    CHECK_OK(mx_connect(e0, nic, 5, TKEY, 5000, &to5));
    CHECK_OK(mx_close_endpoint(e5));
    CHECK_ERR(mx_connect(e0, nic, 5, TKEY, 5000, &a), MX_CONNECTION_FAILED);
    /* reopened (new session): connecting works again */
    e5 = t_open(5, TKEY);
    CHECK_OK(mx_connect(e0, nic, 5, TKEY, 5000, &a));
    CHECK_OK(mx_close_endpoint(e5));
  }

  /* ---- the connecting side closed and reopened, over and over ----
   * A new endpoint handle may reuse a closed one's memory: the addresses it gets
   * must be its own, never the closed endpoint's (now invalid) ones. */
  for (int round = 0; round < 6; round++) {
    mx_endpoint_t e6 = t_open(6, TKEY);
    mx_endpoint_addr_t to1;
    CHECK_OK(mx_connect(e6, nic, 1, TKEY, 5000, &to1));
    char sb[64], rb[64];
    mx_status_t rs;
    fill(sb, sizeof sb, 40 + round);
    mx_request_t r = t_recv(e1, rb, sizeof rb, 0x66, MX_MATCH_MASK_NONE, NULL);
    mx_request_t s = t_send(e6, to1, sb, sizeof sb, 0x66, NULL);
    CHECK(t_wait(e1, &r, &rs), "round %d: receive from a reopened endpoint", round);
    CHECK(rs.code == MX_STATUS_SUCCESS && verify(rb, sizeof rb, 40 + round) < 0,
          "round %d: data from a reopened endpoint (%s)", round, mx_strstatus(rs.code));
    CHECK(t_wait(e6, &s, NULL), "round %d: send from a reopened endpoint", round);
    CHECK_OK(mx_close_endpoint(e6));
  }

  /* ---- non-blocking connect ---- */
  st = iconnect_wait(e0, nic, 1, TKEY, 0x1234567890abcdefULL, CTX(0x77));
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x1234567890abcdefULL, st.msg_length, st.xfer_length,
               CTX(0x77));
  CHECK_SOURCE(st, nic, 1);
  /* the new address works */
  {
    char sb[300], rb[300];
    mx_status_t rs;
    fill(sb, sizeof sb, 3);
    mx_request_t r = t_recv(e1, rb, sizeof rb, 0x42, MX_MATCH_MASK_NONE, NULL);
    mx_request_t s = t_send(e0, st.source, sb, sizeof sb, 0x42, NULL);
    CHECK(t_wait(e1, &r, &rs), "receive through an iconnect address");
    CHECK_STATUS(rs, MX_STATUS_SUCCESS, 0x42, sizeof sb, sizeof sb, NULL);
    CHECK(verify(rb, sizeof rb, 3) < 0, "data through an iconnect address");
    t_wait(e0, &s, NULL);
  }
  st = iconnect_wait(e0, nic, 0, TKEY, 5, CTX(5));
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 5, st.msg_length, st.xfer_length, CTX(5));
  CHECK_SOURCE(st, nic, 0);
  st = iconnect_wait(e0, nic, 1, OTHER_KEY, 6, CTX(6));
  CHECK_STATUS(st, MX_STATUS_BAD_KEY, 6, st.msg_length, st.xfer_length, CTX(6));
  st = iconnect_wait(e0, nic, 9, TKEY, 7, CTX(7));
  CHECK_STATUS(st, MX_STATUS_ENDPOINT_CLOSED, 7, st.msg_length, st.xfer_length, CTX(7));
  st = iconnect_wait(e0, nic, 40, TKEY, 8, CTX(8));
  CHECK_STATUS(st, MX_STATUS_BAD_ENDPOINT, 8, st.msg_length, st.xfer_length, CTX(8));
  {
    mx_request_t r = NULL;
    mx_status_t us;
    uint32_t done = 0;
    /* unknown nic: refused at the call, nothing posted (MX's NIC_NOT_FOUND) */
    CHECK_ERR(mx_iconnect(e0, 0x0000123456789abcULL, 0, TKEY, 9, NULL, &r), MX_NIC_NOT_FOUND);
    CHECK(r == NULL, "a refused iconnect gave a request");
    CHECK_OK(mx_test_any(e0, 9, ~0ULL, &us, &done));
    CHECK(done == 0, "a refused iconnect completed a request");
    CHECK_ERR(mx_iconnect(e0, nic, 300, TKEY, 9, NULL, &r), MX_BAD_ENDPOINT_ID);
  }

  /* several iconnects at once, collected with mx_wait_any by match_info */
  {
    mx_request_t r[3];
    uint32_t result = 0;
    CHECK_OK(mx_iconnect(e0, nic, 1, TKEY, 0x100, CTX(1), &r[0]));
    CHECK_OK(mx_iconnect(e0, nic, 2, OTHER_KEY, 0x200, CTX(2), &r[1]));
    CHECK_OK(mx_iconnect(e0, nic, 1, OTHER_KEY, 0x300, CTX(3), &r[2]));
    for (int i = 2; i >= 0; i--) {
      uint64_t m = 0x100u * (uint64_t)(i + 1);
      memset(&st, 0, sizeof st);
      CHECK_OK(mx_wait_any(e0, 5000, m, MX_MATCH_MASK_NONE, &st, &result));
      CHECK(result == 1, "wait_any for iconnect %#" PRIx64 ": nothing", m);
      if (result != 1)
        continue;
      CHECK(st.match_info == m && st.context == CTX(i + 1), "iconnect %d: match %#" PRIx64
            " context %p", i, st.match_info, st.context);
      CHECK(st.code == (i == 2 ? MX_STATUS_BAD_KEY : MX_STATUS_SUCCESS), "iconnect %d: %s", i,
            mx_strstatus(st.code));
      if (i < 2)
        CHECK_SOURCE(st, nic, i + 1);
    }
  }

  /* iconnect with a NULL request: forgotten, never reported */
  {
    uint32_t result = 1;
    CHECK_OK(mx_iconnect(e0, nic, 1, TKEY, 0x999, NULL, NULL));
    CHECK_OK(mx_wait_any(e0, 300, 0x999, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 0, "a forgotten iconnect was reported");
  }

  /* no error handler call for a failed iconnect (the status tells) */
  h_reset();
  st = iconnect_wait(e0, nic, 1, OTHER_KEY, 10, NULL);
  CHECK(st.code == MX_STATUS_BAD_KEY && h_calls == 0,
        "failed iconnect: status %s, %d handler calls", mx_strstatus(st.code), h_calls);

  CHECK_OK(mx_close_endpoint(e2));
  CHECK_OK(mx_close_endpoint(e1));
  CHECK_OK(mx_close_endpoint(e0));
  mx_finalize();
  DONE();
}
