/* threads.c - thread safety: 4 threads share two endpoints (e0 and e1 on
 * lo); each posts receives, sends and waits on both at the same time, with
 * message sizes across every protocol class, expected and unexpected, and
 * checks every status and byte. Then 4 threads send to one endpoint while
 * one thread drains it with mx_wait_any. */
#include "common.h"

#include <pthread.h>

#define NT 4
#define ITER 150

static mx_endpoint_t e0, e1;
static mx_endpoint_addr_t to1;
static uint64_t nic;
static int errors[NT];
static pthread_barrier_t start;

static uint32_t size_of(int i) {
  static const uint32_t s[] = {0, 8, 100, 1000, 9000, 40000, 70000};
  return s[i % 7];
}

static void *worker(void *arg) {
  int t = (int)(intptr_t)arg;
  uint32_t maxlen = 70000;
  unsigned char *sb = xmalloc(maxlen), *rb = xmalloc(maxlen), *rep = xmalloc(maxlen),
                *repr = xmalloc(maxlen);
  mx_endpoint_addr_t back;
  int have_back = 0;
  pthread_barrier_wait(&start);
  for (int i = 0; i < ITER; i++) {
    uint32_t len = size_of(i + t);
    uint64_t m = ((uint64_t)t << 32) | (uint64_t)i;
    uint64_t rm = m | (1ULL << 63);
    uint32_t seed = (uint32_t)(t * 100000 + i);
    mx_segment_t sseg = {sb, len}, rseg = {rb, len}, pseg = {rep, len}, qseg = {repr, len};
    mx_request_t sr = NULL, rr = NULL, pr = NULL, qr = NULL;
    mx_status_t st;
    uint32_t result;
    int unexpected = (i % 3) == 1;
    fill(sb, len, seed);
    /* reply receive on e0, request receive on e1 (unless unexpected) */
    if (mx_irecv(e0, &qseg, 1, rm, MX_MATCH_MASK_NONE, CTX(seed), &qr) != MX_SUCCESS)
      errors[t]++;
    if (!unexpected && mx_irecv(e1, &rseg, 1, m, MX_MATCH_MASK_NONE, CTX(seed), &rr) != MX_SUCCESS)
      errors[t]++;
    if (mx_isend(e0, &sseg, 1, to1, m, CTX(seed), &sr) != MX_SUCCESS)
      errors[t]++;
    if (unexpected) {
      result = 0;
      if (mx_probe(e1, 10000, m, MX_MATCH_MASK_NONE, &st, &result) != MX_SUCCESS || !result ||
          st.msg_length != len)
        errors[t]++;
      if (mx_irecv(e1, &rseg, 1, m, MX_MATCH_MASK_NONE, CTX(seed), &rr) != MX_SUCCESS)
        errors[t]++;
    }
    result = 0;
    if (mx_wait(e1, &rr, 10000, &st, &result) != MX_SUCCESS || result != 1) {
      fprintf(stderr, "thread %d iteration %d: request not received\n", t, i);
      errors[t]++;
      break;
    }
    if (st.code != MX_STATUS_SUCCESS || st.match_info != m || st.xfer_length != len ||
        st.context != CTX(seed) || t_addr_eid(st.source, NULL) != 0 ||
        verify(rb, len, seed) >= 0) {
      fprintf(stderr, "thread %d iteration %d: bad request status or data\n", t, i);
      errors[t]++;
    }
    if (!have_back) {
      back = st.source;
      have_back = 1;
    }
    /* reply e1 -> e0 through the source address */
    fill(rep, len, seed ^ 0x5555u);
    if (mx_isend(e1, &pseg, 1, back, rm, NULL, &pr) != MX_SUCCESS)
      errors[t]++;
    result = 0;
    if (mx_wait(e0, &qr, 10000, &st, &result) != MX_SUCCESS || result != 1) {
      fprintf(stderr, "thread %d iteration %d: reply not received\n", t, i);
      errors[t]++;
      break;
    }
    if (st.code != MX_STATUS_SUCCESS || st.match_info != rm || st.xfer_length != len ||
        st.context != CTX(seed) || verify(repr, len, seed ^ 0x5555u) >= 0) {
      fprintf(stderr, "thread %d iteration %d: bad reply status or data\n", t, i);
      errors[t]++;
    }
    result = 0;
    if (mx_wait(e0, &sr, 10000, &st, &result) != MX_SUCCESS || result != 1 ||
        st.code != MX_STATUS_SUCCESS || st.context != CTX(seed))
      errors[t]++;
    result = 0;
    if (mx_wait(e1, &pr, 10000, &st, &result) != MX_SUCCESS || result != 1 ||
        st.code != MX_STATUS_SUCCESS)
      errors[t]++;
  }
  free(sb);
  free(rb);
  free(rep);
  free(repr);
  return NULL;
}

/* Phase 2: senders on e0 (forgotten sends), one drainer on e1. */
#define P2 200
static void *sender(void *arg) {
  int t = (int)(intptr_t)arg;
  static char payload[NT][64];
  pthread_barrier_wait(&start);
  for (int i = 0; i < P2; i++) {
    mx_segment_t seg = {payload[t], 64};
    snprintf(payload[t], 64, "t%d", t);
    if (mx_isend(e0, &seg, 1, to1, ((uint64_t)(t + 1) << 40) | (uint64_t)i, NULL, NULL) !=
        MX_SUCCESS)
      errors[t]++;
  }
  return NULL;
}

int main(void) {
  pthread_t th[NT];
  t_init();
  nic = t_nic();
  e0 = t_open(0, TKEY);
  e1 = t_open(1, TKEY);
  to1 = t_connect(e0, 1, TKEY);

  pthread_barrier_init(&start, NULL, NT);
  for (int t = 0; t < NT; t++)
    pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
  for (int t = 0; t < NT; t++)
    pthread_join(th[t], NULL);
  for (int t = 0; t < NT; t++)
    CHECK(errors[t] == 0, "ping-pong thread %d: %d errors", t, errors[t]);
  pthread_barrier_destroy(&start);

  /* phase 2: receives posted by the main thread while 4 threads send */
  {
    static char rb[NT * P2][64];
    int next[NT] = {0}, got = 0;
    memset(errors, 0, sizeof errors);
    for (int i = 0; i < NT * P2; i++)
      t_recv(e1, rb[i], 64, 0, 0, CTX(i + 1));
    pthread_barrier_init(&start, NULL, NT);
    for (int t = 0; t < NT; t++)
      pthread_create(&th[t], NULL, sender, (void *)(intptr_t)t);
    for (int n = 0; n < NT * P2; n++) {
      mx_status_t st;
      uint32_t result = 0;
      if (mx_wait_any(e1, 10000, 0, 0, &st, &result) != MX_SUCCESS || !result)
        break;
      int t = (int)(st.match_info >> 40) - 1;
      int i = (int)(st.match_info & 0xffffffffu);
      if (t < 0 || t >= NT || i != next[t]) {
        CHECK(0, "message %#" PRIx64 " out of order (expected index %d)", st.match_info,
              t >= 0 && t < NT ? next[t] : -1);
        continue;
      }
      next[t]++;
      got++;
    }
    for (int t = 0; t < NT; t++)
      pthread_join(th[t], NULL);
    CHECK(got == NT * P2, "%d of %d messages from 4 sender threads", got, NT * P2);
    for (int t = 0; t < NT; t++)
      CHECK(errors[t] == 0, "sender thread %d: %d errors", t, errors[t]);
  }
  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
