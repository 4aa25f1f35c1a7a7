/* omx_fi_cq.c - completion queues. A CQ holds completions already taken
 * from MX (a FIFO of successes, one of errors); reading it first drains the
 * MX completions of every endpoint bound to it. Blocking reads sleep without
 * the provider lock: in MX (mx_peek), or for an FI_WAIT_FD CQ on its wait
 * object (omx_fi_wait.c), the descriptor FI_GETWAIT hands out. */
#include "omx_fi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int q_push(struct ofx_queue *q, const struct ofx_cqe *e) {
  if (q->count == q->cap) {
    size_t cap = q->cap ? q->cap * 2 : 256;
    struct ofx_cqe *n = malloc(cap * sizeof *n);
    if (!n)
      return -FI_ENOMEM;
    for (size_t i = 0; i < q->count; i++)
      n[i] = q->e[(q->head + i) % q->cap];
    free(q->e);
    q->e = n;
    q->head = 0;
    q->cap = cap;
  }
  q->e[(q->head + q->count) % q->cap] = *e;
  q->count++;
  return 0;
}

static struct ofx_cqe *q_front(struct ofx_queue *q) {
  return q->count ? &q->e[q->head] : NULL;
}

static void q_pop(struct ofx_queue *q) {
  q->head = (q->head + 1) % q->cap;
  q->count--;
}

int ofx_cq_push(struct ofx_cq *cq, const struct ofx_cqe *e) {
  return q_push(e->err ? &cq->errs : &cq->ok, e);
}

int ofx_cq_attach(struct ofx_cq *cq, struct ofx_ep *ep) {
  for (size_t i = 0; i < cq->neps; i++)
    if (cq->eps[i] == ep)
      return 0; /* bound for both directions */
  struct ofx_ep **n = realloc(cq->eps, (cq->neps + 1) * sizeof *n);
  if (!n)
    return -FI_ENOMEM;
  cq->eps = n;
  cq->eps[cq->neps++] = ep;
  return 0;
}

void ofx_cq_detach(struct ofx_cq *cq, struct ofx_ep *ep) {
  for (size_t i = 0; i < cq->neps; i++)
    if (cq->eps[i] == ep) {
      cq->eps[i] = cq->eps[--cq->neps];
      return;
    }
}

static size_t entry_size(enum fi_cq_format f) {
  switch (f) {
  case FI_CQ_FORMAT_CONTEXT:
    return sizeof(struct fi_cq_entry);
  case FI_CQ_FORMAT_MSG:
    return sizeof(struct fi_cq_msg_entry);
  case FI_CQ_FORMAT_DATA:
    return sizeof(struct fi_cq_data_entry);
  case FI_CQ_FORMAT_TAGGED:
    return sizeof(struct fi_cq_tagged_entry);
  default:
    return 0;
  }
}

static void write_entry(enum fi_cq_format f, void *out,
                        const struct ofx_cqe *e) {
  switch (f) {
  case FI_CQ_FORMAT_CONTEXT: {
    struct fi_cq_entry *c = out;
    c->op_context = e->ctx;
    break;
  }
  case FI_CQ_FORMAT_MSG: {
    struct fi_cq_msg_entry *c = out;
    c->op_context = e->ctx;
    c->flags = e->flags;
    c->len = e->len;
    break;
  }
  case FI_CQ_FORMAT_DATA: {
    struct fi_cq_data_entry *c = out;
    c->op_context = e->ctx;
    c->flags = e->flags;
    c->len = e->len;
    c->buf = e->buf;
    c->data = e->data;
    break;
  }
  default: {
    struct fi_cq_tagged_entry *c = out;
    c->op_context = e->ctx;
    c->flags = e->flags;
    c->len = e->len;
    c->buf = e->buf;
    c->data = e->data;
    c->tag = e->tag;
    break;
  }
  }
}

