/* timeouts.c - blocking calls with a timeout and nothing arriving return
 * MX_SUCCESS with result 0 after about the timeout (mx_wait, mx_wait_any,
 * mx_peek, mx_probe, mx_buffered); the request stays usable afterwards;
 * MX_INFINITE (0) waits for as long as it takes; mx_test never blocks. */
#include "common.h"

#include <pthread.h>

static mx_endpoint_t e0, e1;
static mx_endpoint_addr_t to1;

/* Sends one small message with match 0x99 to e1 after 300 ms. */
static void *late_sender(void *arg) {
  static char b[8] = "late";
  (void)arg;
  sleep_ms(300);
  mx_segment_t seg = {b, sizeof b};
  mx_isend(e0, &seg, 1, to1, 0x99, NULL, NULL);
  return NULL;
}

#define CHECK_ELAPSED(t0, lo, hi, what)                                        \
  do {                                                                         \
    double el_ = now_ms() - (t0);                                              \
    double hi_ = time_limit_ms(hi);                                            \
    CHECK(el_ >= (lo) && el_ <= hi_, "%s returned after %.0f ms, expected %d..%.0f ms", what, \
          el_, (int)(lo), hi_);                                                \
  } while (0)

int main(void) {
  char b[64];
  mx_status_t st;
  uint32_t result;
  mx_request_t r, req;
  double t0;

  t_init();
  e0 = t_open(0, TKEY);
  e1 = t_open(1, TKEY);
  to1 = t_connect(e0, 1, TKEY);

  r = t_recv(e1, b, sizeof b, 0x1, MX_MATCH_MASK_NONE, CTX(1));

  /* mx_test: immediate */
  t0 = now_ms();
  result = 5;
  CHECK_OK(mx_test(e1, &r, &st, &result));
  CHECK(result == 0 && r != NULL, "mx_test of a pending receive: result %u", result);
  CHECK_ELAPSED(t0, 0, 100, "mx_test");

  /* mx_wait */
  t0 = now_ms();
  result = 5;
  CHECK_OK(mx_wait(e1, &r, 300, &st, &result));
  CHECK(result == 0, "mx_wait timeout: result %u", result);
  CHECK(r != NULL, "mx_wait timeout cleared the request");
  CHECK_ELAPSED(t0, 290, 2000, "mx_wait(300)");
  t0 = now_ms();
  CHECK_OK(mx_wait(e1, &r, 1, &st, &result));
  CHECK(result == 0, "mx_wait(1): result %u", result);
  CHECK_ELAPSED(t0, 0, 500, "mx_wait(1)");

  /* mx_wait_any / mx_peek / mx_probe with nothing completed or unexpected */
  t0 = now_ms();
  result = 5;
  CHECK_OK(mx_wait_any(e1, 250, 0, 0, &st, &result));
  CHECK(result == 0, "mx_wait_any timeout: result %u", result);
  CHECK_ELAPSED(t0, 240, 2000, "mx_wait_any(250)");
  t0 = now_ms();
  result = 5;
  req = NULL;
  CHECK_OK(mx_peek(e1, 250, &req, &result));
  CHECK(result == 0, "mx_peek timeout: result %u", result);
  CHECK_ELAPSED(t0, 240, 2000, "mx_peek(250)");
  t0 = now_ms();
  result = 5;
  CHECK_OK(mx_probe(e1, 250, 0, 0, &st, &result));
  CHECK(result == 0, "mx_probe timeout: result %u", result);
  CHECK_ELAPSED(t0, 240, 2000, "mx_probe(250)");

  /* a send the receiver never takes: rendezvous, not buffered in time */
  {
    uint32_t big = 200000;
    unsigned char *s = xmalloc(big);
    fill(s, big, 1);
    mx_request_t sr = t_send(e0, to1, s, big, 0x2, CTX(2));
    t0 = now_ms();
    result = 5;
    CHECK_OK(mx_buffered(e0, &sr, 250, &result));
    CHECK(result == 0, "mx_buffered of an unreceived rendezvous: result %u", result);
    CHECK_ELAPSED(t0, 240, 2000, "mx_buffered(250)");
    t0 = now_ms();
    result = 5;
    CHECK_OK(mx_wait(e0, &sr, 250, &st, &result));
    CHECK(result == 0, "mx_wait of an unreceived rendezvous: result %u", result);
    CHECK_ELAPSED(t0, 240, 2000, "mx_wait(250) on a send");
    /* take it now: both complete */
    unsigned char *rb = xmalloc(big);
    mx_request_t rr = t_recv(e1, rb, big, 0x2, MX_MATCH_MASK_NONE, CTX(3));
    CHECK(t_wait(e1, &rr, &st) && st.code == MX_STATUS_SUCCESS && verify(rb, big, 1) < 0,
          "late receive of the rendezvous");
    CHECK(t_wait(e0, &sr, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(2),
          "rendezvous send after its timeouts");
    free(s);
    free(rb);
  }

  /* the timed-out receive still works: MX_INFINITE waits for a late message */
  {
    pthread_t th;
    mx_request_t r2 = t_recv(e1, b, sizeof b, 0x99, MX_MATCH_MASK_NONE, CTX(9));
    pthread_create(&th, NULL, late_sender, NULL);
    t0 = now_ms();
    result = 0;
    CHECK_OK(mx_wait(e1, &r2, MX_INFINITE, &st, &result));
    CHECK(result == 1, "mx_wait(MX_INFINITE) returned without the message");
    CHECK_ELAPSED(t0, 250, 5000, "mx_wait(MX_INFINITE)");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x99, 8, 8, CTX(9));
    pthread_join(th, NULL);
  }
  /* same with the first receive, after all its timeouts */
  {
    char s[5] = "abcd";
    mx_request_t sr = t_send(e0, to1, s, 5, 0x1, NULL);
    CHECK(t_wait(e1, &r, &st), "receive after timeouts");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x1, 5, 5, CTX(1));
    CHECK(strcmp(b, "abcd") == 0, "data after timeouts");
    t_wait(e0, &sr, NULL);
  }

  /* probe / wait_any / peek with MX_INFINITE wait for a late message too */
  {
    pthread_t th;
    pthread_create(&th, NULL, late_sender, NULL);
    t0 = now_ms();
    result = 0;
    CHECK_OK(mx_probe(e1, MX_INFINITE, 0x99, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1 && st.match_info == 0x99, "mx_probe(MX_INFINITE) returned without it");
    CHECK_ELAPSED(t0, 250, 5000, "mx_probe(MX_INFINITE)");
    pthread_join(th, NULL);
    r = t_recv(e1, b, sizeof b, 0x99, MX_MATCH_MASK_NONE, CTX(10));
    pthread_create(&th, NULL, late_sender, NULL);
    CHECK_OK(mx_wait_any(e1, MX_INFINITE, 0, 0, &st, &result));
    CHECK(result == 1 && st.context == CTX(10), "mx_wait_any(MX_INFINITE) got %p", st.context);
    pthread_join(th, NULL);
    r = t_recv(e1, b, sizeof b, 0x99, MX_MATCH_MASK_NONE, CTX(11));
    mx_request_t seen = NULL;
    result = 0;
    CHECK_OK(mx_peek(e1, MX_INFINITE, &seen, &result));
    CHECK(result == 1 && seen == r, "mx_peek(MX_INFINITE) returned %p, expected %p",
          (void *)seen, (void *)r);
    CHECK(t_wait(e1, &r, &st) && st.context == CTX(11), "peeked receive");
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
