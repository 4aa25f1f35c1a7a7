/* ofi_wait.c - wait objects: FI_WAIT_FD CQs and counters, the descriptor of
 * fi_control(FI_GETWAIT) in poll and epoll, fi_trywait, fi_cq_sread on an
 * FD CQ, fi_cq_signal waking a poll, counters (read, add, set, errors,
 * fi_cntr_wait with thresholds and timeouts), an endpoint with a counter and
 * no CQ, poll sets (fi_poll) over CQs and counters. Completions come from
 * another thread, so the sleeper is woken by the thread that completes its
 * request (MX's progress thread), not by its own polling.
 */
#define _GNU_SOURCE
#include "common.h"

#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>

#define T 20000.0

static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;
static struct fi_info *info;

/* An enabled endpoint bound to what is given (NULL: not bound). */
static struct fid_ep *open_ep(struct fid_cq *cq, struct fid_cntr *tx,
                              struct fid_cntr *rx, fi_addr_t *addr) {
  struct fid_ep *ep;
  REQUIRE(fi_endpoint(dom, info, &ep, NULL) == 0, "fi_endpoint");
  REQUIRE(fi_ep_bind(ep, &av->fid, 0) == 0, "bind av");
  if (cq)
    REQUIRE(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV) == 0, "bind cq");
  if (tx)
    REQUIRE(fi_ep_bind(ep, &tx->fid, FI_SEND) == 0, "bind tx counter");
  if (rx)
    REQUIRE(fi_ep_bind(ep, &rx->fid, FI_RECV) == 0, "bind rx counter");
  int ret = fi_enable(ep);
  REQUIRE(ret == 0, "fi_enable: %d", ret);
  char name[16];
  size_t len = sizeof name;
  REQUIRE(fi_getname(&ep->fid, name, &len) == 0, "getname");
  REQUIRE(fi_av_insert(av, name, 1, addr, 0, NULL) == 1, "av_insert");
  return ep;
}

struct sender {
  struct fid_ep *ep;
  fi_addr_t to;
  int count;
  uint64_t tag;
  pthread_t th;
};

static void *send_thread(void *arg) {
  struct sender *s = arg;
  for (int i = 0; i < s->count; i++) {
    uint64_t v = s->tag + (uint64_t)i;
    ssize_t r;
    while ((r = fi_tinject(s->ep, &v, sizeof v, s->to, s->tag)) == -FI_EAGAIN)
      ;
    CHECK(r == 0, "inject from the sender thread: %zd", r);
  }
  return NULL;
}

static void start_sender(struct sender *s) {
  REQUIRE(pthread_create(&s->th, NULL, send_thread, s) == 0, "pthread_create");
}