/* Takes completions from MX until `want` entries wait in the CQ or MX has
 * no more. `polled`: the MX endpoint whose network the caller polls itself
 * (its wait in MX), taken without a pass of its own, or NULL. */
static void progress_after(struct ofx_cq *cq, size_t want, mx_endpoint_t polled) {
  for (size_t i = 0; i < cq->neps; i++) {
    size_t have = cq->ok.count + cq->errs.count;
    if (have >= want)
      return;
    ofx_ep_progress(cq->eps[i], want - have, polled && cq->eps[i]->mx == polled);
  }
}

static void progress(struct ofx_cq *cq, size_t want) {
  progress_after(cq, want, NULL);
}

/* Under the lock: completions into buf (and their sources), -FI_EAVAIL when
 * an error waits, -FI_EAGAIN when there is nothing. `polled` as for
 * progress_after. */
static ssize_t read_locked(struct ofx_cq *cq, void *buf, size_t count,
                           fi_addr_t *src, mx_endpoint_t polled) {
  progress_after(cq, count, polled);
  if (cq->errs.count)
    return -FI_EAVAIL;
  size_t sz = entry_size(cq->format), n = 0;
  struct ofx_cqe *e;
  while (n < count && (e = q_front(&cq->ok))) {
    write_entry(cq->format, (char *)buf + n * sz, e);
    if (src)
      src[n] = e->src;
    q_pop(&cq->ok);
    n++;
  }
  return n ? (ssize_t)n : -FI_EAGAIN;
}

static ssize_t cq_readfrom(struct fid_cq *fcq, void *buf, size_t count,
                           fi_addr_t *src) {
  struct ofx_cq *cq = (struct ofx_cq *)fcq;
  if (!fcq || (count && !buf))
    return -FI_EINVAL;
  if (!count)
    return 0;
  ofx_lock(cq->dom);
  ssize_t n = read_locked(cq, buf, count, src, NULL);
  ofx_unlock(cq->dom);
  return n;
}

static ssize_t cq_read(struct fid_cq *fcq, void *buf, size_t count) {
  return cq_readfrom(fcq, buf, count, NULL);
}

static ssize_t cq_readerr(struct fid_cq *fcq, struct fi_cq_err_entry *buf,
                          uint64_t flags) {
  struct ofx_cq *cq = (struct ofx_cq *)fcq;
  if (!fcq || !buf || flags)
    return -FI_EINVAL;
  ofx_lock(cq->dom);
  progress(cq, SIZE_MAX);
  struct ofx_cqe *e = q_front(&cq->errs);
  if (!e) {
    ofx_unlock(cq->dom);
    return -FI_EAGAIN;
  }
  /* err_data_size in: room the caller gives (API >= 1.5); we have none. */
  buf->op_context = e->ctx;
  buf->flags = e->flags;
  buf->len = e->len;
  buf->buf = e->buf;
  buf->data = e->data;
  buf->tag = e->tag;
  buf->olen = e->olen;
  buf->err = e->err;
  buf->prov_errno = e->prov_errno;
  buf->err_data_size = 0;
  q_pop(&cq->errs);
  ofx_unlock(cq->dom);
  return 1;
}

/* Under the lock: -FI_EAGAIN when completions (or a signal) wait or work is
 * under way, 0 when the caller may sleep on the wait object: the endpoints
 * are armed first, then drained, so nothing completes unnoticed. */
static int trywait_locked(struct ofx_cq *cq) {
  ofx_wait_clear_signal(&cq->wait);
  bool safe = ofx_arm_eps(cq->eps, cq->neps);
  progress(cq, SIZE_MAX);
  if (cq->signaled) {
    cq->signaled = false; /* the poll it woke has seen it */
    return -FI_EAGAIN;
  }
  if (cq->ok.count || cq->errs.count || !safe)
    return -FI_EAGAIN;
  return 0;
}

/* Under the lock, for poll sets: progresses as a read would; true when a
 * completion or an error waits. */
