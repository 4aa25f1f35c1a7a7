/* twohost.c - two hosts joined by veth: `twohost server` runs in h0,
 * `twohost client` in h1 (run.sh starts both). Over the wire: host names and
 * nic ids (h0:0 / h1:0), connect successes and failures (wrong key, endpoint
 * not open, bad index), mx_iconnect, messages of every size both ways with
 * replies through status.source, truncation (eager and rendezvous), mx_issend,
 * probes, 256-segment vectors, many large receives posted into one buffer at
 * once, a closed remote endpoint; then, once the server
 * is gone: mx_connect timeout (MX_TIMEOUT), request timeouts
 * (mx_set_request_timeout, per request and endpoint default) ending in
 * MX_STATUS_ENDPOINT_UNREACHABLE, mx_wakeup of a blocked mx_connect, and
 * mx_cancel of a pending mx_iconnect. */
#include "common.h"

#include <pthread.h>

#define OTHER_KEY 0x0badcafeu
#define CLIENT_EID 3
#define WAIT_MS 30000
/* Rounds of receives posted into one buffer at once, each of a large message. */
#define SHARED_ROUNDS 10
#define SHARED_RECVS 32
#define SHARED_LEN (1u << 20)

static mx_endpoint_t ep;
static uint64_t my_nic;

/* Blocking helpers with a long (but finite) timeout. */
static int recv_into(mx_endpoint_t e, void *buf, uint32_t len, uint64_t m, mx_status_t *st) {
  mx_segment_t seg = {buf, len};
  mx_request_t r = NULL;
  uint32_t result = 0;
  if (mx_irecv(e, &seg, 1, m, MX_MATCH_MASK_NONE, CTX(m), &r) != MX_SUCCESS)
    return 0;
  if (mx_wait(e, &r, WAIT_MS, st, &result) != MX_SUCCESS || !result) {
    fprintf(stderr, "no message %#" PRIx64 " within %d ms\n", m, WAIT_MS);
    return 0;
  }
  return 1;
}

static int send_from(mx_endpoint_t e, mx_endpoint_addr_t to, void *buf, uint32_t len, uint64_t m,
                     mx_status_t *st) {
  mx_segment_t seg = {buf, len};
  mx_request_t r = NULL;
  uint32_t result = 0;
  if (mx_isend(e, &seg, 1, to, m, CTX(m), &r) != MX_SUCCESS)
    return 0;
  if (mx_wait(e, &r, WAIT_MS, st, &result) != MX_SUCCESS || !result) {
    fprintf(stderr, "send %#" PRIx64 " not completed within %d ms\n", m, WAIT_MS);
    return 0;
  }
  return 1;
}