static int readable(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void test_cq_fd(void) {
  struct fi_cq_attr fa = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_FD};
  struct fi_cq_attr ua = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
  struct fid_cq *cq, *ucq;
  REQUIRE(fi_cq_open(dom, &fa, &cq, NULL) == 0, "FI_WAIT_FD CQ");
  REQUIRE(fi_cq_open(dom, &ua, &ucq, NULL) == 0, "FI_WAIT_UNSPEC CQ");
  int fd = -1, ufd = -1;
  CHECK_RET(fi_control(&cq->fid, FI_GETWAIT, &fd), 0);
  CHECK(fd >= 0, "wait descriptor %d", fd);
  CHECK_RET(fi_control(&ucq->fid, FI_GETWAIT, &ufd), -FI_ENODATA);
  fi_addr_t ra, sa;
  struct fid_ep *rx = open_ep(cq, NULL, NULL, &ra);
  struct fid_ep *tx = open_ep(ucq, NULL, NULL, &sa);

  /* Nothing pending: trywait says sleep, and the descriptor stays quiet. */
  struct fid *fids[] = {&cq->fid};
  CHECK_RET(fi_trywait(fab, fids, 1), 0);
  CHECK(!readable(fd, 100), "descriptor readable with nothing completed");

  /* poll wakes when another thread's message completes a posted receive. */
  uint64_t got[4] = {0};
  struct fi_context c[4];
  CHECK_RET(fi_trecv(rx, &got[0], 8, NULL, FI_ADDR_UNSPEC, 10, 0, &c[0]), 0);
  CHECK_RET(fi_trywait(fab, fids, 1), 0);
  struct sender s = {.ep = tx, .to = ra, .count = 1, .tag = 10};
  start_sender(&s);
  CHECK(readable(fd, (int)T), "poll woke on the completion");
  pthread_join(s.th, NULL);
  struct fi_cq_tagged_entry e;
  CHECK(fi_cq_read(cq, &e, 1) == 1 && e.op_context == &c[0] && got[0] == 10,
        "the completion is there");
  /* Taken: trywait re-arms and the descriptor is quiet again. */
  CHECK_RET(fi_trywait(fab, fids, 1), 0);
  CHECK(!readable(fd, 0), "descriptor still readable after the read");

  /* The same through epoll, several messages. */
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN}, out;
  REQUIRE(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll");
  for (int i = 1; i < 4; i++)
    CHECK_RET(fi_trecv(rx, &got[i], 8, NULL, FI_ADDR_UNSPEC, 20, 0, &c[i]), 0);
  s = (struct sender){.ep = tx, .to = ra, .count = 3, .tag = 20};
  start_sender(&s);
  int n = 0;
  for (double end = now_ms() + T; n < 3 && now_ms() < end;) {
    if (fi_trywait(fab, fids, 1) == 0 && epoll_wait(ep, &out, 1, (int)T) != 1)
      break;
    while (fi_cq_read(cq, &e, 1) == 1)
      n++;
  }
  pthread_join(s.th, NULL);
  CHECK(n == 3 && got[1] + got[2] + got[3] == 20 + 21 + 22, "epoll: %d completions", n);
  close(ep);

  /* fi_cq_signal makes the descriptor readable; trywait consumes it. */
  CHECK_RET(fi_trywait(fab, fids, 1), 0);
  CHECK_RET(fi_cq_signal(cq), 0);
  CHECK(readable(fd, (int)T), "signal wakes a poll");
  CHECK_RET(fi_trywait(fab, fids, 1), -FI_EAGAIN);
  CHECK_RET(fi_trywait(fab, fids, 1), 0);

  /* fi_cq_sread on an FD CQ: the timeout, then a completion from a thread. */
  double t0 = now_ms();
  CHECK_RET(fi_cq_sread(cq, &e, 1, NULL, 100), -FI_EAGAIN);
  CHECK(now_ms() - t0 >= 99, "sread returned before its timeout");
  CHECK_RET(fi_trecv(rx, &got[0], 8, NULL, FI_ADDR_UNSPEC, 30, 0, &c[0]), 0);
  s = (struct sender){.ep = tx, .to = ra, .count = 1, .tag = 30};
  start_sender(&s);
  CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && got[0] == 30, "sread on an FD CQ");
  pthread_join(s.th, NULL);
  /* A signal ends an sread of an FD CQ too. */
  CHECK_RET(fi_cq_signal(cq), 0);
  CHECK_RET(fi_cq_sread(cq, &e, 1, NULL, (int)T), -FI_EAGAIN);

  /* trywait on what has no wait object the application holds. */
  struct fid *ufids[] = {&ucq->fid};
  CHECK_RET(fi_trywait(fab, ufids, 1), -FI_EINVAL);
  CHECK_RET(fi_trywait(fab, NULL, 1), -FI_EINVAL);

  CHECK_RET(fi_close(&rx->fid), 0);
  CHECK_RET(fi_close(&tx->fid), 0);
  CHECK_RET(fi_close(&cq->fid), 0);
  CHECK_RET(fi_close(&ucq->fid), 0);
}

