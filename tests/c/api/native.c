/* native.c - the native Open-MX API (open-mx.h) on one host (lo), every omx_*
 * function with its effect: init and its API check, board and host names,
 * omx_get_info's native keys, endpoint parameters, connect and iconnect
 * (native codes for a wrong key, a closed or bad endpoint, an unknown nic),
 * addresses and their contexts, contiguous and vector sends of every class
 * with replies through status.addr, issend, truncation (status
 * OMX_MESSAGE_TRUNCATED), probe/peek/test_any/wait_any, timeouts in ms given
 * last (0 polls, OMX_TIMEOUT_INFINITE waits until omx_wakeup), ibuffered,
 * cancel and cancel_notest (status OMX_CANCELLED via test, wait_any, peek,
 * context, forget), forget, request timeouts, the unexpected handler,
 * disconnect; native error handlers (global, per endpoint, from the open
 * parameter) receive native codes where they differ from MX's (13 for a
 * refused cancel, 96 for a close inside a handler), MX handlers MX codes;
 * and the MX API used in the same process on the same endpoints. */
#include "common.h"

#include <open-mx.h>
#include <pthread.h>

#define OTHER_KEY 0x0badcafeu
#define UNKNOWN_NIC 0x0000123456789abcULL
/* A board named by a peers file (OMX_PEERS_FILE, set below) that never answers. */
#define SILENT_NIC 0x000002fedcba9876ULL
#define SILENT_MAC "02:fe:dc:ba:98:76"

/* Expect a native call to return `want`. */
#define NCHECK_RC(call, want)                                                  \
  do {                                                                         \
    omx_return_t nrc_ = (call);                                                \
    CHECK(nrc_ == (want), "%s returned %d (%s), expected %d (%s)", #call,      \
          (int)nrc_, omx_strerror(nrc_), (int)(want), omx_strerror(want));     \
  } while (0)
#define NCHECK_OK(call) NCHECK_RC(call, OMX_SUCCESS)

/* Native handler capture (the global one and the endpoint ones). */
static int n_calls;
static omx_return_t n_last;
static omx_return_t native_record(char *msg, omx_return_t code) {
  (void)msg;
  n_calls++;
  n_last = code;
  return code;
}
static int ep_calls;
static omx_return_t ep_last;
static omx_return_t endpoint_record(char *msg, omx_return_t code) {
  (void)msg;
  ep_calls++;
  ep_last = code;
  return code;
}

