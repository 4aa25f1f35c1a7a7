/* unexp_handler.c - mx_register_unexp_handler: the handler sees every
 * message that matches no posted receive (context, source, match value,
 * full length, data pointer when the whole payload is at hand, NULL for a
 * rendezvous); MX_RECV_CONTINUE keeps it unexpected or lets it match a
 * receive the handler posted; MX_RECV_FINISHED drops it (a rendezvous
 * sender then completes with MX_STATUS_TRUNCATED and xfer_length 0);
 * messages matching a posted receive never reach it; mx_close_endpoint
 * inside it is MX_CLOSE_IN_HANDLER; NULL removes it. */
#include "common.h"

#include <pthread.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* What the handler does with match value m: */
#define ACT_CONTINUE 0x1000
#define ACT_FINISH 0x2000
#define ACT_POST 0x3000  /* post a receive from inside, then continue */
#define ACT_CLOSE 0x4000 /* try to close the endpoint from inside */

struct seen {
  void *ctx;
  mx_endpoint_addr_t src;
  uint64_t match;
  uint32_t len;
  int had_data;
  int data_ok;
};

static struct seen calls[64];
static int ncalls;
static int nreturns; /* handler calls done, their effects (close_rc, posted_req) visible */
static mx_endpoint_t hep; /* endpoint the handler is installed on */
static unsigned char posted_buf[512];
static mx_request_t posted_req;
static mx_return_t close_rc = MX_SUCCESS;

static mx_unexp_handler_action_t handler(void *ctx, mx_endpoint_addr_t src, uint64_t m,
                                         uint32_t len, void *data) {
  mx_unexp_handler_action_t act = MX_RECV_CONTINUE;
  pthread_mutex_lock(&mu);
  if (ncalls < 64) {
    struct seen *s = &calls[ncalls++];
    s->ctx = ctx;
    s->src = src;
    s->match = m;
    s->len = len;
    s->had_data = data != NULL;
    s->data_ok = data ? verify(data, len, (uint32_t)m) < 0 : 0;
  }
  pthread_mutex_unlock(&mu);
  switch (m & 0xf000) {
  case ACT_FINISH:
    act = MX_RECV_FINISHED;
    break;
  case ACT_POST: {
    mx_segment_t seg = {posted_buf, sizeof posted_buf};
    mx_irecv(hep, &seg, 1, m, MX_MATCH_MASK_NONE, CTX(0xabc), &posted_req);
    break;
  }
  case ACT_CLOSE:
    close_rc = mx_close_endpoint(hep);
    break;
  default:
    break;
  }
  pthread_mutex_lock(&mu);
  nreturns++;
  pthread_mutex_unlock(&mu);
  return act;
}

static int ncalls_now(void) {
  pthread_mutex_lock(&mu);
  int n = ncalls;
  pthread_mutex_unlock(&mu);
  return n;
}

static int nreturns_now(void) {
  pthread_mutex_lock(&mu);
  int n = nreturns;
  pthread_mutex_unlock(&mu);
  return n;
}

/* Wait until the handler was entered n times (or 5 s, scaled by TEST_TIME_FACTOR). */
static int wait_calls(int n) {
  double t0 = now_ms();
  while (ncalls_now() < n && now_ms() - t0 < time_limit_ms(5000))
    sleep_ms(2);
  return ncalls_now() >= n;
}

/* Wait until n handler calls have returned, with what they did. */
static int wait_returns(int n) {
  double t0 = now_ms();
  while (nreturns_now() < n && now_ms() - t0 < time_limit_ms(5000))
    sleep_ms(2);
  return nreturns_now() >= n;
}

static mx_request_t send_m(mx_endpoint_t ep, mx_endpoint_addr_t to, unsigned char *buf,
                           uint32_t len, uint64_t m) {
  fill(buf, len, (uint32_t)m);
  return t_send(ep, to, buf, len, m, CTX(m));
}