static void test_counters(enum fi_wait_obj wait) {
  struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = wait};
  struct fid_cntr *txc, *rxc;
  REQUIRE(fi_cntr_open(dom, &ca, &txc, NULL) == 0 &&
              fi_cntr_open(dom, &ca, &rxc, NULL) == 0,
          "fi_cntr_open (wait %d)", wait);
  struct fi_cq_attr qa = {.format = FI_CQ_FORMAT_TAGGED};
  struct fid_cq *cq;
  REQUIRE(fi_cq_open(dom, &qa, &cq, NULL) == 0, "cq");
  fi_addr_t ra, sa;
  /* The sender has a counter and no CQ; the receiver both. */
  struct fid_ep *tx = open_ep(NULL, txc, NULL, &sa);
  struct fid_ep *rx = open_ep(cq, NULL, rxc, &ra);
  int fd = -1;
  CHECK_RET(fi_control(&rxc->fid, FI_GETWAIT, &fd), wait == FI_WAIT_FD ? 0 : -FI_ENODATA);

  uint64_t got[3];
  struct fi_context c[3];
  for (int i = 0; i < 3; i++)
    CHECK_RET(fi_trecv(rx, &got[i], 8, NULL, FI_ADDR_UNSPEC, 40, 0, &c[i]), 0);
  struct fid *fids[] = {&rxc->fid};
  if (wait == FI_WAIT_FD)
    CHECK_RET(fi_trywait(fab, fids, 1), 0);
  struct sender s = {.ep = tx, .to = ra, .count = 3, .tag = 40};
  start_sender(&s);
  if (wait == FI_WAIT_FD)
    CHECK(readable(fd, (int)T), "counter descriptor woke");
  CHECK_RET(fi_cntr_wait(rxc, 3, (int)T), 0);
  CHECK(fi_cntr_read(rxc) == 3 && fi_cntr_readerr(rxc) == 0, "rx counter %llu",
        (unsigned long long)fi_cntr_read(rxc));
  pthread_join(s.th, NULL);
  CHECK_RET(fi_cntr_wait(txc, 3, (int)T), 0);
  CHECK(fi_cntr_read(txc) == 3, "tx counter (injects count)");
  /* Threshold not reached: the timeout. */
  double t0 = now_ms();
  CHECK_RET(fi_cntr_wait(rxc, 4, 100), -FI_ETIMEDOUT);
  CHECK(now_ms() - t0 >= 99, "cntr_wait returned before its timeout");
  /* add and set (and a waiter sees them). */
  CHECK_RET(fi_cntr_add(rxc, 2), 0);
  CHECK_RET(fi_cntr_wait(rxc, 5, 0), 0);
  CHECK_RET(fi_cntr_set(rxc, 1), 0);
  CHECK(fi_cntr_read(rxc) == 1, "set");
  /* An error while waiting (a truncated receive) ends the wait: -FI_EAVAIL. */
  struct fi_context cc;
  CHECK_RET(fi_trecv(rx, &got[0], 4, NULL, FI_ADDR_UNSPEC, 99, 0, &cc), 0);
  s = (struct sender){.ep = tx, .to = ra, .count = 1, .tag = 99};
  start_sender(&s);
  CHECK_RET(fi_cntr_wait(rxc, 100, (int)T), -FI_EAVAIL);
  pthread_join(s.th, NULL);
  CHECK(fi_cntr_readerr(rxc) == 1, "error counted");
  struct fi_cq_err_entry ee;
  CHECK(t_wait_err(cq, &ee, T) == 1 && ee.err == FI_ETRUNC, "truncation in the CQ");
  /* A cancelled receive counts as an error too. */
  CHECK_RET(fi_trecv(rx, &got[0], 8, NULL, FI_ADDR_UNSPEC, 98, 0, &cc), 0);
  CHECK_RET(fi_cancel(&rx->fid, &cc), 0);
  CHECK(fi_cntr_readerr(rxc) == 2, "cancel counted");
  CHECK(t_wait_err(cq, &ee, T) == 1 && ee.err == FI_ECANCELED, "cancel in the CQ");
  CHECK_RET(fi_cntr_seterr(rxc, 0), 0);
  CHECK_RET(fi_cntr_adderr(rxc, 2), 0);
  CHECK(fi_cntr_readerr(rxc) == 2, "adderr");
  /* Bad binds. */
  struct fid_ep *ep3;
  REQUIRE(fi_endpoint(dom, info, &ep3, NULL) == 0, "ep3");
  CHECK_RET(fi_ep_bind(ep3, &txc->fid, FI_REMOTE_WRITE), -FI_EINVAL); /* no RMA events */
  CHECK_RET(fi_ep_bind(ep3, &txc->fid, 0), -FI_EINVAL);
  CHECK_RET(fi_close(&ep3->fid), 0);
  CHECK_RET(fi_close(&txc->fid), -FI_EBUSY);
  CHECK_RET(fi_close(&tx->fid), 0);
  CHECK_RET(fi_close(&rx->fid), 0);
  CHECK_RET(fi_close(&txc->fid), 0);
  CHECK_RET(fi_close(&rxc->fid), 0);
  CHECK_RET(fi_close(&cq->fid), 0);
}

