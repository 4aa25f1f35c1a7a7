/* rails.c - several boards per host (the original's rails): two hosts joined
 * by RAILS veth links (run.sh brings them up with scripts/hosts.sh ... 3), one
 * endpoint per board in each process, all in use at once.
 *
 * `rails server` (h0) opens its endpoints with MX_ANY_NIC and endpoint 2: the
 * opens land on boards 0, 1, 2 in turn. `rails client` (h1) opens one with
 * MX_ANY_ENDPOINT on each board number, then two more with MX_ANY_NIC and
 * MX_ANY_ENDPOINT, which the original's search order (endpoint index first,
 * then board) spreads over boards 0 and 1. Checked: MX_NIC_COUNT, board numbers
 * <-> nic ids, every endpoint's own address on its board, hostnames h<i>:<b>.
 * Then the client connects rail b to the server's endpoint on rail b and, on
 * every rail at once, sends messages of every size class (tiny to 1 MiB,
 * pattern-checked); the server echoes each back on the rail it came from
 * (status.source) and the client checks the reply's rail and bytes. Finally the
 * client's endpoints of different boards message each other, every ordered
 * pair (same host: the shared-memory path between boards). The rail of a nic
 * id is its MAC's fourth byte, as scripts/hosts.sh assigns them. */
#include "common.h"

#define RAILS 3
#define SERVER_EID 2
#define WAIT_MS 30000
#define MATCH(rail, i) (((uint64_t)(rail) << 32) | (uint64_t)(i))
#define DONE_MATCH 0xd0e0000000000000ull

