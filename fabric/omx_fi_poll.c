/* omx_fi_poll.c - poll sets (fi_poll_open): one non-blocking look at several
 * CQs and counters of a domain. fi_poll progresses each member (as a read
 * would) and returns the context of every CQ holding a completion or an
 * error, and of every counter whose value or error count changed since the
 * previous fi_poll of the set. Nothing is consumed: the application reads
 * the CQs and counters it is told about. */
#include "omx_fi.h"

#include <stdlib.h>

struct ofx_poll_member {
  struct fid *fid;
  uint64_t seen; /* counters: value + errors at the last fi_poll */
};

struct ofx_poll {
  struct fid_poll fid;
  struct ofx_domain *dom;
  struct ofx_poll_member *m;
  size_t n;
};

/* The domain and the membership count of a CQ or counter; NULL for others. */
static int *member_refs(struct fid *f, struct ofx_domain **dom) {
  if (f->fclass == FI_CLASS_CQ) {
    struct ofx_cq *cq = (struct ofx_cq *)f;
    *dom = cq->dom;
    return &cq->polls;
  }
  if (f->fclass == FI_CLASS_CNTR) {
    struct ofx_cntr *c = (struct ofx_cntr *)f;
    *dom = c->dom;
    return &c->polls;
  }
  return NULL;
}

static int poll_poll(struct fid_poll *fp, void **context, int count) {
  struct ofx_poll *p = (struct ofx_poll *)fp;
  if (count < 0 || (count && !context))
    return -FI_EINVAL;
  int n = 0;
  ofx_lock(p->dom);
  for (size_t i = 0; i < p->n && n < count; i++) {
    struct ofx_poll_member *m = &p->m[i];
    if (m->fid->fclass == FI_CLASS_CQ) {
      if (ofx_cq_ready_locked((struct ofx_cq *)m->fid))
        context[n++] = m->fid->context;
    } else {
      uint64_t events = ofx_cntr_events_locked((struct ofx_cntr *)m->fid);
      if (events != m->seen) {
        m->seen = events;
        context[n++] = m->fid->context;
      }
    }
  }
  ofx_unlock(p->dom);
  return n;
}

static int poll_add(struct fid_poll *fp, struct fid *event_fid,
                    uint64_t flags) {
  struct ofx_poll *p = (struct ofx_poll *)fp;
  struct ofx_domain *dom;
  int *refs = event_fid ? member_refs(event_fid, &dom) : NULL;
  if (flags || !refs || dom != p->dom)
    return -FI_EINVAL; /* CQs and counters of the set's domain only */
  ofx_lock(p->dom);
  int ret = 0;
  for (size_t i = 0; i < p->n; i++)
    if (p->m[i].fid == event_fid)
      ret = -FI_EALREADY;
  struct ofx_poll_member *m = NULL;
  if (!ret && !(m = realloc(p->m, (p->n + 1) * sizeof *m)))
    ret = -FI_ENOMEM;
  if (!ret) {
    p->m = m;
    /* a counter reports changes from now on */
    uint64_t seen = event_fid->fclass == FI_CLASS_CNTR
                        ? ofx_cntr_events_locked((struct ofx_cntr *)event_fid)
                        : 0;
    p->m[p->n++] = (struct ofx_poll_member){event_fid, seen};
    (*refs)++;
  }
  ofx_unlock(p->dom);
  return ret;
}

static int poll_del(struct fid_poll *fp, struct fid *event_fid,
                    uint64_t flags) {
  struct ofx_poll *p = (struct ofx_poll *)fp;
  if (flags || !event_fid)
    return -FI_EINVAL;
  ofx_lock(p->dom);
  int ret = -FI_ENOENT;
  for (size_t i = 0; i < p->n; i++)
    if (p->m[i].fid == event_fid) {
      struct ofx_domain *dom;
      (*member_refs(event_fid, &dom))--;
      p->m[i] = p->m[--p->n];
      ret = 0;
      break;
    }
  ofx_unlock(p->dom);
  return ret;
}

static int poll_close(struct fid *fid) {
  struct ofx_poll *p = (struct ofx_poll *)fid;
  struct ofx_domain *d = p->dom;
  ofx_lock(d);
  for (size_t i = 0; i < p->n; i++) {
    struct ofx_domain *dom;
    (*member_refs(p->m[i].fid, &dom))--;
  }
  d->refs--;
  ofx_unlock(d);
  free(p->m);
  free(p);
  return 0;
}

static int poll_bind(struct fid *fid, struct fid *bfid, uint64_t flags) {
  (void)fid, (void)bfid, (void)flags;
  return -FI_ENOSYS;
}

static int poll_control(struct fid *fid, int command, void *arg) {
  (void)fid, (void)command, (void)arg;
  return -FI_ENOSYS;
}

static int poll_ops_open(struct fid *fid, const char *name, uint64_t flags,
                         void **ops, void *context) {
  (void)fid, (void)name, (void)flags, (void)ops, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops poll_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = poll_close,
    .bind = poll_bind,
    .control = poll_control,
    .ops_open = poll_ops_open,
};

static struct fi_ops_poll poll_ops = {
    .size = sizeof(struct fi_ops_poll),
    .poll = poll_poll,
    .poll_add = poll_add,
    .poll_del = poll_del,
};

int ofx_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr,
                  struct fid_poll **pollset) {
  if (!domain || !pollset || (attr && attr->flags))
    return -FI_EINVAL;
  struct ofx_domain *d = (struct ofx_domain *)domain;
  struct ofx_poll *p = calloc(1, sizeof *p);
  if (!p)
    return -FI_ENOMEM;
  p->fid.fid.fclass = FI_CLASS_POLL;
  p->fid.fid.ops = &poll_fi_ops;
  p->fid.ops = &poll_ops;
  p->dom = d;
  ofx_lock(d);
  d->refs++;
  ofx_unlock(d);
  *pollset = &p->fid;
  return 0;
}