/* Polls `ps` until every one of the n contexts was reported (or T passes);
 * returns a bit mask of the ones seen, and checks none is unknown. */
static unsigned poll_until(struct fid_poll *ps, void **want, int n) {
  unsigned seen = 0, all = (1u << n) - 1;
  double deadline = now_ms() + T;
  while (seen != all && now_ms() < deadline) {
    void *ctx[8];
    int r = fi_poll(ps, ctx, 8);
    CHECK(r >= 0, "fi_poll: %d", r);
    for (int i = 0; i < r; i++) {
      int k = 0;
      while (k < n && ctx[i] != want[k])
        k++;
      CHECK(k < n, "fi_poll reported an unexpected context %p", ctx[i]);
      seen |= k < n ? 1u << k : 0;
    }
  }
  return seen;
}

/* Poll sets: CQs reported while they hold completions (errors too), counters
 * once per change, nothing consumed; membership errors and busy closes. */
static void test_poll_set(void) {
  int rxq_ctx, txq_ctx, cntr_ctx;
  struct fi_cq_attr qa = {.format = FI_CQ_FORMAT_TAGGED};
  struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP};
  struct fid_cq *rxq, *txq;
  struct fid_cntr *rxc;
  REQUIRE(fi_cq_open(dom, &qa, &rxq, &rxq_ctx) == 0 &&
              fi_cq_open(dom, &qa, &txq, &txq_ctx) == 0 &&
              fi_cntr_open(dom, &ca, &rxc, &cntr_ctx) == 0,
          "CQs and counter");
  fi_addr_t ra, sa;
  struct fid_ep *rx = open_ep(rxq, NULL, rxc, &ra);
  struct fid_ep *tx = open_ep(txq, NULL, NULL, &sa);
  struct fi_poll_attr pa = {0}, bad = {.flags = 1};
  struct fid_poll *ps;
  CHECK_RET(fi_poll_open(dom, &bad, &ps), -FI_EINVAL);
  REQUIRE(fi_poll_open(dom, &pa, &ps) == 0, "fi_poll_open");
  CHECK_RET(fi_poll_add(ps, &rxq->fid, 0), 0);
  CHECK_RET(fi_poll_add(ps, &txq->fid, 0), 0);
  CHECK_RET(fi_poll_add(ps, &rxc->fid, 0), 0);
  CHECK_RET(fi_poll_add(ps, &rxq->fid, 0), -FI_EALREADY);
  CHECK_RET(fi_poll_add(ps, &av->fid, 0), -FI_EINVAL); /* CQs and counters only */
  CHECK_RET(fi_poll_add(ps, &txq->fid, 1), -FI_EINVAL);
  void *ctx[8];
  CHECK_RET(fi_poll(ps, ctx, 8), 0); /* nothing happened */

  /* One message: the receive CQ, the send CQ and the counter are reported. */
  uint64_t v = 0x5eed, got = 0;
  struct fi_context rc, sc;
  CHECK_RET(fi_trecv(rx, &got, 8, NULL, FI_ADDR_UNSPEC, 7, 0, &rc), 0);
  CHECK_RET(fi_tsend(tx, &v, 8, NULL, ra, 7, &sc), 0);
  void *three[] = {&rxq_ctx, &txq_ctx, &cntr_ctx};
  CHECK(poll_until(ps, three, 3) == 7, "receive CQ, send CQ and counter reported");
  /* Nothing consumed: the CQs stay reported, the counter (unchanged) not. */
  int r = fi_poll(ps, ctx, 8);
  CHECK(r == 2 && ctx[0] != &cntr_ctx && ctx[1] != &cntr_ctx,
        "both CQs again, the counter not: %d", r);
  CHECK_RET(fi_poll(ps, ctx, 1), 1); /* no more than asked for */
  struct fi_cq_tagged_entry e;
  CHECK(t_wait(rxq, &e, NULL, T) == 1 && e.op_context == &rc && got == v, "receive read");
  CHECK(t_wait(txq, &e, NULL, T) == 1 && e.op_context == &sc, "send read");
  CHECK_RET(fi_poll(ps, ctx, 8), 0); /* both read: quiet */

  /* An error completion (a cancelled receive) is reported, with the counter. */
  CHECK_RET(fi_trecv(rx, &got, 8, NULL, FI_ADDR_UNSPEC, 8, 0, &rc), 0);
  CHECK_RET(fi_cancel(&rx->fid, &rc), 0);
  void *two[] = {&rxq_ctx, &cntr_ctx};
  CHECK(poll_until(ps, two, 2) == 3, "error and error count reported");
  struct fi_cq_err_entry ee;
  CHECK(t_wait_err(rxq, &ee, T) == 1 && ee.err == FI_ECANCELED, "cancel read");
  CHECK_RET(fi_poll(ps, ctx, 8), 0);

  /* Members cannot close; fi_poll_del frees them. */
  CHECK_RET(fi_close(&rx->fid), 0);
  CHECK_RET(fi_close(&tx->fid), 0);
  CHECK_RET(fi_close(&rxq->fid), -FI_EBUSY);
  CHECK_RET(fi_close(&rxc->fid), -FI_EBUSY);
  CHECK_RET(fi_poll_del(ps, &rxq->fid, 0), 0);
  CHECK_RET(fi_poll_del(ps, &rxq->fid, 0), -FI_ENOENT);
  CHECK_RET(fi_close(&rxq->fid), 0);
  CHECK_RET(fi_close(&ps->fid), 0); /* releases the others */
  CHECK_RET(fi_close(&txq->fid), 0);
  CHECK_RET(fi_close(&rxc->fid), 0);
}

int main(void) {
  struct fi_info *h = t_hints(FI_TAGGED | FI_MSG);
  h->domain_attr->av_type = FI_AV_TABLE;
  REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info) == 0, "getinfo");
  fi_freeinfo(h);
  CHECK(info->domain_attr->cntr_cnt > 0, "counters advertised");
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  REQUIRE(fi_fabric(info->fabric_attr, &fab, NULL) == 0 &&
              fi_domain(fab, info, &dom, NULL) == 0 &&
              fi_av_open(dom, &aa, &av, NULL) == 0,
          "open");
  test_cq_fd();
  test_counters(FI_WAIT_UNSPEC);
  test_counters(FI_WAIT_FD);
  test_poll_set();
  struct fi_cntr_attr bad = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_MUTEX_COND};
  struct fid_cntr *c;
  CHECK_RET(fi_cntr_open(dom, &bad, &c, NULL), -FI_ENOSYS);
  CHECK_RET(fi_close(&av->fid), 0);
  CHECK_RET(fi_close(&dom->fid), 0);
  CHECK_RET(fi_close(&fab->fid), 0);
  fi_freeinfo(info);
  DONE();
}