int main(void) {
  static unsigned char sb[8][100000], rb[100000];
  mx_status_t st;
  uint32_t result;
  uint64_t nic;
  int n;

  t_init();
  nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);
  hep = e1;
  CHECK_OK(mx_register_unexp_handler(e1, handler, CTX(0x5150)));

  /* ---- CONTINUE: seen with data (small), then stays unexpected ---- */
  mx_request_t s = send_m(e0, to1, sb[0], 20, ACT_CONTINUE | 1);
  REQUIRE(wait_calls(1), "handler not called for an unexpected message");
  CHECK(calls[0].ctx == CTX(0x5150), "handler context %p", calls[0].ctx);
  CHECK(calls[0].match == (ACT_CONTINUE | 1) && calls[0].len == 20,
        "handler saw match %#" PRIx64 " length %u", calls[0].match, calls[0].len);
  CHECK(calls[0].had_data && calls[0].data_ok, "tiny message: data %s",
        calls[0].had_data ? "wrong" : "not given");
  {
    uint64_t n2 = 0;
    CHECK(t_addr_eid(calls[0].src, &n2) == 0 && n2 == nic, "handler source");
  }
  result = 0;
  CHECK_OK(mx_probe(e1, 5000, ACT_CONTINUE | 1, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1 && st.msg_length == 20, "continued message not unexpected");
  mx_request_t r = t_recv(e1, rb, 100, ACT_CONTINUE | 1, MX_MATCH_MASK_NONE, CTX(1));
  CHECK(t_wait(e1, &r, &st), "receive of a continued message");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, ACT_CONTINUE | 1, 20, 20, CTX(1));
  CHECK(verify(rb, 20, ACT_CONTINUE | 1) < 0, "data of a continued message");
  t_wait(e0, &s, NULL);

  /* ---- a posted receive takes the message: no handler call ---- */
  n = ncalls_now();
  r = t_recv(e1, rb, 100, 0x77, MX_MATCH_MASK_NONE, CTX(2));
  s = send_m(e0, to1, sb[1], 50, 0x77);
  CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS, "expected receive");
  t_wait(e0, &s, NULL);
  /* the receive completed, so the message was matched: the handler's turn is past */
  CHECK(ncalls_now() == n, "handler called for a message matching a posted receive");

  /* ---- FINISHED: dropped; eager sender fine, rendezvous sender told 0 bytes ---- */
  n = ncalls_now();
  s = send_m(e0, to1, sb[2], 100, ACT_FINISH | 2);
  mx_request_t big = send_m(e0, to1, sb[3], 90000, ACT_FINISH | 3);
  REQUIRE(wait_calls(n + 2), "handler not called for the dropped messages");
  CHECK(calls[n].match == (ACT_FINISH | 2) && calls[n].had_data && calls[n].data_ok,
        "small dropped message: match %#" PRIx64 " data %d", calls[n].match, calls[n].had_data);
  CHECK(calls[n + 1].match == (ACT_FINISH | 3) && calls[n + 1].len == 90000 &&
            !calls[n + 1].had_data,
        "rendezvous: match %#" PRIx64 " length %u data %d", calls[n + 1].match, calls[n + 1].len,
        calls[n + 1].had_data);
  CHECK(t_wait(e0, &s, &st) && st.code == MX_STATUS_SUCCESS, "eager send of a dropped message");
  CHECK(t_wait(e0, &big, &st), "rendezvous send of a dropped message did not complete");
  CHECK(st.code == MX_STATUS_TRUNCATED && st.xfer_length == 0,
        "dropped rendezvous: sender status %s xfer %u", mx_strstatus(st.code), st.xfer_length);
  result = 5;
  CHECK_OK(mx_iprobe(e1, ACT_FINISH, 0xf000, &st, &result));
  CHECK(result == 0, "dropped message still unexpected (%#" PRIx64 ")", st.match_info);

  /* ---- the handler posts the receive itself and continues ---- */
  n = ncalls_now();
  s = send_m(e0, to1, sb[4], 300, ACT_POST | 4);
  REQUIRE(wait_returns(n + 1), "handler not called");
  REQUIRE(posted_req != NULL, "handler could not post a receive");
  CHECK(t_wait(e1, &posted_req, &st), "receive posted by the handler did not complete");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, ACT_POST | 4, 300, 300, CTX(0xabc));
  CHECK(verify(posted_buf, 300, ACT_POST | 4) < 0, "data into the handler's receive");
  result = 5;
  CHECK_OK(mx_iprobe(e1, ACT_POST | 4, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 0, "message also left unexpected");
  t_wait(e0, &s, NULL);

  /* ---- multi-fragment medium and rendezvous continued: no data pointer ---- */
  n = ncalls_now();
  s = send_m(e0, to1, sb[5], 20000, ACT_CONTINUE | 5);
  big = send_m(e0, to1, sb[6], 100000, ACT_CONTINUE | 6);
  REQUIRE(wait_calls(n + 2), "handler not called for medium/rendezvous");
  CHECK(calls[n].len == 20000 && calls[n + 1].len == 100000, "lengths %u %u", calls[n].len,
        calls[n + 1].len);
  CHECK(!calls[n + 1].had_data, "rendezvous data pointer given");
  CHECK(!calls[n].had_data || calls[n].data_ok, "medium data pointer with wrong data");
  for (int i = 5; i <= 6; i++) {
    uint32_t len = i == 5 ? 20000 : 100000;
    r = t_recv(e1, rb, len, ACT_CONTINUE | (uint64_t)i, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS && verify(rb, len, ACT_CONTINUE | (uint32_t)i) < 0,
          "continued message %d", i);
  }
  CHECK(t_wait(e0, &s, &st) && t_wait(e0, &big, &st) && st.code == MX_STATUS_SUCCESS,
        "sends of continued messages");

  /* ---- closing inside the handler ---- */
  n = ncalls_now();
  s = send_m(e0, to1, sb[7], 8, ACT_CLOSE | 7);
  REQUIRE(wait_returns(n + 1), "handler not called");
  CHECK(close_rc == MX_CLOSE_IN_HANDLER, "mx_close_endpoint in the handler: %d (%s)",
        (int)close_rc, mx_strerror(close_rc));
  t_wait(e0, &s, NULL);
  {
    mx_endpoint_addr_t a;
    CHECK_OK(mx_get_endpoint_addr(e1, &a)); /* still open */
  }

  /* ---- removing the handler ---- */
  CHECK_OK(mx_register_unexp_handler(e1, NULL, NULL));
  n = ncalls_now();
  s = send_m(e0, to1, sb[0], 10, ACT_FINISH | 8);
  result = 0;
  CHECK_OK(mx_probe(e1, 5000, ACT_FINISH | 8, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1, "message after removing the handler not unexpected");
  CHECK(ncalls_now() == n, "removed handler still called");
  t_wait(e0, &s, NULL);

  /* ---- bad endpoint ---- */
  CHECK_ERR(mx_register_unexp_handler(NULL, handler, NULL), MX_BAD_ENDPOINT);

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  CHECK_ERR(mx_register_unexp_handler(e1, handler, NULL), MX_BAD_ENDPOINT);
  mx_finalize();
  DONE();
}