static const uint32_t sizes[] = {0,     1,     32,     100,    1000,    8000,   8960,
                                 9000,  20000, 32768,  32769,  100000, 1u << 20, 3u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Segment layout helpers (256 segments of sizes i % 7 * 3 + (i & 1) * 1000). */
static uint32_t seg_layout(mx_segment_t *seg, unsigned char *buf) {
  uint32_t off = 0;
  for (int i = 0; i < MX_MAX_SEGMENTS; i++) {
    uint32_t l = (uint32_t)(i % 7) * 3u + (uint32_t)(i & 1) * 1000u;
    seg[i].segment_ptr = buf + off + 1; /* 1-byte gaps */
    seg[i].segment_length = l;
    off += l + 1;
  }
  return off;
}

static uint32_t seg_total(const mx_segment_t *seg) {
  uint32_t t = 0;
  for (int i = 0; i < MX_MAX_SEGMENTS; i++)
    t += seg[i].segment_length;
  return t;
}

static void seg_fill(mx_segment_t *seg, uint32_t seed) {
  uint32_t pos = 0;
  for (int i = 0; i < MX_MAX_SEGMENTS; i++)
    for (uint32_t j = 0; j < seg[i].segment_length; j++)
      ((unsigned char *)seg[i].segment_ptr)[j] = pat(seed, pos++);
}

static long seg_verify(const mx_segment_t *seg, uint32_t seed) {
  uint32_t pos = 0;
  for (int i = 0; i < MX_MAX_SEGMENTS; i++)
    for (uint32_t j = 0; j < seg[i].segment_length; j++, pos++)
      if (((unsigned char *)seg[i].segment_ptr)[j] != pat(seed, pos))
        return (long)pos;
  return -1;
}

/* ======================================================================== */

static void server(void) {
  mx_endpoint_t ep2;
  mx_status_t st;
  mx_endpoint_addr_t client, client2;
  uint64_t client_nic = 0, n = 0;
  unsigned char *buf = xmalloc(4u << 20);
  char name[MX_MAX_HOSTNAME_LEN];

  /* Endpoint 2 first: the client starts at once and goes on as soon as endpoint 0
   * answers, so endpoint 2 must be open by then (else its board nacks it as closed). */
  ep2 = t_open(2, OTHER_KEY);
  ep = t_open(0, TKEY);
  my_nic = t_nic();
  CHECK_OK(mx_nic_id_to_hostname(my_nic, name));
  CHECK(strcmp(name, "h0:0") == 0, "server board name '%s'", name);

  /* hello: learn the client's address */
  REQUIRE(recv_into(ep, buf, 64, 1, &st), "no hello from the client");
  client = st.source;
  CHECK(t_addr_eid(client, &client_nic) == CLIENT_EID, "hello from endpoint %ld",
        t_addr_eid(client, NULL));
  CHECK_OK(mx_hostname_to_nic_id((char *)"h1:0", &n));
  CHECK(n == client_nic, "h1:0 is %#" PRIx64 ", hello came from %#" PRIx64, n, client_nic);
  CHECK(n != my_nic, "h0 and h1 share a nic id");
  CHECK_OK(mx_nic_id_to_hostname(client_nic, name));
  CHECK(strcmp(name, "h1:0") == 0, "client board name '%s'", name);

  /* echo: every size; odd ones received as unexpected messages */
  for (size_t i = 0; i < NSIZES; i++) {
    uint32_t len = sizes[i], result = 0;
    if (i & 1) {
      CHECK_OK(mx_probe(ep, WAIT_MS, 0x1000 | i, MX_MATCH_MASK_NONE, &st, &result));
      CHECK(result == 1 && st.msg_length == len, "probe of echo %zu", i);
    }
    if (!recv_into(ep, buf, len, 0x1000 | i, &st)) {
      CHECK(0, "echo %zu (%u bytes) not received", i, len);
      DONE();
    }
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x1000 | i, len, len, CTX(0x1000 | i));
    CHECK_SOURCE(st, client_nic, CLIENT_EID);
    CHECK(verify(buf, len, (uint32_t)i) < 0, "echo %zu: data", i);
    fill(buf, len, (uint32_t)i + 500u);
    CHECK(send_from(ep, st.source, buf, len, 0x1100 | i, &st) && st.code == MX_STATUS_SUCCESS,
          "echo %zu: reply", i);
  }

  /* truncation, both ways */
  REQUIRE(recv_into(ep, buf, 40, 0x2000, &st), "truncated eager not received");
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x2000, 100, 40, CTX(0x2000));
  CHECK(verify(buf, 40, 0x2000) < 0, "truncated eager data");
  REQUIRE(recv_into(ep, buf, 50000, 0x2001, &st), "truncated rendezvous not received");
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x2001, 200000, 50000, CTX(0x2001));
  CHECK(verify(buf, 50000, 0x2001) < 0, "truncated rendezvous data");
  fill(buf, 300, 0x2100);
  CHECK(send_from(ep, client, buf, 300, 0x2100, &st), "truncated eager to the client");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x2100, 300, 300, CTX(0x2100));
  fill(buf, 100000, 0x2101);
  CHECK(send_from(ep, client, buf, 100000, 0x2101, &st), "truncated rendezvous to the client");
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x2101, 100000, 1000, CTX(0x2101));

  /* issend: the receive is posted late */
  sleep_ms(600);
  REQUIRE(recv_into(ep, buf, 8, 0x3000, &st), "issend not received");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x3000, 8, 8, CTX(0x3000));

  /* probes: the oldest matching message, with its source and length */
  {
    uint32_t result = 0;
    CHECK_OK(mx_probe(ep, WAIT_MS, 0x4000, 0xff00, &st, &result));
    CHECK(result == 1 && st.match_info == 0x4000 && st.msg_length == 5000, "probe 0x40??");
    CHECK_SOURCE(st, client_nic, CLIENT_EID);
    CHECK_OK(mx_probe(ep, WAIT_MS, 0x4001, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1 && st.msg_length == 100000, "probe of the rendezvous");
    REQUIRE(recv_into(ep, buf, 5000, 0x4000, &st), "probed message");
    CHECK(verify(buf, 5000, 0x4000) < 0 && st.xfer_length == 5000, "probed message data");
    REQUIRE(recv_into(ep, buf, 100000, 0x4001, &st), "probed rendezvous");
    CHECK(verify(buf, 100000, 0x4001) < 0 && st.xfer_length == 100000, "probed rendezvous data");
  }

  /* 256 segments: received contiguous, answered contiguous */
  {
    static mx_segment_t seg[MX_MAX_SEGMENTS];
    unsigned char *tmp = xmalloc(400000);
    uint32_t total = seg_total((seg_layout(seg, tmp), seg));
    REQUIRE(recv_into(ep, buf, total, 0x5000, &st), "256-segment message");
    CHECK(st.code == MX_STATUS_SUCCESS && st.xfer_length == total, "256-segment status");
    CHECK(verify(buf, total, 0x5000) < 0, "256-segment data");
    fill(buf, total, 0x5100);
    CHECK(send_from(ep, client, buf, total, 0x5100, &st), "reply to 256 segments");
    free(tmp);
  }

  /* Many receives posted into one buffer at once (libfabric's bandwidth tests do
   * this): their pulls run side by side into the same memory and every message
   * carries the same bytes, so the buffer must hold them whatever the order. */
  for (int round = 0; round < SHARED_ROUNDS; round++) {
    mx_request_t r[SHARED_RECVS];
    memset(buf, 0, SHARED_LEN);
    for (int k = 0; k < SHARED_RECVS; k++) {
      mx_segment_t seg = {buf, SHARED_LEN};
      CHECK_OK(mx_irecv(ep, &seg, 1, 0x5200, MX_MATCH_MASK_NONE, NULL, &r[k]));
    }
    CHECK(send_from(ep, client, buf + SHARED_LEN, 0, 0x5300, &st), "go %d", round);
    for (int k = 0; k < SHARED_RECVS; k++) {
      uint32_t result = 0;
      CHECK_OK(mx_wait(ep, &r[k], WAIT_MS, &st, &result));
      CHECK(result == 1 && st.code == MX_STATUS_SUCCESS && st.xfer_length == SHARED_LEN,
            "round %d, receive %d into the shared buffer", round, k);
    }
    long bad = verify(buf, SHARED_LEN, 0x5200);
    CHECK(bad < 0, "round %d: %d receives into one buffer: wrong byte at %ld", round,
          SHARED_RECVS, bad);
  }

  /* second endpoint: the client introduces itself there */
  REQUIRE(recv_into(ep2, buf, 16, 0x8000, &st), "hello on endpoint 2");
  client2 = st.source;

  /* close endpoint 0, tell the client through endpoint 2 */
  REQUIRE(recv_into(ep, buf, 16, 0x9000, &st), "close request");
  CHECK_OK(mx_close_endpoint(ep));
  CHECK(send_from(ep2, client2, buf, 0, 0x9100, &st), "closed notice");
  /* bye on endpoint 2: then this process goes away */
  REQUIRE(recv_into(ep2, buf, 16, 0x9200, &st), "bye");
  CHECK_OK(mx_close_endpoint(ep2));
  mx_finalize();
  free(buf);
  printf("server ");
  DONE();
}