static const uint32_t sizes[] = {0, 8, 100, 4000, 20000, 100000, 1u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static void check_boards(mx_endpoint_t *ep) {
  uint32_t count = 0;
  CHECK_OK(mx_get_info(NULL, MX_NIC_COUNT, NULL, 0, &count, sizeof count));
  REQUIRE(count == RAILS, "MX_NIC_COUNT %u, expected %d boards", count, RAILS);
  for (int b = 0; b < RAILS; b++) {
    uint64_t nic = 0;
    uint32_t back = 99;
    CHECK_OK(mx_board_number_to_nic_id((uint32_t)b, &nic));
    CHECK_OK(mx_nic_id_to_board_number(nic, &back));
    CHECK(back == (uint32_t)b, "board %d -> nic %#" PRIx64 " -> board %u", b, nic, back);
    mx_endpoint_addr_t a;
    uint64_t own = 0;
    uint32_t eid = 0;
    CHECK_OK(mx_get_endpoint_addr(ep[b], &a));
    CHECK_OK(mx_decompose_endpoint_addr(a, &own, &eid));
    CHECK(own == nic, "endpoint on board %d has nic %#" PRIx64 ", board's is %#" PRIx64, b, own,
          nic);
    for (int c = 0; c < b; c++) {
      uint64_t other = 0;
      CHECK_OK(mx_board_number_to_nic_id((uint32_t)c, &other));
      CHECK(other != nic, "boards %d and %d share nic %#" PRIx64, b, c, nic);
    }
  }
  uint64_t none = 0;
  CHECK_RC(mx_board_number_to_nic_id(RAILS, &none), MX_BOARD_UNKNOWN);
}

static int wait_ok(mx_endpoint_t e, mx_request_t *r, mx_status_t *st) {
  uint32_t result = 0;
  return mx_wait(e, r, WAIT_MS, st, &result) == MX_SUCCESS && result &&
         st->code == MX_STATUS_SUCCESS;
}

static void server(void) {
  mx_endpoint_t ep[RAILS];
  for (int b = 0; b < RAILS; b++) {
    REQUIRE(mx_open_endpoint(MX_ANY_NIC, SERVER_EID, TKEY, NULL, 0, &ep[b]) == MX_SUCCESS,
            "open %d with MX_ANY_NIC", b);
  }
  mx_endpoint_t extra;
  CHECK_RC(mx_open_endpoint(MX_ANY_NIC, SERVER_EID, TKEY, NULL, 0, &extra), MX_BUSY);
  check_boards(ep);
  /* Echo every message back on its rail until the client says it is done on
   * every rail. Receives are posted on all rails at once. */
  uint32_t max = sizes[NSIZES - 1];
  void *buf[RAILS];
  mx_request_t r[RAILS];
  int done = 0;
  for (int b = 0; b < RAILS; b++) {
    buf[b] = xmalloc(max);
    mx_segment_t s = {buf[b], max};
    CHECK_OK(mx_irecv(ep[b], &s, 1, 0, 0, NULL, &r[b]));
  }
  double until = now_ms() + time_limit_ms(120000);
  while (done < RAILS && now_ms() < until) {
    for (int b = 0; b < RAILS; b++) {
      if (!r[b])
        continue;
      mx_status_t st;
      uint32_t result = 0;
      if (mx_test(ep[b], &r[b], &st, &result) != MX_SUCCESS || !result)
        continue;
      r[b] = NULL;
      CHECK(st.code == MX_STATUS_SUCCESS, "rail %d: receive status %d", b, (int)st.code);
      if (st.match_info == DONE_MATCH) {
        done++;
        continue;
      }
      uint64_t nic = 0;
      uint32_t eid = 0;
      mx_decompose_endpoint_addr(st.source, &nic, &eid);
      CHECK(((nic >> 16) & 0xff) == (uint64_t)b,
            "rail %d: message from nic %#" PRIx64 " (another network)", b, nic);
      mx_segment_t s = {buf[b], st.msg_length};
      mx_request_t sr;
      mx_status_t sst;
      CHECK_OK(mx_isend(ep[b], &s, 1, st.source, st.match_info, NULL, &sr));
      CHECK(wait_ok(ep[b], &sr, &sst), "rail %d: echo of %u bytes", b, st.msg_length);
      mx_segment_t rs = {buf[b], max};
      CHECK_OK(mx_irecv(ep[b], &rs, 1, 0, 0, NULL, &r[b]));
    }
  }
  CHECK(done == RAILS, "server: %d of %d rails finished", done, RAILS);
  for (int b = 0; b < RAILS; b++)
    mx_close_endpoint(ep[b]);
}

static void client(void) {
  mx_endpoint_t ep[RAILS];
  for (int b = 0; b < RAILS; b++)
    REQUIRE(mx_open_endpoint((uint32_t)b, MX_ANY_ENDPOINT, TKEY, NULL, 0, &ep[b]) == MX_SUCCESS,
            "open on board %d", b);
  check_boards(ep);
  /* Both ANY: index 1 is free on every board, so two opens go to boards 0, 1. */
  mx_endpoint_t any[2];
  for (int k = 0; k < 2; k++) {
    mx_endpoint_addr_t a;
    uint64_t nic = 0, want = 0;
    uint32_t eid = 99;
    REQUIRE(mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, TKEY, NULL, 0, &any[k]) == MX_SUCCESS,
            "open any/any %d", k);
    CHECK_OK(mx_get_endpoint_addr(any[k], &a));
    CHECK_OK(mx_decompose_endpoint_addr(a, &nic, &eid));
    CHECK_OK(mx_board_number_to_nic_id((uint32_t)k, &want));
    CHECK(nic == want && eid == 1,
          "any/any open %d: nic %#" PRIx64 " ep %u, expected %#" PRIx64 " ep 1", k, nic, eid,
          want);
  }
  for (int k = 0; k < 2; k++)
    CHECK_OK(mx_close_endpoint(any[k]));
  mx_endpoint_addr_t peer[RAILS];
  for (int b = 0; b < RAILS; b++) {
    char name[32];
    uint64_t nic = 0;
    snprintf(name, sizeof name, "h0:%d", b);
    double until = now_ms() + time_limit_ms(20000);
    while (mx_hostname_to_nic_id(name, &nic) != MX_SUCCESS && now_ms() < until)
      sleep_ms(20);
    REQUIRE(nic != 0, "no nic id for %s", name);
    CHECK(((nic >> 16) & 0xff) == (uint64_t)b, "%s is nic %#" PRIx64 ", not on rail %d", name,
          nic, b);
    REQUIRE(mx_connect(ep[b], nic, SERVER_EID, TKEY, WAIT_MS, &peer[b]) == MX_SUCCESS,
            "connect rail %d", b);
  }
  uint32_t max = sizes[NSIZES - 1];
  unsigned char *out[RAILS], *in[RAILS];
  for (int b = 0; b < RAILS; b++) {
    out[b] = xmalloc(max);
    in[b] = xmalloc(max);
  }
  /* Every size on every rail at once: post the receives of the echoes, then the
   * sends, then wait for all. */
  for (uint32_t i = 0; i < NSIZES; i++) {
    mx_request_t rr[RAILS], sr[RAILS];
    for (int b = 0; b < RAILS; b++) {
      uint32_t seed = i * 7u + (uint32_t)b;
      fill(out[b], sizes[i], seed);
      memset(in[b], 0, sizes[i]);
      mx_segment_t rs = {in[b], max};
      mx_segment_t ss = {out[b], sizes[i]};
      CHECK_OK(mx_irecv(ep[b], &rs, 1, MATCH(b, i), MX_MATCH_MASK_NONE, NULL, &rr[b]));
      CHECK_OK(mx_isend(ep[b], &ss, 1, peer[b], MATCH(b, i), NULL, &sr[b]));
    }
    for (int b = 0; b < RAILS; b++) {
      mx_status_t st;
      CHECK(wait_ok(ep[b], &sr[b], &st), "rail %d: send of %u bytes", b, sizes[i]);
      CHECK(wait_ok(ep[b], &rr[b], &st), "rail %d: echo of %u bytes", b, sizes[i]);
      CHECK(st.msg_length == sizes[i], "rail %d: echo of %u bytes has %u", b, sizes[i],
            st.msg_length);
      long bad = verify(in[b], sizes[i], i * 7u + (uint32_t)b);
      CHECK(bad < 0, "rail %d: echo of %u bytes differs at %ld", b, sizes[i], bad);
      uint64_t nic = 0;
      uint32_t eid = 0;
      mx_decompose_endpoint_addr(st.source, &nic, &eid);
      CHECK(((nic >> 16) & 0xff) == (uint64_t)b && eid == SERVER_EID,
            "rail %d: echo came from %#" PRIx64 " ep %u", b, nic, eid);
    }
  }
  for (int b = 0; b < RAILS; b++) {
    mx_request_t r;
    mx_status_t st;
    CHECK_OK(mx_isend(ep[b], NULL, 0, peer[b], DONE_MATCH, NULL, &r));
    CHECK(wait_ok(ep[b], &r, &st), "rail %d: done message", b);
  }
  /* Every ordered pair of this process's endpoints (different boards, one host). */
  uint64_t my_nic[RAILS];
  uint32_t my_eid[RAILS];
  for (int b = 0; b < RAILS; b++) {
    mx_endpoint_addr_t a;
    mx_get_endpoint_addr(ep[b], &a);
    mx_decompose_endpoint_addr(a, &my_nic[b], &my_eid[b]);
  }
  for (int from = 0; from < RAILS; from++) {
    for (int to = 0; to < RAILS; to++) {
      if (from == to)
        continue;
      mx_endpoint_addr_t dest;
      REQUIRE(mx_connect(ep[from], my_nic[to], my_eid[to], TKEY, WAIT_MS, &dest) == MX_SUCCESS,
              "connect board %d -> board %d", from, to);
      for (uint32_t i = 0; i < NSIZES; i++) {
        uint32_t seed = 1000u + i * 9u + (uint32_t)(from * RAILS + to);
        fill(out[from], sizes[i], seed);
        memset(in[to], 0, sizes[i]);
        mx_segment_t rs = {in[to], max};
        mx_segment_t ss = {out[from], sizes[i]};
        mx_request_t rr, sr;
        mx_status_t st;
        CHECK_OK(mx_irecv(ep[to], &rs, 1, MATCH(to, i), MX_MATCH_MASK_NONE, NULL, &rr));
        CHECK_OK(mx_isend(ep[from], &ss, 1, dest, MATCH(to, i), NULL, &sr));
        CHECK(wait_ok(ep[to], &rr, &st), "%d -> %d: receive of %u bytes", from, to, sizes[i]);
        long bad = verify(in[to], sizes[i], seed);
        CHECK(st.msg_length == sizes[i] && bad < 0, "%d -> %d: %u bytes, got %u, differs at %ld",
              from, to, sizes[i], st.msg_length, bad);
        CHECK(wait_ok(ep[from], &sr, &st), "%d -> %d: send of %u bytes", from, to, sizes[i]);
      }
    }
  }
  for (int b = 0; b < RAILS; b++)
    CHECK_OK(mx_close_endpoint(ep[b]));
}

int main(int argc, char **argv) {
  REQUIRE(argc == 2, "usage: rails server|client");
  REQUIRE(mx_init() == MX_SUCCESS, "mx_init");
  mx_set_error_handler(MX_ERRORS_RETURN);
  if (strcmp(argv[1], "server") == 0)
    server();
  else
    client();
  mx_finalize();
  DONE();
}
