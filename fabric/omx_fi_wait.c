/* omx_fi_wait.c - wait objects and counters.
 *
 * A wait object (FI_WAIT_FD CQs, every counter) is an epoll set holding the
 * notify descriptor of each endpoint bound to the CQ or counter (MX extension
 * omx_endpoint_notify_fd) and an eventfd of its own for fi_cq_signal. Before
 * sleeping, a waiter arms the endpoints (omx_endpoint_arm_notify), then looks
 * for completions: one that happens after the arming rings the endpoint's
 * descriptor, whichever thread makes it (MX's progress thread while the
 * application sleeps), so poll/epoll on the set wakes without spinning.
 * fi_trywait is exactly that arming and looking. */
#include "omx_fi.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* ---- wait objects ---- */

int ofx_wait_init(struct ofx_wait *w) {
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  w->sigfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  struct epoll_event ev = {.events = EPOLLIN};
  if (w->epfd < 0 || w->sigfd < 0 ||
      epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->sigfd, &ev) != 0) {
    ofx_wait_fini(w);
    return -FI_ENOMEM;
  }
  return 0;
}

void ofx_wait_fini(struct ofx_wait *w) {
  if (w->epfd >= 0)
    close(w->epfd);
  if (w->sigfd >= 0)
    close(w->sigfd);
  w->epfd = w->sigfd = -1;
}

/* Adds (on) or removes (off) an enabled endpoint's notify descriptor. */
int ofx_wait_watch(struct ofx_wait *w, struct ofx_ep *ep, bool on) {
  int fd;
  if (w->epfd < 0 || !ep->enabled)
    return 0;
  if (omx_endpoint_notify_fd(ep->mx, &fd) != MX_SUCCESS)
    return -FI_ENOMEM;
  struct epoll_event ev = {.events = EPOLLIN};
  if (epoll_ctl(w->epfd, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, fd, &ev) != 0 &&
      on && errno != EEXIST)
    return -FI_EIO;
  return 0;
}

void ofx_wait_signal(struct ofx_wait *w) {
  uint64_t one = 1;
  if (w->sigfd >= 0 && write(w->sigfd, &one, sizeof one) != sizeof one)
    return; /* the counter saturated: it is readable anyway */
}

void ofx_wait_clear_signal(struct ofx_wait *w) {
  uint64_t v;
  if (w->sigfd >= 0 && read(w->sigfd, &v, sizeof v) != sizeof v)
    return; /* nothing was signalled */
}

/* Arms every enabled endpoint of eps: true when all may be slept on. */
bool ofx_arm_eps(struct ofx_ep **eps, size_t n) {
  bool safe = true;
  for (size_t i = 0; i < n; i++)
    if (eps[i]->enabled && omx_endpoint_arm_notify(eps[i]->mx) != MX_SUCCESS)
      safe = false;
  return safe;
}

/* Sleeps on the set until it is readable or timeout_ms (-1: no limit), without
 * the lock. safe == false (work under way that rings nothing): a short nap. */
void ofx_wait_sleep(struct ofx_wait *w, bool safe, int timeout_ms) {
  if (!safe) {
    struct timespec ts = {0, 50000L};
    nanosleep(&ts, NULL);
    return;
  }
  struct pollfd p = {.fd = w->epfd, .events = POLLIN};
  poll(&p, 1, timeout_ms);
}

double ofx_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Milliseconds left before deadline (< 0: none) as a poll timeout. */
int ofx_left_ms(double deadline) {
  if (deadline < 0)
    return -1;
  double left = deadline - ofx_now_ms();
  return left <= 0 ? 0 : (int)left + 1;
}

/* ---- counters ---- */

static void cntr_progress(struct ofx_cntr *c) {
  for (size_t i = 0; i < c->neps; i++)
    ofx_ep_progress(c->eps[i], SIZE_MAX, false);
}

/* Under the lock, for poll sets: progressed value plus error count, which
 * changes with every event. */