/* Expect a native call to fail with `want`, reported once to the global handler. */
#define NCHECK_ERR(call, want)                                                 \
  do {                                                                         \
    n_calls = 0;                                                               \
    n_last = OMX_SUCCESS;                                                      \
    NCHECK_RC(call, want);                                                     \
    CHECK(n_calls == 1 && n_last == (want),                                    \
          "%s: native handler called %d times, last code %d, expected once "   \
          "with %d", #call, n_calls, (int)n_last, (int)(want));                \
  } while (0)

static uint64_t nic;

static int nwait(omx_endpoint_t ep, omx_request_t *r, omx_status_t *st) {
  uint32_t result = 0;
  omx_status_t tmp;
  if (!st)
    st = &tmp;
  memset(st, 0xa5, sizeof *st);
  omx_return_t rc = omx_wait(ep, r, st, &result, 10000);
  if (rc != OMX_SUCCESS || result != 1) {
    fprintf(stderr, "nwait: rc %d (%s) result %u\n", (int)rc, omx_strerror(rc), result);
    return 0;
  }
  return 1;
}

static long addr_eid(omx_endpoint_addr_t a) {
  uint64_t n = 0;
  uint32_t e = 0;
  if (omx_decompose_endpoint_addr(a, &n, &e) != OMX_SUCCESS || n != nic)
    return -1;
  return (long)e;
}

/* ---- unexpected handler ---- */
static int unexp_calls;
static uint64_t unexp_match;
static uint32_t unexp_len;
static int unexp_data_ok;
static omx_return_t unexp_close_rc;
static omx_endpoint_t unexp_ep;
static omx_unexp_handler_action_t unexp(void *ctx, omx_endpoint_addr_t source,
                                        uint64_t match, uint32_t len, void *data) {
  (void)source;
  unexp_calls++;
  unexp_match = match;
  unexp_len = len;
  unexp_data_ok = ctx == CTX(0x99) && data && verify(data, len, 61) < 0;
  unexp_close_rc = omx_close_endpoint(unexp_ep);
  return OMX_UNEXP_HANDLER_RECV_FINISHED;
}

/* ---- omx_wakeup of a blocked omx_wait ---- */
struct blocker {
  omx_endpoint_t ep;
  omx_request_t req;
  omx_return_t rc;
  uint32_t result;
  volatile int returned;
};
static void *block(void *arg) {
  struct blocker *b = arg;
  omx_status_t st;
  b->rc = omx_wait(b->ep, &b->req, &st, &b->result, OMX_TIMEOUT_INFINITE);
  b->returned = 1;
  return NULL;
}

static void infos(void) {
  uint32_t v = 0;
  uint64_t ids[40];
  char s[128];
  uint8_t board = 0;
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_BOARD_MAX, NULL, 0, &v, sizeof v));
  CHECK(v >= 1, "OMX_INFO_BOARD_MAX %u", v);
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_ENDPOINT_MAX, NULL, 0, &v, sizeof v));
  CHECK(v == 32, "OMX_INFO_ENDPOINT_MAX %u", v);
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_BOARD_COUNT, NULL, 0, &v, sizeof v));
  CHECK(v == 1, "OMX_INFO_BOARD_COUNT %u (OMX_IFACES=lo)", v);
  memset(ids, 0xff, sizeof ids);
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_BOARD_IDS, NULL, 0, ids, sizeof ids));
  CHECK(ids[0] == nic && ids[1] == 0, "OMX_INFO_BOARD_IDS %#" PRIx64 " %#" PRIx64, ids[0],
        ids[1]);
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_BOARD_HOSTNAME, &board, 1, s, sizeof s));
  CHECK(strcmp(s, "localhost") == 0, "OMX_INFO_BOARD_HOSTNAME '%s'", s);
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_BOARD_IFACENAME, &board, 1, s, sizeof s));
  CHECK(strcmp(s, "lo") == 0, "OMX_INFO_BOARD_IFACENAME '%s'", s);
  v = 12345;
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_BOARD_NUMA_NODE, &board, 1, &v, sizeof v));
  CHECK(v != 12345, "OMX_INFO_BOARD_NUMA_NODE not written");
  NCHECK_OK(omx_get_info(NULL, OMX_INFO_COUNTER_MAX, NULL, 0, &v, sizeof v));
  CHECK(v > 10, "OMX_INFO_COUNTER_MAX %u", v);
  {
    uint32_t n = v, *vals = xmalloc(4u * n);
    uint8_t last = (uint8_t)(n - 1), beyond = (uint8_t)(n < 255 ? n : 255);
    NCHECK_OK(omx_get_info(NULL, OMX_INFO_COUNTER_VALUES, &board, 1, vals, 4u * n));
    NCHECK_ERR(omx_get_info(NULL, OMX_INFO_COUNTER_VALUES, &board, 1, vals, 4u * n - 4),
               OMX_BAD_INFO_LENGTH);
    s[0] = 0;
    NCHECK_OK(omx_get_info(NULL, OMX_INFO_COUNTER_LABEL, &last, 1, s, sizeof s));
    CHECK(strlen(s) > 0, "OMX_INFO_COUNTER_LABEL of the last counter is empty");
    NCHECK_ERR(omx_get_info(NULL, OMX_INFO_COUNTER_LABEL, &beyond, 1, s, sizeof s),
               OMX_BAD_INFO_ADDRESS);
    free(vals);
  }
  NCHECK_ERR(omx_get_info(NULL, (omx_info_key_t)42, NULL, 0, &v, sizeof v), OMX_BAD_INFO_KEY);
  NCHECK_ERR(omx_get_info(NULL, OMX_INFO_BOARD_COUNT, NULL, 0, NULL, 4), OMX_BAD_INFO_ADDRESS);
  NCHECK_ERR(omx_get_info(NULL, OMX_INFO_BOARD_COUNT, NULL, 0, &v, 2), OMX_BAD_INFO_LENGTH);
}

static void names(void) {
  char host[OMX_HOSTNAMELEN_MAX];
  uint64_t n = 0;
  uint32_t b = 7;
  NCHECK_OK(omx_nic_id_to_board_number(nic, &b));
  CHECK(b == 0, "board number %u", b);
  NCHECK_ERR(omx_board_number_to_nic_id(99, &n), OMX_BOARD_NOT_FOUND);
  NCHECK_ERR(omx_nic_id_to_board_number(UNKNOWN_NIC, &b), OMX_BOARD_NOT_FOUND);
  NCHECK_OK(omx_nic_id_to_hostname(nic, host));
  CHECK(strcmp(host, "localhost") == 0, "host name '%s'", host);
  NCHECK_OK(omx_hostname_to_nic_id(host, &n));
  CHECK(n == nic, "omx_hostname_to_nic_id gives %#" PRIx64, n);
  NCHECK_ERR(omx_nic_id_to_hostname(UNKNOWN_NIC, host), OMX_PEER_NOT_FOUND);
  {
    char unknown[] = "no-such-host:0";
    NCHECK_ERR(omx_hostname_to_nic_id(unknown, &n), OMX_PEER_NOT_FOUND);
  }
}