bool ofx_cq_ready_locked(struct ofx_cq *cq) {
  progress(cq, 1);
  return cq->ok.count || cq->errs.count;
}

int ofx_cq_trywait(struct ofx_cq *cq) {
  if (cq->wait_obj != FI_WAIT_FD)
    return -FI_EINVAL; /* fi_trywait is for wait objects the application holds */
  ofx_lock(cq->dom);
  int ret = trywait_locked(cq);
  ofx_unlock(cq->dom);
  return ret;
}

static ssize_t cq_sreadfrom(struct fid_cq *fcq, void *buf, size_t count,
                            fi_addr_t *src, const void *cond, int timeout) {
  struct ofx_cq *cq = (struct ofx_cq *)fcq;
  (void)cond; /* FI_CQ_COND_NONE only: one completion is enough */
  if (!fcq || (count && !buf))
    return -FI_EINVAL;
  if (!count)
    return 0;
  double deadline = timeout < 0 ? -1 : ofx_now_ms() + timeout;
  for (;;) {
    ofx_lock(cq->dom);
    /* Wait in MX on the first enabled endpoint; with several endpoints wake
     * often to look at the others. */
    mx_endpoint_t mx = NULL;
    for (size_t i = 0; i < cq->neps && !mx; i++)
      mx = cq->eps[i]->enabled ? cq->eps[i]->mx : NULL;
    /* That endpoint's network is polled by the wait (mx_peek returns at once
     * when something completed): the read takes only what completed there,
     * saving a progress pass (~800 instructions) per blocking read. A CQ
     * with a wait object, or no time to wait, polls in the read. */
    bool waits_in_mx = timeout != 0 && cq->wait_obj != FI_WAIT_FD;
    ssize_t n = read_locked(cq, buf, count, src, waits_in_mx ? mx : NULL);
    /* fi_cq_signal ends a wait on an empty queue (a signal is kept until then) */
    bool signaled = n == -FI_EAGAIN && cq->signaled;
    if (signaled)
      cq->signaled = false;
    size_t neps = cq->neps;
    /* An FI_WAIT_FD CQ sleeps on its own wait object, however many endpoints. */
    int fd_wait = 1; /* 1: not an FD CQ, 0: sleep, -FI_EAGAIN: nap, 2: read again */
    if (n == -FI_EAGAIN && !signaled && cq->wait_obj == FI_WAIT_FD) {
      fd_wait = trywait_locked(cq);
      if (fd_wait && (cq->ok.count || cq->errs.count || cq->signaled))
        fd_wait = 2;
    }
    ofx_unlock(cq->dom);
    if (n != -FI_EAGAIN || signaled)
      return n;
    if (fd_wait == 2)
      continue;
    if (fd_wait != 1) {
      int left_ms = ofx_left_ms(deadline);
      if (left_ms == 0)
        return -FI_EAGAIN;
      ofx_wait_sleep(&cq->wait, fd_wait == 0, left_ms);
      continue;
    }
    double left = deadline < 0 ? 1e9 : deadline - ofx_now_ms();
    if (left <= 0)
      return -FI_EAGAIN;
    uint32_t slice = neps > 1 ? 5 : 100;
    if (left < slice)
      slice = left < 1 ? 1 : (uint32_t)left;
    if (mx) {
      mx_request_t req;
      uint32_t result = 0;
      if (mx_peek(mx, slice, &req, &result) != MX_SUCCESS) {
        struct timespec ts = {0, 1000000L};
        nanosleep(&ts, NULL);
      }
    } else {
      struct timespec ts = {slice / 1000, (long)(slice % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

static ssize_t cq_sread(struct fid_cq *fcq, void *buf, size_t count,
                        const void *cond, int timeout) {
  return cq_sreadfrom(fcq, buf, count, NULL, cond, timeout);
}

static int cq_signal(struct fid_cq *fcq) {
  struct ofx_cq *cq = (struct ofx_cq *)fcq;
  if (!fcq)
    return -FI_EINVAL;
  ofx_lock(cq->dom);
  cq->signaled = true;
  ofx_wait_signal(&cq->wait);
  for (size_t i = 0; i < cq->neps; i++)
    if (cq->eps[i]->enabled)
      mx_wakeup(cq->eps[i]->mx);
  ofx_unlock(cq->dom);
  return 0;
}

static const char *cq_strerror(struct fid_cq *cq, int prov_errno,
                               const void *err_data, char *buf, size_t len) {
  (void)cq, (void)err_data;
  const char *s = mx_strstatus((mx_status_code_t)prov_errno);
  if (buf && len) {
    snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}

static struct fi_ops_cq cq_ops = {
    .size = sizeof(struct fi_ops_cq),
    .read = cq_read,
    .readfrom = cq_readfrom,
    .readerr = cq_readerr,
    .sread = cq_sread,
    .sreadfrom = cq_sreadfrom,
    .signal = cq_signal,
    .strerror = cq_strerror,
};

static int cq_close(struct fid *fid) {
  struct ofx_cq *cq = (struct ofx_cq *)fid;
  struct ofx_domain *d = cq->dom;
  ofx_lock(d);
  if (cq->neps || cq->polls) {
    ofx_unlock(d);
    return -FI_EBUSY;
  }
  d->refs--;
  ofx_unlock(d);
  ofx_wait_fini(&cq->wait);
  free(cq->ok.e);
  free(cq->errs.e);
  free(cq->eps);
  free(cq);
  return 0;
}

static int cq_bind(struct fid *fid, struct fid *bfid, uint64_t flags) {
  (void)fid, (void)bfid, (void)flags;
  return -FI_ENOSYS;
}

static int cq_control(struct fid *fid, int command, void *arg) {
  struct ofx_cq *cq = (struct ofx_cq *)fid;
  if (command != FI_GETWAIT)
    return -FI_ENOSYS;
  if (!arg)
    return -FI_EINVAL;
  if (cq->wait_obj != FI_WAIT_FD)
    return -FI_ENODATA; /* MX's own sleep: nothing to hand out */
  *(int *)arg = cq->wait.epfd;
  return 0;
}

static int cq_ops_open(struct fid *fid, const char *name, uint64_t flags,
                       void **ops, void *context) {
  (void)fid, (void)name, (void)flags, (void)ops, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops cq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = cq_close,
    .bind = cq_bind,
    .control = cq_control,
    .ops_open = cq_ops_open,
};

int ofx_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
                struct fid_cq **fcq, void *context) {
  struct ofx_domain *d = (struct ofx_domain *)domain;
  if (!domain || !attr || !fcq)
    return -FI_EINVAL;
  enum fi_cq_format f =
      attr->format == FI_CQ_FORMAT_UNSPEC ? FI_CQ_FORMAT_TAGGED : attr->format;
  if (!entry_size(f))
    return -FI_ENOSYS;
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC &&
      attr->wait_obj != FI_WAIT_FD)
    return -FI_ENOSYS;
  if (attr->wait_cond != FI_CQ_COND_NONE || attr->flags)
    return -FI_ENOSYS;
  struct ofx_cq *cq = calloc(1, sizeof *cq);
  if (!cq)
    return -FI_ENOMEM;
  cq->fid.fid.fclass = FI_CLASS_CQ;
  cq->fid.fid.context = context;
  cq->fid.fid.ops = &cq_fi_ops;
  cq->fid.ops = &cq_ops;
  cq->dom = d;
  cq->format = f;
  cq->wait_obj = attr->wait_obj;
  cq->wait.epfd = cq->wait.sigfd = -1;
  if (attr->wait_obj == FI_WAIT_FD && ofx_wait_init(&cq->wait)) {
    free(cq);
    return -FI_ENOMEM;
  }
  ofx_lock(d);
  d->refs++;
  ofx_unlock(d);
  *fcq = &cq->fid;
  return 0;
}