uint64_t ofx_cntr_events_locked(struct ofx_cntr *c) {
  cntr_progress(c);
  return c->value + c->errs;
}

static uint64_t cntr_read(struct fid_cntr *fc) {
  struct ofx_cntr *c = (struct ofx_cntr *)fc;
  ofx_lock(c->dom);
  cntr_progress(c);
  uint64_t v = c->value;
  ofx_unlock(c->dom);
  return v;
}

static uint64_t cntr_readerr(struct fid_cntr *fc) {
  struct ofx_cntr *c = (struct ofx_cntr *)fc;
  ofx_lock(c->dom);
  cntr_progress(c);
  uint64_t v = c->errs;
  ofx_unlock(c->dom);
  return v;
}

static int cntr_update(struct fid_cntr *fc, uint64_t v, bool err, bool set) {
  struct ofx_cntr *c = (struct ofx_cntr *)fc;
  ofx_lock(c->dom);
  uint64_t *target = err ? &c->errs : &c->value;
  *target = set ? v : *target + v;
  ofx_unlock(c->dom);
  ofx_wait_signal(&c->wait); /* a waiter looks again */
  return 0;
}
static int cntr_add(struct fid_cntr *c, uint64_t v) { return cntr_update(c, v, false, false); }
static int cntr_set(struct fid_cntr *c, uint64_t v) { return cntr_update(c, v, false, true); }
static int cntr_adderr(struct fid_cntr *c, uint64_t v) { return cntr_update(c, v, true, false); }
static int cntr_seterr(struct fid_cntr *c, uint64_t v) { return cntr_update(c, v, true, true); }

/* Under the lock: 1 when the wait is over (threshold reached or an error
 * counted), 0 when it is safe to sleep, -1 when the caller should look again
 * soon (work under way). */
static int cntr_check(struct ofx_cntr *c, uint64_t threshold, uint64_t errs0) {
  cntr_progress(c);
  if (c->value >= threshold || c->errs != errs0)
    return 1;
  ofx_wait_clear_signal(&c->wait);
  bool safe = ofx_arm_eps(c->eps, c->neps);
  cntr_progress(c); /* completions from before the arming */
  if (c->value >= threshold || c->errs != errs0)
    return 1;
  return safe ? 0 : -1;
}

static int cntr_wait(struct fid_cntr *fc, uint64_t threshold, int timeout) {
  struct ofx_cntr *c = (struct ofx_cntr *)fc;
  double deadline = timeout < 0 ? -1 : ofx_now_ms() + timeout;
  ofx_lock(c->dom);
  uint64_t errs0 = c->errs;
  ofx_unlock(c->dom);
  for (;;) {
    ofx_lock(c->dom);
    int st = cntr_check(c, threshold, errs0);
    bool err = c->errs != errs0;
    ofx_unlock(c->dom);
    if (st == 1)
      return err ? -FI_EAVAIL : 0;
    int left = ofx_left_ms(deadline);
    if (left == 0)
      return -FI_ETIMEDOUT;
    ofx_wait_sleep(&c->wait, st == 0, left);
  }
}

static struct fi_ops_cntr cntr_ops = {
    .size = sizeof(struct fi_ops_cntr),
    .read = cntr_read,
    .readerr = cntr_readerr,
    .add = cntr_add,
    .set = cntr_set,
    .wait = cntr_wait,
    .adderr = cntr_adderr,
    .seterr = cntr_seterr,
};

/* Under the lock: counts one completion of an operation of ep. */
void ofx_cntr_count(struct ofx_cntr *c, bool err) {
  if (!c)
    return;
  if (err)
    c->errs++;
  else
    c->value++;
}

int ofx_cntr_attach(struct ofx_cntr *c, struct ofx_ep *ep) {
  for (size_t i = 0; i < c->neps; i++)
    if (c->eps[i] == ep)
      return 0;
  struct ofx_ep **n = realloc(c->eps, (c->neps + 1) * sizeof *n);
  if (!n)
    return -FI_ENOMEM;
  c->eps = n;
  c->eps[c->neps++] = ep;
  return 0;
}

