/* wakeup.c - mx_wakeup from another thread ends a blocked mx_wait,
 * mx_wait_any, mx_peek or mx_probe (MX_INFINITE) with MX_SUCCESS
 * and result 0; the request stays pending and completes later; several
 * blocked threads all wake; a wakeup with nobody waiting does not cut a
 * later wait short.
 *
 * A wakeup is not remembered, and no event tells that a thread has entered
 * its wait, so the main thread repeats mx_wakeup until the blocked threads
 * return (bounded by WAKE_LIMIT_MS, scaled by TEST_TIME_FACTOR). */
#include "common.h"

#include <pthread.h>

enum { W_WAIT, W_WAIT_ANY, W_PEEK, W_PROBE };

struct blocker {
  int kind;
  mx_endpoint_t ep;
  mx_request_t req;
  mx_return_t rc;
  uint32_t result;
  volatile double returned_at;
};

static void *block(void *arg) {
  struct blocker *b = arg;
  mx_status_t st;
  mx_request_t seen = NULL;
  b->result = 77;
  switch (b->kind) {
  case W_WAIT:
    b->rc = mx_wait(b->ep, &b->req, MX_INFINITE, &st, &b->result);
    break;
  case W_WAIT_ANY:
    b->rc = mx_wait_any(b->ep, MX_INFINITE, 0, 0, &st, &b->result);
    break;
  case W_PEEK:
    b->rc = mx_peek(b->ep, MX_INFINITE, &seen, &b->result);
    break;
  default:
    b->rc = mx_probe(b->ep, MX_INFINITE, 0xdead, MX_MATCH_MASK_NONE, &st, &b->result);
    break;
  }
  b->returned_at = now_ms();
  return NULL;
}

static const char *names[] = {"mx_wait", "mx_wait_any", "mx_peek", "mx_probe"};

enum { WAKE_LIMIT_MS = 5000, WAKE_REPEAT_MS = 5 };

/* mx_wakeup(ep) until every blocker of bl[0..n) has returned; false if one
 * has not within the limit (a missed wakeup would otherwise hang forever). */
static int wake_until_returned(mx_endpoint_t ep, struct blocker *bl, int n) {
  double t0 = now_ms(), limit = time_limit_ms(WAKE_LIMIT_MS);
  for (;;) {
    int left = 0;
    for (int i = 0; i < n; i++)
      left += bl[i].returned_at == 0;
    if (!left)
      return 1;
    if (now_ms() - t0 > limit)
      return 0;
    CHECK_OK(mx_wakeup(ep));
    sleep_ms(WAKE_REPEAT_MS);
  }
}

int main(void) {
  char b[16];
  mx_status_t st;
  uint32_t result;

  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);
  mx_request_t r = t_recv(e1, b, sizeof b, 0x1, MX_MATCH_MASK_NONE, CTX(1));
  unsigned char *big = xmalloc(100000);
  mx_request_t bigs = t_send(e0, to1, big, 100000, 0x2, CTX(2)); /* never received yet */

  for (int kind = W_WAIT; kind <= W_PROBE; kind++) {
    struct blocker bl;
    pthread_t th;
    memset(&bl, 0, sizeof bl);
    bl.kind = kind;
    bl.ep = e1;
    bl.req = r;
    pthread_create(&th, NULL, block, &bl);
    /* nothing can end an MX_INFINITE wait here but a wakeup */
    CHECK(bl.returned_at == 0, "%s returned before any wakeup (result %u)", names[kind],
          bl.result);
    if (!wake_until_returned(bl.ep, &bl, 1)) {
      CHECK(0, "%s did not return after repeated mx_wakeup", names[kind]);
      DONE();
    }
    pthread_join(th, NULL);
    CHECK(bl.rc == MX_SUCCESS && bl.result == 0, "%s after wakeup: rc %d result %u", names[kind],
          (int)bl.rc, bl.result);
  }
  CHECK(r != NULL, "woken mx_wait cleared the request");

  /* two threads blocked at once both wake */
  {
    struct blocker two[2];
    pthread_t t1, t2;
    memset(two, 0, sizeof two);
    two[0].kind = W_WAIT;
    two[0].ep = e1;
    two[0].req = r;
    two[1].kind = W_PROBE;
    two[1].ep = e1;
    pthread_create(&t1, NULL, block, &two[0]);
    pthread_create(&t2, NULL, block, &two[1]);
    if (!wake_until_returned(e1, two, 2)) {
      CHECK(0, "mx_wakeup did not wake both threads (%d %d)", two[0].returned_at != 0,
            two[1].returned_at != 0);
      DONE();
    }
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK(two[0].rc == MX_SUCCESS && two[1].rc == MX_SUCCESS && two[0].result == 0 &&
              two[1].result == 0,
          "woken threads: rc %d %d, results %u %u", (int)two[0].rc, (int)two[1].rc,
          two[0].result, two[1].result);
  }

  /* a wakeup with nobody blocked does not end a later wait */
  CHECK_OK(mx_wakeup(e1));
  {
    double t0 = now_ms();
    result = 5;
    CHECK_OK(mx_wait(e1, &r, 300, &st, &result));
    CHECK(result == 0, "wait after an idle wakeup: result %u", result);
    CHECK(now_ms() - t0 >= 250, "an earlier idle mx_wakeup cut a later wait short (%.0f ms)",
          now_ms() - t0);
  }

  /* the requests behind all this still complete */
  {
    char s[6] = "hello";
    mx_request_t sr = t_send(e0, to1, s, 6, 0x1, NULL);
    CHECK(t_wait(e1, &r, &st), "receive after wakeups");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x1, 6, 6, CTX(1));
    t_wait(e0, &sr, NULL);
    unsigned char *rb = xmalloc(100000);
    mx_request_t br = t_recv(e1, rb, 100000, 0x2, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &br, &st) && st.code == MX_STATUS_SUCCESS, "rendezvous receive");
    CHECK(t_wait(e0, &bigs, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(2),
          "rendezvous send after wakeups");
    free(rb);
  }
  free(big);
  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