int main(void) {
  omx_endpoint_t e0 = NULL, e1 = NULL, e2 = NULL;
  omx_endpoint_addr_t to1, to0, a;
  omx_request_t r, s, seen;
  omx_status_t st;
  uint32_t result;
  char sb[256], rb[256];

  /* ---- library ---- */
  /* before init the handler is fatal: errors return their code instead */
  omx_set_error_handler(NULL, OMX_ERRORS_RETURN);
  {
    char peers[] = "/tmp/omx-native-peers.XXXXXX";
    int fd = mkstemp(peers);
    CHECK(fd >= 0, "peers file");
    if (fd >= 0) {
      const char line[] = SILENT_MAC " silent:0\n";
      CHECK(write(fd, line, sizeof line - 1) == (ssize_t)(sizeof line - 1), "peers file write");
      close(fd);
      setenv("OMX_PEERS_FILE", peers, 1);
    }
  }
  NCHECK_RC(omx__init_api(0x200), OMX_BAD_LIB_ABI);
  NCHECK_OK(omx_init());
  CHECK(omx_set_error_handler(NULL, native_record) != NULL, "no handler after omx_init");
  NCHECK_ERR(omx_init(), OMX_ALREADY_INITIALIZED);
  CHECK(strstr(omx_strerror(OMX_MESSAGE_TRUNCATED), "runcated") != NULL, "omx_strerror(95) '%s'",
        omx_strerror(OMX_MESSAGE_TRUNCATED));
  CHECK(strstr(omx_strerror(OMX_CANCELLED), "ancel") != NULL, "omx_strerror(90)");
  NCHECK_OK(omx_board_number_to_nic_id(0, &nic));
  infos();
  names();

  /* ---- endpoints and their parameters ---- */
  {
    omx_endpoint_param_t p[2];
    p[0].key = OMX_ENDPOINT_PARAM_ERROR_HANDLER;
    p[0].val.error_handler = endpoint_record;
    p[1].key = OMX_ENDPOINT_PARAM_UNEXP_QUEUE_MAX;
    p[1].val.unexp_queue_max = 1u << 20;
    NCHECK_OK(omx_open_endpoint(0, 0, TKEY, NULL, 0, &e0));
    NCHECK_OK(omx_open_endpoint(0, 1, TKEY, p, 2, &e1));
    NCHECK_OK(omx_open_endpoint(OMX_ANY_NIC, OMX_ANY_ENDPOINT, OTHER_KEY, NULL, 0, &e2));
    REQUIRE(e0 && e1 && e2, "endpoints not opened");
    NCHECK_ERR(omx_open_endpoint(0, 0, TKEY, NULL, 0, &e2), OMX_BUSY);
    NCHECK_ERR(omx_open_endpoint(0, 5, TKEY, NULL, 1, &e2), OMX_ENDPOINT_PARAMS_BAD_LIST);
    p[0].key = (omx_endpoint_param_key_t)7;
    NCHECK_ERR(omx_open_endpoint(0, 5, TKEY, p, 1, &e2), OMX_ENDPOINT_PARAM_BAD_KEY);
    p[0].key = OMX_ENDPOINT_PARAM_CONTEXT_ID;
    p[0].val.context_id.bits = 40;
    p[0].val.context_id.shift = 0;
    NCHECK_ERR(omx_open_endpoint(0, 5, TKEY, p, 1, &e2), OMX_ENDPOINT_PARAM_BAD_VALUE);
    NCHECK_ERR(omx_open_endpoint(0, 99, TKEY, NULL, 0, &e2), OMX_BAD_ENDPOINT);
  }

  /* ---- connections and addresses (timeouts in ms) ---- */
  NCHECK_OK(omx_connect(e0, nic, 1, TKEY, 5000, &to1));
  NCHECK_OK(omx_connect(e1, nic, 0, TKEY, OMX_TIMEOUT_INFINITE, &to0));
  CHECK(addr_eid(to1) == 1 && addr_eid(to0) == 0, "connect addresses: %ld %ld", addr_eid(to1),
        addr_eid(to0));
  NCHECK_ERR(omx_connect(e0, nic, 1, OTHER_KEY, 5000, &a), OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY);
  NCHECK_ERR(omx_connect(e0, nic, 9, TKEY, 5000, &a), OMX_REMOTE_ENDPOINT_CLOSED);
  NCHECK_ERR(omx_connect(e0, nic, 40, TKEY, 5000, &a), OMX_REMOTE_ENDPOINT_BAD_ID);
  {
    double t0 = now_ms();
    NCHECK_ERR(omx_connect(e0, UNKNOWN_NIC, 0, TKEY, 300, &a), OMX_NIC_ID_NOT_FOUND);
    CHECK(now_ms() - t0 < time_limit_ms(3000), "connect to an unknown nic took %.0f ms",
          now_ms() - t0);
    /* a known board that never answers: the timeout */
    NCHECK_ERR(omx_connect(e0, SILENT_NIC, 0, TKEY, 300, &a), OMX_TIMEOUT);
    NCHECK_ERR(omx_connect(e0, UNKNOWN_NIC, 0, TKEY, 0, &a), OMX_NIC_ID_NOT_FOUND);
  }
  {
    uint64_t n = 0;
    uint32_t eid = 99, session = 0, session2 = 0;
    void *c = CTX(1);
    NCHECK_OK(omx_get_endpoint_addr(e1, &a));
    NCHECK_OK(omx_decompose_endpoint_addr_with_session(a, &n, &eid, &session));
    CHECK(n == nic && eid == 1, "own address: %#" PRIx64 " %u", n, eid);
    NCHECK_OK(omx_decompose_endpoint_addr_with_session(to1, &n, &eid, &session2));
    CHECK(eid == 1 && session2 == session, "session of e1 %#x seen by e0 as %#x", session,
          session2);
    NCHECK_OK(omx_get_endpoint_addr_context(to1, &c));
    CHECK(c == NULL, "initial address context %p", c);
    NCHECK_OK(omx_set_endpoint_addr_context(to1, CTX(0x1234)));
    NCHECK_OK(omx_get_endpoint_addr_context(to1, &c));
    CHECK(c == CTX(0x1234), "address context %p", c);
  }
  /* iconnect: the status carries match_info, context and native codes */
  {
    static const struct {
      uint32_t eid, key;
      omx_return_t code;
    } cases[] = {{1, TKEY, OMX_SUCCESS},
                 {1, OTHER_KEY, OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY},
                 {9, TKEY, OMX_REMOTE_ENDPOINT_CLOSED},
                 {40, TKEY, OMX_REMOTE_ENDPOINT_BAD_ID}};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      r = NULL;
      NCHECK_OK(omx_iconnect(e0, nic, cases[i].eid, cases[i].key, 0x500 + i, CTX(0x50 + i), &r));
      CHECK(r && nwait(e0, &r, &st), "iconnect %u did not complete", i);
      CHECK(st.code == cases[i].code && st.match_info == 0x500 + i && st.context == CTX(0x50 + i),
            "iconnect %u: code %d (%s) match %#" PRIx64 " context %p", i, (int)st.code,
            omx_strerror(st.code), st.match_info, st.context);
      if (cases[i].code == OMX_SUCCESS)
        CHECK(addr_eid(st.addr) == 1, "iconnect address designates %ld", addr_eid(st.addr));
    }
    /* a nic never heard of: refused at the call */
    r = NULL;
    NCHECK_ERR(omx_iconnect(e0, UNKNOWN_NIC, 0, TKEY, 0x5fe, NULL, &r), OMX_NIC_ID_NOT_FOUND);
    CHECK(r == NULL, "a refused iconnect gave a request");
    /* request timeout: an iconnect to a known board that never answers fails at its
     * budget */
    r = NULL;
    NCHECK_OK(omx_iconnect(e0, SILENT_NIC, 0, TKEY, 0x5ff, NULL, &r));
    NCHECK_OK(omx_set_request_timeout(e0, r, 300));
    result = 0;
    NCHECK_OK(omx_wait(e0, &r, &st, &result, (uint32_t)time_limit_ms(10000)));
    CHECK(result == 1 && (st.code == OMX_REMOTE_ENDPOINT_UNREACHABLE || st.code == OMX_TIMEOUT),
          "iconnect past its request timeout: result %u code %d (%s)", result, (int)st.code,
          omx_strerror(st.code));
    NCHECK_OK(omx_set_request_timeout(e0, NULL, OMX_TIMEOUT_INFINITE));
    NCHECK_ERR(omx_set_request_timeout(NULL, NULL, 100), OMX_BAD_ENDPOINT);
  }

  /* ---- contiguous messages of every class, replies through status.addr ---- */
  {
    static const uint32_t sizes[] = {0, 20, 100, 1000, 20000, 100000, 1u << 20};
    unsigned char *out = xmalloc(1u << 20), *in = xmalloc(1u << 20);
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      uint32_t len = sizes[i];
      fill(out, len, i);
      memset(in, 0, len);
      r = s = NULL;
      NCHECK_OK(omx_irecv(e1, in, len, 0x1000 + i, ~(uint64_t)0, CTX(i + 1), &r));
      NCHECK_OK(omx_isend(e0, out, len, to1, 0x1000 + i, CTX(i + 100), &s));
      CHECK(nwait(e1, &r, &st), "receive of %u bytes", len);
      CHECK(st.code == OMX_SUCCESS && st.msg_length == len && st.xfer_length == len &&
                st.match_info == 0x1000 + i && st.context == CTX(i + 1),
            "%u bytes: code %d len %u/%u match %#" PRIx64 " ctx %p", len, (int)st.code,
            st.msg_length, st.xfer_length, st.match_info, st.context);
      CHECK(verify(in, len, i) < 0, "%u bytes: data differs", len);
      CHECK(addr_eid(st.addr) == 0, "%u bytes: status.addr designates %ld", len,
            addr_eid(st.addr));
      {
        void *c = NULL;
        NCHECK_OK(omx_get_endpoint_addr_context(st.addr, &c));
        /* the reply goes back through the address the receive reported */
        omx_request_t rr = NULL, rs = NULL;
        omx_status_t rst;
        NCHECK_OK(omx_irecv(e0, rb, 16, 0x2000 + i, ~(uint64_t)0, NULL, &rr));
        NCHECK_OK(omx_isend(e1, sb, 16, st.addr, 0x2000 + i, NULL, &rs));
        CHECK(nwait(e0, &rr, &rst) && rst.code == OMX_SUCCESS && addr_eid(rst.addr) == 1,
              "%u bytes: reply through status.addr", len);
        nwait(e1, &rs, NULL);
      }
      CHECK(nwait(e0, &s, &st) && st.code == OMX_SUCCESS && st.context == CTX(i + 100),
            "send of %u bytes: code %d", len, (int)st.code);
      CHECK(s == NULL, "completed send request not cleared");
    }
    /* issend completes once matched */
    fill(out, 5000, 9);
    s = r = NULL;
    NCHECK_OK(omx_issend(e0, out, 5000, to1, 0x3000, NULL, &s));
    NCHECK_OK(omx_irecv(e1, in, 5000, 0x3000, ~(uint64_t)0, NULL, &r));
    CHECK(nwait(e1, &r, &st) && verify(in, 5000, 9) < 0, "issend data");
    CHECK(nwait(e0, &s, &st) && st.code == OMX_SUCCESS, "issend completion");
    /* truncation: native status code 95 on the receive */
    r = s = NULL;
    NCHECK_OK(omx_irecv(e1, in, 50, 0x3001, ~(uint64_t)0, NULL, &r));
    NCHECK_OK(omx_isend(e0, out, 100, to1, 0x3001, NULL, &s));
    CHECK(nwait(e1, &r, &st) && st.code == OMX_MESSAGE_TRUNCATED && st.msg_length == 100 &&
              st.xfer_length == 50,
          "truncation: code %d (%s) %u/%u", (int)st.code, omx_strerror(st.code), st.msg_length,
          st.xfer_length);
    nwait(e0, &s, NULL);
    free(out);
    free(in);
  }

  /* ---- vectors: 3 segments into 2, isendv and issendv ---- */
  {
    unsigned char a1[10], a2[3000], a3[40000], b1[20000], b2[30000];
    omx_seg_t sv[3] = {{a1, sizeof a1}, {a2, sizeof a2}, {a3, sizeof a3}};
    omx_seg_t rv[2] = {{b1, sizeof b1}, {b2, sizeof b2}};
    uint32_t total = sizeof a1 + sizeof a2 + sizeof a3;
    for (int sync = 0; sync < 2; sync++) {
      unsigned char all[sizeof a1 + sizeof a2 + sizeof a3], got[sizeof b1 + sizeof b2];
      fill(all, total, 20 + (uint32_t)sync);
      memcpy(a1, all, sizeof a1);
      memcpy(a2, all + sizeof a1, sizeof a2);
      memcpy(a3, all + sizeof a1 + sizeof a2, sizeof a3);
      r = s = NULL;
      NCHECK_OK(omx_irecvv(e1, rv, 2, 0x4000, ~(uint64_t)0, NULL, &r));
      if (sync)
        NCHECK_OK(omx_issendv(e0, sv, 3, to1, 0x4000, NULL, &s));
      else
        NCHECK_OK(omx_isendv(e0, sv, 3, to1, 0x4000, NULL, &s));
      CHECK(nwait(e1, &r, &st) && st.xfer_length == total, "vector receive (sync %d)", sync);
      memcpy(got, b1, sizeof b1);
      memcpy(got + sizeof b1, b2, sizeof b2);
      CHECK(verify(got, total, 20 + (uint32_t)sync) < 0, "vector data (sync %d)", sync);
      CHECK(nwait(e0, &s, NULL), "vector send (sync %d)", sync);
    }
    NCHECK_ERR(omx_isendv(e0, sv, OMX_MAX_SEGMENTS + 1, to1, 1, NULL, &s),
               OMX_SEGMENTS_BAD_COUNT);
  }

  /* ---- probe, peek, test_any, wait_any; timeouts last ---- */
  {
    double t0;
    fill(sb, 64, 30);
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 64, to1, 0x5000, NULL, &s));
    result = 0;
    NCHECK_OK(omx_probe(e1, 0x5000, ~(uint64_t)0, &st, &result, 5000));
    CHECK(result == 1 && st.msg_length == 64 && st.match_info == 0x5000 && addr_eid(st.addr) == 0,
          "probe: result %u len %u", result, st.msg_length);
    result = 0;
    NCHECK_OK(omx_iprobe(e1, 0x5000, ~(uint64_t)0, &st, &result));
    CHECK(result == 1, "iprobe of an unexpected message");
    /* timeout 0 polls, a timeout in ms waits that long */
    t0 = now_ms();
    result = 7;
    NCHECK_OK(omx_probe(e1, 0x5999, ~(uint64_t)0, &st, &result, 0));
    CHECK(result == 0, "probe with timeout 0 found something");
    NCHECK_OK(omx_probe(e1, 0x5999, ~(uint64_t)0, &st, &result, 200));
    CHECK(result == 0 && now_ms() - t0 >= 150, "probe 200 ms: result %u after %.0f ms", result,
          now_ms() - t0);
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x5000, ~(uint64_t)0, CTX(0x51), &r));
    seen = NULL;
    result = 0;
    NCHECK_OK(omx_peek(e1, &seen, &result, 5000));
    CHECK(result == 1 && seen == r, "peek: result %u request %p (want %p)", result, (void *)seen,
          (void *)r);
    NCHECK_OK(omx_test(e1, &r, &st, &result));
    CHECK(result == 1 && st.context == CTX(0x51) && verify(rb, 64, 30) < 0, "test after peek");
    nwait(e0, &s, NULL);
    seen = NULL;
    NCHECK_OK(omx_ipeek(e1, &seen, &result));
    CHECK(result == 0, "ipeek with nothing completed");
    /* wait with timeout 0 and with a timeout: still pending, result 0 */
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x5001, ~(uint64_t)0, CTX(0x52), &r));
    result = 7;
    NCHECK_OK(omx_wait(e1, &r, &st, &result, 0));
    CHECK(result == 0 && r != NULL, "wait with timeout 0 on a pending receive");
    t0 = now_ms();
    NCHECK_OK(omx_wait(e1, &r, &st, &result, 200));
    CHECK(result == 0 && now_ms() - t0 >= 150, "wait 200 ms: result %u after %.0f ms", result,
          now_ms() - t0);
    result = 7;
    NCHECK_OK(omx_wait_any(e1, 0x5001, ~(uint64_t)0, &st, &result, 0));
    CHECK(result == 0, "wait_any with timeout 0 on a pending receive");
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 8, to1, 0x5001, NULL, &s));
    result = 0;
    NCHECK_OK(omx_wait_any(e1, 0x5001, ~(uint64_t)0, &st, &result, 5000));
    CHECK(result == 1 && st.context == CTX(0x52) && st.code == OMX_SUCCESS, "wait_any");
    nwait(e0, &s, NULL);
    result = 7;
    NCHECK_OK(omx_test_any(e1, 0, 0, &st, &result));
    CHECK(result == 0, "test_any with nothing completed");
    NCHECK_ERR(omx_test_any(e0, 1, 0, &st, &result), OMX_BAD_MATCH_MASK);
  }

  /* ---- ibuffered, context ---- */
  {
    void *c = NULL;
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 8, to1, 0x6000, CTX(0x60), &s));
    result = 7;
    NCHECK_OK(omx_ibuffered(e0, &s, &result));
    CHECK(result == 1, "a small send is buffered at once (%u)", result);
    NCHECK_OK(omx_context(&s, &c));
    CHECK(c == CTX(0x60), "omx_context %p", c);
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 8, 0x6000, ~(uint64_t)0, NULL, &r));
    nwait(e1, &r, NULL);
    nwait(e0, &s, NULL);
    r = NULL;
    NCHECK_OK(omx_irecv(e0, rb, 8, 0x6001, ~(uint64_t)0, NULL, &r));
    NCHECK_ERR(omx_ibuffered(e0, &r, &result), OMX_BAD_REQUEST);
    NCHECK_OK(omx_cancel(e0, &r, &result));
  }

  /* ---- cancel, cancel_notest, forget ---- */
  {
    void *c = NULL;
    omx_request_t keep;
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x7000, ~(uint64_t)0, CTX(0x70), &r));
    result = 7;
    NCHECK_OK(omx_cancel(e1, &r, &result));
    CHECK(result == 1 && r == NULL, "cancel: result %u request %p", result, (void *)r);
    /* cancel_notest keeps the request: it completes with OMX_CANCELLED */
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x7001, ~(uint64_t)0, CTX(0x71), &r));
    keep = r;
    result = 7;
    NCHECK_OK(omx_cancel_notest(e1, &r, &result));
    CHECK(result == 1 && r == keep, "cancel_notest: result %u, request kept %d", result, r == keep);
    NCHECK_OK(omx_context(&r, &c));
    CHECK(c == CTX(0x71), "context of a cancelled request %p", c);
    seen = NULL;
    NCHECK_OK(omx_ipeek(e1, &seen, &result));
    CHECK(result == 1 && seen == keep, "ipeek reports the cancelled request");
    result = 0;
    NCHECK_OK(omx_cancel(e1, &r, &result));
    CHECK(result == 0 && r == keep, "a cancelled request cannot be cancelled again");
    memset(&st, 0, sizeof st);
    NCHECK_OK(omx_test(e1, &r, &st, &result));
    CHECK(result == 1 && r == NULL && st.code == OMX_CANCELLED && st.context == CTX(0x71) &&
              st.match_info == 0x7001 && st.xfer_length == 0,
          "test of a cancelled request: result %u code %d ctx %p match %#" PRIx64, result,
          (int)st.code, st.context, st.match_info);
    /* a message for it is now unexpected */
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 4, to1, 0x7001, NULL, &s));
    NCHECK_OK(omx_probe(e1, 0x7001, ~(uint64_t)0, &st, &result, 5000));
    CHECK(result == 1, "message to a cancelled receive is not unexpected");
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x7001, ~(uint64_t)0, NULL, &r));
    nwait(e1, &r, NULL);
    nwait(e0, &s, NULL);
    /* reported by wait_any on its match info, and by wait */
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x7002, ~(uint64_t)0, CTX(0x72), &r));
    NCHECK_OK(omx_cancel_notest(e1, &r, &result));
    result = 0;
    NCHECK_OK(omx_wait_any(e1, 0x7002, ~(uint64_t)0, &st, &result, OMX_TIMEOUT_INFINITE));
    CHECK(result == 1 && st.code == OMX_CANCELLED && st.context == CTX(0x72),
          "wait_any of a cancelled request: result %u code %d", result, (int)st.code);
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x7003, ~(uint64_t)0, CTX(0x73), &r));
    NCHECK_OK(omx_cancel_notest(e1, &r, &result));
    CHECK(nwait(e1, &r, &st) && st.code == OMX_CANCELLED, "wait of a cancelled request");
    /* forgotten: never reported */
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 64, 0x7004, ~(uint64_t)0, NULL, &r));
    NCHECK_OK(omx_cancel_notest(e1, &r, &result));
    NCHECK_OK(omx_forget(e1, &r));
    CHECK(r == NULL, "forget did not clear the request");
    result = 7;
    NCHECK_OK(omx_test_any(e1, 0, 0, &st, &result));
    CHECK(result == 0, "a forgotten cancelled request was reported");
    /* a send cannot be cancelled: native code 13 (MX says 40) */
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 8, to1, 0x7005, NULL, &s));
    NCHECK_ERR(omx_cancel(e0, &s, &result), OMX_BAD_REQUEST);
    NCHECK_ERR(omx_cancel_notest(e0, &s, &result), OMX_BAD_REQUEST);
    CHECK(s != NULL, "a refused cancel cleared the send");
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 8, 0x7005, ~(uint64_t)0, NULL, &r));
    nwait(e1, &r, NULL);
    nwait(e0, &s, NULL);
    /* forget of a pending receive: it never completes */
    r = NULL;
    NCHECK_OK(omx_irecv(e0, rb, 8, 0x7006, ~(uint64_t)0, NULL, &r));
    NCHECK_OK(omx_forget(e0, &r));
    CHECK(r == NULL, "forget of a pending receive");
  }

  /* ---- error handlers: native codes for native handlers, MX codes for MX ones ---- */
  {
    mx_error_handler_t prev;
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 8, to1, 0x8000, NULL, &s));
    /* an MX handler gets MX's code, the native call still returns the native one */
    prev = mx_set_error_handler(record_handler);
    h_reset();
    NCHECK_RC(omx_cancel(e0, &s, &result), OMX_BAD_REQUEST);
    CHECK(h_calls == 1 && h_last == MX_CANCEL_NOT_SUPPORTED, "MX handler got %d (%d calls)",
          (int)h_last, h_calls);
    CHECK(prev == (mx_error_handler_t)native_record,
          "mx_set_error_handler did not return the previous (native) handler");
    /* and an MX call reports MX's code to a native handler in native numbers */
    CHECK(omx_set_error_handler(NULL, native_record) == (omx_error_handler_t)record_handler,
          "omx_set_error_handler did not return the previous handler");
    n_calls = 0;
    CHECK_RC(mx_cancel((mx_endpoint_t)e0, (mx_request_t *)&s, &result), (mx_return_t)OMX_BAD_REQUEST);
    CHECK(n_calls == 1 && n_last == OMX_BAD_REQUEST, "native handler got %d from mx_cancel",
          (int)n_last);
    /* the endpoint handler given at open time is native and takes e1's errors */
    ep_calls = 0;
    n_calls = 0;
    NCHECK_RC(omx_irecv(e1, rb, 8, 1, 0, NULL, &r), OMX_BAD_MATCH_MASK);
    CHECK(ep_calls == 1 && ep_last == OMX_BAD_MATCH_MASK && n_calls == 0,
          "endpoint handler: %d calls, code %d; global %d calls", ep_calls, (int)ep_last, n_calls);
    CHECK(omx_set_error_handler(e0, endpoint_record) == NULL, "e0 had an endpoint handler");
    CHECK(omx_set_error_handler(e0, OMX_ERRORS_RETURN) == (omx_error_handler_t)endpoint_record,
          "previous endpoint handler");
    n_calls = 0;
    NCHECK_RC(omx_cancel(e0, &s, &result), OMX_BAD_REQUEST);
    CHECK(n_calls == 0, "OMX_ERRORS_RETURN on e0: the global handler was called");
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, 8, 0x8000, ~(uint64_t)0, NULL, &r));
    nwait(e1, &r, NULL);
    nwait(e0, &s, NULL);
    /* a close inside the unexpected handler: native 96 (MX says 41) */
    unexp_ep = e1;
    ep_calls = 0;
    NCHECK_OK(omx_register_unexp_handler(e1, unexp, CTX(0x99)));
    fill(sb, 20, 61);
    s = NULL;
    NCHECK_OK(omx_isend(e0, sb, 20, to1, 0x8001, NULL, &s));
    nwait(e0, &s, NULL);
    result = 0;
    for (double t0 = now_ms(); !unexp_calls && now_ms() - t0 < time_limit_ms(5000);)
      NCHECK_OK(omx_progress(e1));
    CHECK(unexp_calls == 1 && unexp_match == 0x8001 && unexp_len == 20 && unexp_data_ok,
          "unexpected handler: %d calls, match %#" PRIx64 " len %u data %d", unexp_calls,
          unexp_match, unexp_len, unexp_data_ok);
    CHECK(unexp_close_rc == OMX_NOT_SUPPORTED_IN_HANDLER && ep_calls == 1 &&
              ep_last == OMX_NOT_SUPPORTED_IN_HANDLER,
          "close in handler returned %d, endpoint handler got %d", (int)unexp_close_rc,
          (int)ep_last);
    result = 7;
    NCHECK_OK(omx_iprobe(e1, 0x8001, ~(uint64_t)0, &st, &result));
    CHECK(result == 0, "a message the handler finished is still unexpected");
    NCHECK_OK(omx_register_unexp_handler(e1, NULL, NULL));
  }

  /* ---- progression, wakeup of an infinite wait ---- */
  {
    struct blocker b;
    pthread_t th;
    NCHECK_OK(omx_disable_progression(e1));
    NCHECK_OK(omx_reenable_progression(e1));
    memset(&b, 0, sizeof b);
    b.ep = e1;
    NCHECK_OK(omx_irecv(e1, rb, 8, 0x9000, ~(uint64_t)0, NULL, &b.req));
    b.result = 7;
    REQUIRE(pthread_create(&th, NULL, block, &b) == 0, "pthread_create");
    /* a wakeup is not remembered: repeat it until the waiter returns */
    for (double t0 = now_ms(); !b.returned && now_ms() - t0 < time_limit_ms(5000);) {
      NCHECK_OK(omx_wakeup(e1));
      sleep_ms(5);
    }
    REQUIRE(b.returned, "omx_wakeup did not end an OMX_TIMEOUT_INFINITE wait");
    pthread_join(th, NULL);
    CHECK(b.rc == OMX_SUCCESS && b.result == 0 && b.req != NULL, "woken wait: rc %d result %u",
          (int)b.rc, b.result);
    NCHECK_OK(omx_cancel(e1, &b.req, &result));
  }

  /* ---- both APIs in one process, on the same endpoints and requests ---- */
  {
    mx_segment_t seg = {sb, 200};
    mx_request_t ms = NULL;
    mx_status_t mst;
    fill(sb, 200, 70);
    r = NULL;
    NCHECK_OK(omx_irecv(e1, rb, sizeof rb, 0xa000, ~(uint64_t)0, CTX(0xa0), &r));
    mx_endpoint_addr_t mto1;
    memcpy(&mto1, &to1, sizeof mto1);
    CHECK_OK(mx_isend((mx_endpoint_t)e0, &seg, 1, mto1, 0xa000, NULL, &ms));
    /* an omx request completed through mx_wait: MX's status codes there */
    CHECK(t_wait((mx_endpoint_t)e1, (mx_request_t *)&r, &mst), "mx_wait of an omx receive");
    CHECK_STATUS(mst, MX_STATUS_SUCCESS, 0xa000, 200, 200, CTX(0xa0));
    CHECK(verify(rb, 200, 70) < 0, "data of an MX send to an omx receive");
    CHECK(nwait(e0, (omx_request_t *)&ms, &st) && st.code == OMX_SUCCESS,
          "omx_wait of an mx send");
  }

  /* ---- disconnect, close ---- */
  NCHECK_OK(omx_disconnect(e0, to1));
  /* (e0 has OMX_ERRORS_RETURN as its handler now) */
  NCHECK_RC(omx_isend(e0, sb, 8, to1, 1, NULL, &s), OMX_BAD_REQUEST);
  NCHECK_OK(omx_connect(e0, nic, 1, TKEY, 5000, &to1));
  NCHECK_OK(omx_close_endpoint(e2));
  NCHECK_OK(omx_close_endpoint(e1));
  NCHECK_OK(omx_close_endpoint(e0));
  NCHECK_ERR(omx_close_endpoint(e0), OMX_BAD_ENDPOINT);
  NCHECK_OK(omx_finalize());
  if (getenv("OMX_PEERS_FILE"))
    unlink(getenv("OMX_PEERS_FILE"));
  DONE();
}