void ofx_cntr_detach(struct ofx_cntr *c, struct ofx_ep *ep) {
  for (size_t i = 0; i < c->neps; i++)
    if (c->eps[i] == ep) {
      c->eps[i] = c->eps[--c->neps];
      return;
    }
}

static int cntr_close(struct fid *fid) {
  struct ofx_cntr *c = (struct ofx_cntr *)fid;
  struct ofx_domain *d = c->dom;
  ofx_lock(d);
  if (c->neps || c->polls) {
    ofx_unlock(d);
    return -FI_EBUSY;
  }
  d->refs--;
  ofx_unlock(d);
  ofx_wait_fini(&c->wait);
  free(c->eps);
  free(c);
  return 0;
}

static int cntr_bind(struct fid *fid, struct fid *bfid, uint64_t flags) {
  (void)fid, (void)bfid, (void)flags;
  return -FI_ENOSYS;
}

static int cntr_control(struct fid *fid, int command, void *arg) {
  struct ofx_cntr *c = (struct ofx_cntr *)fid;
  if (command != FI_GETWAIT)
    return -FI_ENOSYS;
  if (!arg)
    return -FI_EINVAL;
  if (c->wait_obj != FI_WAIT_FD)
    return -FI_ENODATA;
  *(int *)arg = c->wait.epfd;
  return 0;
}

static int cntr_ops_open(struct fid *fid, const char *name, uint64_t flags,
                         void **ops, void *context) {
  (void)fid, (void)name, (void)flags, (void)ops, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops cntr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cntr_close,
    .bind = cntr_bind,
    .control = cntr_control,
    .ops_open = cntr_ops_open,
};

int ofx_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
                  struct fid_cntr **fc, void *context) {
  struct ofx_domain *d = (struct ofx_domain *)domain;
  if (!domain || !attr || !fc)
    return -FI_EINVAL;
  if (attr->events != FI_CNTR_EVENTS_COMP || attr->flags)
    return -FI_ENOSYS;
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
      attr->wait_obj != FI_WAIT_FD)
    return -FI_ENOSYS;
  struct ofx_cntr *c = calloc(1, sizeof *c);
  if (!c)
    return -FI_ENOMEM;
  /* Every counter can be waited on (fi_cntr_wait); FI_WAIT_FD hands the set out. */
  if (ofx_wait_init(&c->wait)) {
    free(c);
    return -FI_ENOMEM;
  }
  c->fid.fid.fclass = FI_CLASS_CNTR;
  c->fid.fid.context = context;
  c->fid.fid.ops = &cntr_fi_ops;
  c->fid.ops = &cntr_ops;
  c->dom = d;
  c->wait_obj = attr->wait_obj;
  ofx_lock(d);
  d->refs++;
  ofx_unlock(d);
  *fc = &c->fid;
  return 0;
}

/* ---- fi_trywait ---- */

int ofx_trywait(struct fid_fabric *fabric, struct fid **fids, int count) {
  if (!fabric || (count && !fids) || count < 0)
    return -FI_EINVAL;
  for (int i = 0; i < count; i++) {
    int ret;
    if (!fids[i])
      return -FI_EINVAL;
    switch (fids[i]->fclass) {
    case FI_CLASS_CQ:
      ret = ofx_cq_trywait((struct ofx_cq *)fids[i]);
      break;
    case FI_CLASS_CNTR: {
      struct ofx_cntr *c = (struct ofx_cntr *)fids[i];
      ofx_lock(c->dom);
      /* Anything counted since the last read: the application looks first. */
      uint64_t v = c->value, e = c->errs;
      int st = cntr_check(c, UINT64_MAX, c->errs);
      bool moved = c->value != v || c->errs != e;
      ofx_unlock(c->dom);
      ret = st == 0 && !moved ? 0 : -FI_EAGAIN;
      break;
    }
    default:
      return -FI_EINVAL;
    }
    if (ret)
      return ret;
  }
  return 0;
}