/* ======================================================================== */

struct blocked_connect {
  uint64_t nic;
  mx_return_t rc;
  volatile int done;
};

static void *connect_forever(void *arg) {
  struct blocked_connect *b = arg;
  mx_endpoint_addr_t a;
  b->rc = mx_connect(ep, b->nic, 2, OTHER_KEY, MX_INFINITE, &a);
  b->done = 1;
  return NULL;
}

static void client(void) {
  mx_endpoint_t ep2c, ep2d;
  mx_endpoint_addr_t to2c, to2d;
  uint64_t nic0 = 0;
  mx_endpoint_addr_t srv, srv2, a;
  mx_status_t st;
  mx_return_t rc = MX_SUCCESS;
  unsigned char *buf = xmalloc(4u << 20);
  char name[MX_MAX_HOSTNAME_LEN];
  double t0;

  ep = t_open(CLIENT_EID, TKEY);
  my_nic = t_nic();
  CHECK_OK(mx_nic_id_to_hostname(my_nic, name));
  CHECK(strcmp(name, "h1:0") == 0, "client board name '%s'", name);
  {
    uint32_t count = 0;
    CHECK_OK(mx_get_info(NULL, MX_NIC_COUNT, NULL, 0, &count, sizeof count));
    CHECK(count == 1, "MX_NIC_COUNT on a veth host: %u", count);
  }

  /* find the server (it may still be starting) */
  t0 = now_ms();
  mx_set_error_handler(MX_ERRORS_RETURN);
  while ((rc = mx_hostname_to_nic_id((char *)"h0:0", &nic0)) != MX_SUCCESS && now_ms() - t0 < 20000)
    sleep_ms(100);
  REQUIRE(rc == MX_SUCCESS, "h0:0 not found: %s", mx_strerror(rc));
  while ((rc = mx_connect(ep, nic0, 0, TKEY, 2000, &srv)) != MX_SUCCESS && now_ms() - t0 < 20000)
    sleep_ms(100);
  REQUIRE(rc == MX_SUCCESS, "connect to h0:0 endpoint 0: %s", mx_strerror(rc));
  mx_set_error_handler(record_handler);
  CHECK(nic0 != my_nic, "server nic equals the client's");
  CHECK_OK(mx_nic_id_to_hostname(nic0, name));
  CHECK(strcmp(name, "h0:0") == 0, "server name '%s'", name);
  {
    uint64_t n = 0;
    uint32_t e = 9, sess = 0;
    CHECK_OK(mx_decompose_endpoint_addr2(srv, &n, &e, &sess));
    CHECK(n == nic0 && e == 0, "server address %#" PRIx64 "/%u", n, e);
  }

  /* connect failures over the wire */
  CHECK_ERR(mx_connect(ep, nic0, 0, OTHER_KEY, 5000, &a), MX_BAD_CONNECTION_KEY);
  CHECK_ERR(mx_connect(ep, nic0, 2, TKEY, 5000, &a), MX_BAD_CONNECTION_KEY);
  t0 = now_ms();
  CHECK_ERR(mx_connect(ep, nic0, 5, TKEY, 5000, &a), MX_CONNECTION_FAILED);
  CHECK(now_ms() - t0 < 2000, "connect to a closed remote endpoint took %.0f ms", now_ms() - t0);
  CHECK_ERR(mx_connect(ep, nic0, 40, TKEY, 5000, &a), MX_BAD_ENDPOINT_ID);
  CHECK_OK(mx_connect(ep, nic0, 2, OTHER_KEY, 5000, &srv2));
  /* two more endpoints connected to the server's endpoint 2 (used once it is gone) */
  ep2c = t_open(CLIENT_EID + 4, TKEY);
  ep2d = t_open(CLIENT_EID + 5, TKEY);
  CHECK_OK(mx_connect(ep2c, nic0, 2, OTHER_KEY, 5000, &to2c));
  CHECK_OK(mx_connect(ep2d, nic0, 2, OTHER_KEY, 5000, &to2d));
  {
    mx_request_t r = NULL;
    CHECK_OK(mx_iconnect(ep, nic0, 0, TKEY, 0xabcULL, CTX(0xabc), &r));
    CHECK(r && t_wait(ep, &r, &st), "iconnect to the server");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0xabc, st.msg_length, st.xfer_length, CTX(0xabc));
    CHECK_SOURCE(st, nic0, 0);
    CHECK_OK(mx_iconnect(ep, nic0, 0, OTHER_KEY, 0xabdULL, CTX(0xabd), &r));
    CHECK(r && t_wait(ep, &r, &st), "iconnect with a wrong key");
    CHECK_STATUS(st, MX_STATUS_BAD_KEY, 0xabd, st.msg_length, st.xfer_length, CTX(0xabd));
    CHECK_OK(mx_iconnect(ep, nic0, 6, TKEY, 0xabeULL, CTX(0xabe), &r));
    CHECK(r && t_wait(ep, &r, &st), "iconnect to a closed endpoint");
    CHECK_STATUS(st, MX_STATUS_ENDPOINT_CLOSED, 0xabe, st.msg_length, st.xfer_length, CTX(0xabe));
  }

  /* hello */
  CHECK(send_from(ep, srv, buf, 0, 1, &st), "hello");

  /* echo */
  for (size_t i = 0; i < NSIZES; i++) {
    uint32_t len = sizes[i], result = 0;
    mx_segment_t seg = {buf, len};
    mx_request_t rr = NULL, sr = NULL;
    unsigned char *out = xmalloc(len);
    fill(out, len, (uint32_t)i);
    memset(buf, 0, len);
    CHECK_OK(mx_irecv(ep, &seg, 1, 0x1100 | i, MX_MATCH_MASK_NONE, CTX(i), &rr));
    seg.segment_ptr = out;
    CHECK_OK(mx_isend(ep, &seg, 1, srv, 0x1000 | i, CTX(i + 100), &sr));
    CHECK_OK(mx_wait(ep, &rr, WAIT_MS, &st, &result));
    if (!result) {
      CHECK(0, "echo %zu (%u bytes): no reply", i, len);
      DONE();
    }
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x1100 | i, len, len, CTX(i));
    CHECK_SOURCE(st, nic0, 0);
    CHECK(verify(buf, len, (uint32_t)i + 500u) < 0, "echo %zu: reply data", i);
    result = 0;
    CHECK_OK(mx_wait(ep, &sr, WAIT_MS, &st, &result));
    CHECK(result == 1, "echo %zu: send", i);
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x1000 | i, len, len, CTX(i + 100));
    free(out);
  }

  /* truncation */
  fill(buf, 100, 0x2000);
  CHECK(send_from(ep, srv, buf, 100, 0x2000, &st), "truncated eager");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x2000, 100, 100, CTX(0x2000));
  fill(buf, 200000, 0x2001);
  CHECK(send_from(ep, srv, buf, 200000, 0x2001, &st), "truncated rendezvous");
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x2001, 200000, 50000, CTX(0x2001));
  REQUIRE(recv_into(ep, buf, 40, 0x2100, &st), "truncated eager from the server");
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x2100, 300, 40, CTX(0x2100));
  CHECK(verify(buf, 40, 0x2100) < 0, "truncated eager data");
  REQUIRE(recv_into(ep, buf, 1000, 0x2101, &st), "truncated rendezvous from the server");
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x2101, 100000, 1000, CTX(0x2101));
  CHECK(verify(buf, 1000, 0x2101) < 0, "truncated rendezvous data");

  /* issend: not complete while the server has no receive posted */
  {
    mx_segment_t seg = {buf, 8};
    mx_request_t r = NULL;
    uint32_t result = 9;
    CHECK_OK(mx_issend(ep, &seg, 1, srv, 0x3000, NULL, &r));
    sleep_ms(250);
    CHECK_OK(mx_test(ep, &r, &st, &result));
    CHECK(result == 0, "issend completed before the server posted its receive");
    if (!result) {
      result = 0;
      CHECK_OK(mx_wait(ep, &r, WAIT_MS, &st, &result));
      CHECK(result == 1 && st.code == MX_STATUS_SUCCESS, "issend never completed");
    }
  }

  /* probes */
  fill(buf, 5000, 0x4000);
  fill(buf + 5000, 100000, 0x4001);
  CHECK(send_from(ep, srv, buf, 5000, 0x4000, &st), "probed message");
  CHECK(send_from(ep, srv, buf + 5000, 100000, 0x4001, &st), "probed rendezvous");

  /* 256 segments out, 256 segments in */
  {
    static mx_segment_t seg[MX_MAX_SEGMENTS];
    unsigned char *tmp = xmalloc(400000);
    mx_request_t r = NULL, s = NULL;
    uint32_t result = 0, total;
    seg_layout(seg, tmp);
    total = seg_total(seg);
    seg_fill(seg, 0x5000);
    CHECK_OK(mx_isend(ep, seg, MX_MAX_SEGMENTS, srv, 0x5000, NULL, &s));
    CHECK(s && t_wait(ep, &s, &st) && st.code == MX_STATUS_SUCCESS && st.msg_length == total,
          "256-segment send");
    memset(tmp, 0, 400000);
    CHECK_OK(mx_irecv(ep, seg, MX_MAX_SEGMENTS, 0x5100, MX_MATCH_MASK_NONE, NULL, &r));
    CHECK_OK(mx_wait(ep, &r, WAIT_MS, &st, &result));
    CHECK(result == 1 && st.code == MX_STATUS_SUCCESS && st.xfer_length == total,
          "256-segment receive");
    CHECK(seg_verify(seg, 0x5100) < 0, "256-segment receive data");
    free(tmp);
  }

  /* many receives into one buffer on the server: all our sends at once */
  {
    unsigned char *out = xmalloc(SHARED_LEN);
    fill(out, SHARED_LEN, 0x5200);
    for (int round = 0; round < SHARED_ROUNDS; round++) {
      mx_request_t s[SHARED_RECVS];
      REQUIRE(recv_into(ep, buf, 0, 0x5300, &st), "go %d for the shared-buffer round", round);
      for (int k = 0; k < SHARED_RECVS; k++) {
        mx_segment_t seg = {out, SHARED_LEN};
        CHECK_OK(mx_isend(ep, &seg, 1, srv, 0x5200, NULL, &s[k]));
      }
      for (int k = 0; k < SHARED_RECVS; k++)
        CHECK(t_wait(ep, &s[k], &st) && st.code == MX_STATUS_SUCCESS,
              "round %d, send %d to the shared buffer", round, k);
    }
    free(out);
  }

  /* endpoint 2 of the server learns our address */
  CHECK(send_from(ep, srv2, buf, 4, 0x8000, &st), "hello to endpoint 2");

  /* the server closes endpoint 0 */
  CHECK(send_from(ep, srv, buf, 4, 0x9000, &st), "close request");
  REQUIRE(recv_into(ep, buf, 16, 0x9100, &st), "closed notice");
  CHECK_SOURCE(st, nic0, 2);
  CHECK_ERR(mx_connect(ep, nic0, 0, TKEY, 5000, &a), MX_CONNECTION_FAILED);
  {
    /* a rendezvous to the closed endpoint fails */
    mx_segment_t seg = {buf, 100000};
    mx_request_t r = NULL;
    uint32_t result = 0;
    CHECK_OK(mx_isend(ep, &seg, 1, srv, 0x9300, CTX(0x9300), &r));
    CHECK_OK(mx_wait(ep, &r, 10000, &st, &result));
    CHECK(result == 1, "rendezvous to a closed endpoint never completed");
    CHECK(st.code == MX_STATUS_ENDPOINT_CLOSED, "rendezvous to a closed endpoint: %s",
          mx_strstatus(st.code));
  }
  CHECK(send_from(ep, srv2, buf, 0, 0x9200, &st), "bye");

  /* ---- the server host is silent from now on; each case on its own endpoint
   * (so that one peer's failure does not decide the next case) ---- */
  sleep_ms(500);
  {
    mx_endpoint_t ea = t_open(CLIENT_EID + 1, TKEY);
    t0 = now_ms();
    CHECK_ERR(mx_connect(ea, nic0, 2, OTHER_KEY, 1000, &a), MX_TIMEOUT);
    CHECK(now_ms() - t0 >= 900 && now_ms() - t0 < 3000, "connect timeout after %.0f ms",
          now_ms() - t0);
    CHECK_OK(mx_close_endpoint(ea));
  }

  /* per-request timeout of an iconnect */
  {
    mx_endpoint_t eb = t_open(CLIENT_EID + 2, TKEY);
    mx_request_t r = NULL;
    uint32_t result = 0;
    CHECK_OK(mx_iconnect(eb, nic0, 2, OTHER_KEY, 0x77, CTX(0x77), &r));
    CHECK_OK(mx_set_request_timeout(eb, r, 1000));
    t0 = now_ms();
    CHECK_OK(mx_wait(eb, &r, 8000, &st, &result));
    CHECK(result == 1, "iconnect with a 1 s timeout to a dead host still pending after 8 s");
    if (result)
      CHECK_STATUS(st, MX_STATUS_ENDPOINT_UNREACHABLE, 0x77, st.msg_length, st.xfer_length,
                   CTX(0x77));
    CHECK_OK(mx_close_endpoint(eb));
  }

  /* per-request and endpoint-default timeouts of rendezvous sends on connected peers */
  {
    mx_endpoint_t ec = ep2c, ed = ep2d;
    mx_segment_t seg = {buf, 100000};
    mx_request_t r = NULL;
    uint32_t result = 0;
    CHECK_OK(mx_isend(ec, &seg, 1, to2c, 0x78, CTX(0x78), &r));
    CHECK_OK(mx_set_request_timeout(ec, r, 1000));
    t0 = now_ms();
    CHECK_OK(mx_wait(ec, &r, 8000, &st, &result));
    CHECK(result == 1, "send with a 1 s timeout to a dead host still pending after 8 s");
    if (result)
      CHECK(st.code == MX_STATUS_ENDPOINT_UNREACHABLE, "send to a dead host: %s",
            mx_strstatus(st.code));
    r = NULL;
    result = 0;
    CHECK_OK(mx_set_request_timeout(ed, NULL, 1000));
    CHECK_OK(mx_isend(ed, &seg, 1, to2d, 0x79, CTX(0x79), &r));
    CHECK_OK(mx_wait(ed, &r, 5000, &st, &result));
    CHECK(result == 1,
          "send after mx_set_request_timeout(ep, NULL, 1000) to a dead host still pending "
          "after 5 s (endpoint default not applied)");
    if (result)
      CHECK(st.code == MX_STATUS_ENDPOINT_UNREACHABLE, "send to a dead host: %s",
            mx_strstatus(st.code));
    CHECK_OK(mx_close_endpoint(ec));
    CHECK_OK(mx_close_endpoint(ed));
  }

  /* mx_wakeup ends a blocked mx_connect with MX_TIMEOUT */
  {
    struct blocked_connect b;
    pthread_t th;
    memset(&b, 0, sizeof b);
    b.nic = nic0;
    pthread_create(&th, NULL, connect_forever, &b);
    sleep_ms(300);
    CHECK(!b.done, "mx_connect(MX_INFINITE) to a dead host returned early: %s",
          mx_strerror(b.rc));
    t0 = now_ms();
    CHECK_OK(mx_wakeup(ep));
    while (!b.done && now_ms() - t0 < 3000)
      sleep_ms(5);
    CHECK(b.done, "mx_wakeup did not end a blocked mx_connect");
    if (b.done) {
      pthread_join(th, NULL);
      CHECK(b.rc == MX_TIMEOUT, "woken mx_connect returned %s", mx_strerror(b.rc));
    }
  }

  /* a pending iconnect can be cancelled */
  {
    mx_endpoint_t ee = t_open(CLIENT_EID + 3, TKEY);
    mx_request_t r = NULL;
    uint32_t result = 0;
    CHECK_OK(mx_iconnect(ee, nic0, 2, OTHER_KEY, 0x7a, NULL, &r));
    sleep_ms(100);
    CHECK_OK(mx_cancel(ee, &r, &result));
    CHECK(result == 1 && r == NULL, "cancel of a pending iconnect: result %u", result);
    result = 9;
    CHECK_OK(mx_wait_any(ee, 300, 0, 0, &st, &result));
    CHECK(result == 0, "a cancelled iconnect was reported (match %#" PRIx64 ")", st.match_info);
    CHECK_OK(mx_close_endpoint(ee));
  }

  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
  free(buf);
  printf("client ");
  DONE();
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
    fprintf(stderr, "usage: twohost server|client\n");
    return 2;
  }
  t_init();
  if (strcmp(argv[1], "server") == 0)
    server();
  else
    client();
  return 0;
}
