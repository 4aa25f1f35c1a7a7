/* addressing.c - board numbers and nic ids, host names, endpoint addresses
 * (mx_get_endpoint_addr, mx_decompose_endpoint_addr(2), status.source),
 * endpoint-address contexts, and mx_disconnect. Single host, on lo. */
#include "common.h"

int main(void) {
  uint64_t nic = 0, n2 = 0;
  uint32_t board = 99, eid = 99, session = 0, s0 = 0, s1 = 0;
  char name[MX_MAX_HOSTNAME_LEN];
  double t0;

  t_init();

  /* ---- boards and nic ids ---- */
  CHECK_OK(mx_board_number_to_nic_id(0, &nic));
  CHECK((nic >> 48) == 0, "nic id %#" PRIx64 " is wider than 48 bits", nic);
  CHECK_ERR(mx_board_number_to_nic_id(1, &n2), MX_BOARD_UNKNOWN);
  CHECK_ERR(mx_board_number_to_nic_id(1000, &n2), MX_BOARD_UNKNOWN);
  CHECK_OK(mx_nic_id_to_board_number(nic, &board));
  CHECK(board == 0, "board of own nic id: %u", board);
  CHECK_ERR(mx_nic_id_to_board_number(0x0000123456789abcULL, &board), MX_BOARD_UNKNOWN);

  /* ---- host names ---- */
  memset(name, 'x', sizeof name);
  CHECK_OK(mx_nic_id_to_hostname(nic, name));
  CHECK(memchr(name, 0, sizeof name) && strcmp(name, "localhost") == 0,
        "name of the lo board: '%.80s'", name);
  n2 = 1;
  CHECK_OK(mx_hostname_to_nic_id((char *)"localhost", &n2));
  CHECK(n2 == nic, "localhost -> %#" PRIx64 ", expected %#" PRIx64, n2, nic);
  t0 = now_ms();
  CHECK_ERR(mx_hostname_to_nic_id((char *)"no-such-host:0", &n2), MX_HOST_NOT_FOUND);
  CHECK(now_ms() - t0 < 4000, "unknown name lookup took %.0f ms", now_ms() - t0);
  CHECK_ERR(mx_hostname_to_nic_id((char *)"", &n2), MX_HOST_NOT_FOUND);
  CHECK_ERR(mx_nic_id_to_hostname(0x0000123456789abcULL, name), MX_HOST_NOT_FOUND);

  /* ---- endpoint addresses ---- */
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t a0, a1, self, to1, to0;
  CHECK(sizeof(mx_endpoint_addr_t) == MX_SIZEOF_ADDR, "address size");
  CHECK_OK(mx_get_endpoint_addr(e0, &a0));
  CHECK_OK(mx_get_endpoint_addr(e1, &a1));
  CHECK_OK(mx_decompose_endpoint_addr(a0, &n2, &eid));
  CHECK(n2 == nic && eid == 0, "own address of e0: %#" PRIx64 "/%u", n2, eid);
  CHECK_OK(mx_decompose_endpoint_addr(a1, &n2, &eid));
  CHECK(n2 == nic && eid == 1, "own address of e1: %#" PRIx64 "/%u", n2, eid);
  CHECK_OK(mx_decompose_endpoint_addr2(a0, &n2, &eid, &s0));
  CHECK_OK(mx_decompose_endpoint_addr2(a1, &n2, &eid, &s1));
  CHECK(s0 != s1, "two endpoints share session id %#x", s0);
  /* the NIC id / index outputs are optional */
  CHECK_OK(mx_decompose_endpoint_addr2(a0, NULL, NULL, &session));
  CHECK(session == s0, "session without the other outputs");

  /* connect to self: same endpoint, same session */
  CHECK_OK(mx_connect(e0, nic, 0, TKEY, 5000, &self));
  CHECK_OK(mx_decompose_endpoint_addr2(self, &n2, &eid, &session));
  CHECK(n2 == nic && eid == 0 && session == s0, "self address %#" PRIx64 "/%u/%#x", n2, eid,
        session);
  /* connect to the other endpoint: its index and its session */
  CHECK_OK(mx_connect(e0, nic, 1, TKEY, 5000, &to1));
  CHECK_OK(mx_decompose_endpoint_addr2(to1, &n2, &eid, &session));
  CHECK(n2 == nic && eid == 1 && session == s1, "address of e1 seen by e0: %#" PRIx64 "/%u/%#x",
        n2, eid, session);

  /* status.source designates the sender (index and session) */
  {
    char b[8] = "abc";
    mx_status_t st;
    mx_request_t r = t_recv(e1, b, sizeof b, 3, MX_MATCH_MASK_NONE, NULL);
    mx_request_t s = t_send(e0, to1, b, 4, 3, NULL);
    REQUIRE(t_wait(e1, &r, &st), "receive did not complete");
    t_wait(e0, &s, NULL);
    CHECK_SOURCE(st, nic, 0);
    CHECK_OK(mx_decompose_endpoint_addr2(st.source, &n2, &eid, &session));
    CHECK(session == s0, "source session %#x, expected %#x", session, s0);
    to0 = st.source;
  }

  /* ---- endpoint-address contexts: per peer, shared by its addresses ---- */
  {
    void *c = CTX(1);
    mx_endpoint_addr_t back;
    CHECK_OK(mx_get_endpoint_addr_context(to1, &c));
    CHECK(c == NULL, "initial address context %p", c);
    CHECK_OK(mx_set_endpoint_addr_context(to1, CTX(0x1111)));
    CHECK_OK(mx_get_endpoint_addr_context(to1, &c));
    CHECK(c == CTX(0x1111), "address context %p", c);
    /* e1's view of e0: from a receive, then from a connect: same peer */
    CHECK_OK(mx_set_endpoint_addr_context(to0, CTX(0x2222)));
    CHECK_OK(mx_connect(e1, nic, 0, TKEY, 5000, &back));
    CHECK_OK(mx_get_endpoint_addr_context(back, &c));
    CHECK(c == CTX(0x2222), "context not shared by the addresses of one peer: %p", c);
    /* per endpoint: e0's context for e1 is untouched */
    CHECK_OK(mx_get_endpoint_addr_context(to1, &c));
    CHECK(c == CTX(0x1111), "address context changed by another endpoint: %p", c);
    /* the source of a later message carries it too */
    {
      char b[8];
      mx_status_t st;
      mx_request_t r = t_recv(e1, b, sizeof b, 4, MX_MATCH_MASK_NONE, NULL);
      mx_request_t s = t_send(e0, to1, b, 0, 4, NULL);
      REQUIRE(t_wait(e1, &r, &st), "receive did not complete");
      t_wait(e0, &s, NULL);
      CHECK_OK(mx_get_endpoint_addr_context(st.source, &c));
      CHECK(c == CTX(0x2222), "context of status.source: %p", c);
    }
  }

  /* ---- mx_disconnect: local only; a new connect starts afresh ---- */
  {
    void *c = CTX(5);
    char sb[100], rb[100];
    mx_status_t st;
    mx_endpoint_addr_t from0;
    CHECK_OK(mx_disconnect(e0, to1));
    CHECK_OK(mx_connect(e0, nic, 1, TKEY, 5000, &to1));
    CHECK_OK(mx_get_endpoint_addr_context(to1, &c));
    CHECK(c == NULL, "address context survived mx_disconnect: %p", c);
    CHECK_OK(mx_decompose_endpoint_addr2(to1, &n2, &eid, &session));
    CHECK(n2 == nic && eid == 1 && session == s1, "address after reconnect");
    for (int i = 0; i < 3; i++) {
      fill(sb, sizeof sb, 50u + (uint32_t)i);
      memset(rb, 0, sizeof rb);
      mx_request_t r = t_recv(e1, rb, sizeof rb, 5, MX_MATCH_MASK_NONE, CTX(6));
      mx_request_t s = t_send(e0, to1, sb, sizeof sb, 5, CTX(7));
      REQUIRE(t_wait(e1, &r, &st), "receive after reconnect did not complete");
      CHECK_STATUS(st, MX_STATUS_SUCCESS, 5, sizeof sb, sizeof sb, CTX(6));
      CHECK(verify(rb, sizeof rb, 50u + (uint32_t)i) < 0, "data after reconnect");
      CHECK_SOURCE(st, nic, 0);
      from0 = st.source;
      REQUIRE(t_wait(e0, &s, &st), "send after reconnect did not complete");
      CHECK(st.code == MX_STATUS_SUCCESS, "send after reconnect: %s", mx_strstatus(st.code));
    }
    /* the receiver can still answer through status.source */
    {
      mx_request_t r = t_recv(e0, rb, sizeof rb, 8, MX_MATCH_MASK_NONE, NULL);
      mx_request_t s = t_send(e1, from0, sb, 10, 8, NULL);
      REQUIRE(t_wait(e0, &r, &st), "reply through status.source did not complete");
      CHECK_STATUS(st, MX_STATUS_SUCCESS, 8, 10, 10, NULL);
      CHECK_SOURCE(st, nic, 1);
      t_wait(e1, &s, NULL);
    }
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
