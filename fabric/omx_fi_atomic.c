/* omx_fi_atomic.c - FI_ATOMIC over omx's remote atomics (omx_iatomic, native
 * wire mode only).
 *
 * Atomics name registered memory as RMA does (omx_fi_rma.c): key K, offset O
 * is MX address (K << 32) + O, so a wrong key or a range leaving the region
 * is refused by the target (FI_EACCES) before a byte is read or written.
 * The target's progress applies requests one at a time per process, so
 * concurrent initiators never lose an update; they are not atomic against
 * the target application's own stores (only against other atomics through
 * the provider). Completions: FI_ATOMIC | FI_WRITE (fi_atomic, counted on
 * the write counter), FI_ATOMIC | FI_READ (fetch and compare, read counter).
 * One ioc per operation (rma_iov_limit 1); up to OMX_ATOMIC_MAX_BYTES of
 * operands (omx_atomic_valid gives the count). */
#include "omx_fi.h"

#define OFX_KEY_LIMIT (1ULL << 32)

static const size_t type_size[] = {
    [FI_INT8] = 1,  [FI_UINT8] = 1,  [FI_INT16] = 2, [FI_UINT16] = 2, [FI_INT32] = 4,
    [FI_UINT32] = 4, [FI_INT64] = 8, [FI_UINT64] = 8, [FI_FLOAT] = 4,  [FI_DOUBLE] = 8,
};

/* The largest count of op on dt issued as kind, or 0. */
static size_t valid_count(enum fi_datatype dt, enum fi_op op, uint32_t kind) {
  if ((unsigned)dt >= sizeof type_size / sizeof *type_size)
    return 0;
  return omx_atomic_valid((uint32_t)op, (uint32_t)dt, kind);
}

static ssize_t do_atomic(struct ofx_ep *ep, uint32_t kind, const void *buf, size_t count,
                         const void *compare, void *result, fi_addr_t peer, uint64_t addr,
                         uint64_t key, enum fi_datatype dt, enum fi_op op, uint64_t flags,
                         void *ctx) {
  if (!(ep->caps & FI_ATOMIC))
    return -FI_EOPNOTSUPP;
  size_t max = valid_count(dt, op, kind);
  if (!max)
    return -FI_EOPNOTSUPP;
  if (!count || count > max || key >= OFX_KEY_LIMIT || addr >= OFX_KEY_LIMIT ||
      count * type_size[dt] > OFX_KEY_LIMIT - addr || (flags & FI_REMOTE_CQ_DATA))
    return -FI_EINVAL; /* outside any window the key could name; no CQ data */
  ofx_lock(ep->dom);
  ssize_t ret;
  mx_endpoint_addr_t to;
  if (!ep->enabled) {
    ret = -FI_EOPBADSTATE;
    goto out;
  }
  if ((ret = ofx_get_conn(ep, peer, &to)))
    goto out;
  struct ofx_op *op_rec = ofx_op_get(ep, 0);
  if (!op_rec) {
    ret = -FI_EAGAIN;
    goto out;
  }
  bool fetch = kind != OMX_ATOMIC_PLAIN;
  /* Counted as the RMA direction libfabric gives each kind. */
  op_rec->kind = fetch ? OFX_OP_READ : OFX_OP_WRITE;
  op_rec->ep = ep;
  op_rec->ctx = ctx;
  op_rec->flags = FI_ATOMIC | (fetch ? FI_READ : FI_WRITE);
  op_rec->report =
      !(flags & OFX_NO_COMPLETION) && (!ep->tx_selective || (flags & FI_COMPLETION));
  op_rec->quiet = (flags & OFX_NO_COMPLETION) != 0;
  op_rec->buf = NULL;
  omx_atomic_t a = {.op = (uint32_t)op,
                    .datatype = (uint32_t)dt,
                    .kind = kind,
                    .count = (uint32_t)count,
                    .operand = buf,
                    .compare = compare,
                    .result = result};
  uint64_t remote = (key << 32) + addr;
  mx_return_t rc = omx_iatomic(ep->mx, &a, to, remote, op_rec, &op_rec->req);
  if (rc != MX_SUCCESS) {
    ofx_op_put(ep, op_rec);
    ret = rc == MX_BAD_REQUEST ? -FI_EOPNOTSUPP /* MX wire mode */
          : rc == MX_BAD_SEG_LIST ? -FI_EINVAL
                                  : ofx_errno(rc);
    goto out;
  }
  ofx_op_track(ep, op_rec);
out:
  ofx_unlock(ep->dom);
  return ret;
}

#define EP(e) ((struct ofx_ep *)(e))
#define TX_FLAGS(e) (EP(e)->tx_op_flags & ~FI_REMOTE_CQ_DATA)

/* One ioc (rma_iov_limit 1): its buffer and count, or NULL. */
static const struct fi_ioc *one_ioc(const struct fi_ioc *iov, size_t n) {
  return n == 1 && iov ? iov : NULL;
}

static ssize_t at_write(struct fid_ep *e, const void *buf, size_t count, void *desc,
                        fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                        enum fi_op op, void *ctx) {
  (void)desc;
  return do_atomic(EP(e), OMX_ATOMIC_PLAIN, buf, count, NULL, NULL, dest, addr, key, dt, op,
                   TX_FLAGS(e), ctx);
}
static ssize_t at_writev(struct fid_ep *e, const struct fi_ioc *iov, void **desc, size_t n,
                         fi_addr_t dest, uint64_t addr, uint64_t key, enum fi_datatype dt,
                         enum fi_op op, void *ctx) {
  (void)desc;
  const struct fi_ioc *v = one_ioc(iov, n);
  if (!v)
    return -FI_EINVAL;
  return do_atomic(EP(e), OMX_ATOMIC_PLAIN, v->addr, v->count, NULL, NULL, dest, addr, key,
                   dt, op, TX_FLAGS(e), ctx);
}
/* The one target ioc of a message, matching the operand count. */
static bool msg_ok(const struct fi_msg_atomic *m) {
  return m && one_ioc(m->msg_iov, m->iov_count) && m->rma_iov_count == 1 && m->rma_iov &&
         m->rma_iov[0].count == m->msg_iov[0].count;
}
static ssize_t at_writemsg(struct fid_ep *e, const struct fi_msg_atomic *m, uint64_t flags) {
  if (!msg_ok(m))
    return -FI_EINVAL;
  return do_atomic(EP(e), OMX_ATOMIC_PLAIN, m->msg_iov[0].addr, m->msg_iov[0].count, NULL,
                   NULL, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->datatype, m->op,
                   flags & ~OFX_NO_COMPLETION, m->context);
}
static ssize_t at_inject(struct fid_ep *e, const void *buf, size_t count, fi_addr_t dest,
                         uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op) {
  /* omx_iatomic copies the operands at the call: the buffer is free at once. */
  return do_atomic(EP(e), OMX_ATOMIC_PLAIN, buf, count, NULL, NULL, dest, addr, key, dt, op,
                   FI_INJECT | OFX_NO_COMPLETION, NULL);
}

static ssize_t at_readwrite(struct fid_ep *e, const void *buf, size_t count, void *desc,
                            void *result, void *result_desc, fi_addr_t dest, uint64_t addr,
                            uint64_t key, enum fi_datatype dt, enum fi_op op, void *ctx) {
  (void)desc, (void)result_desc;
  return do_atomic(EP(e), OMX_ATOMIC_FETCH, buf, count, NULL, result, dest, addr, key, dt,
                   op, TX_FLAGS(e), ctx);
}
static ssize_t at_readwritev(struct fid_ep *e, const struct fi_ioc *iov, void **desc,
                             size_t n, struct fi_ioc *resultv, void **result_desc,
                             size_t result_n, fi_addr_t dest, uint64_t addr, uint64_t key,
                             enum fi_datatype dt, enum fi_op op, void *ctx) {
  (void)desc, (void)result_desc;
  const struct fi_ioc *v = one_ioc(iov, n), *r = one_ioc(resultv, result_n);
  if (!v || !r || r->count != v->count)
    return -FI_EINVAL;
  return do_atomic(EP(e), OMX_ATOMIC_FETCH, v->addr, v->count, NULL, r->addr, dest, addr,
                   key, dt, op, TX_FLAGS(e), ctx);
}
static ssize_t at_readwritemsg(struct fid_ep *e, const struct fi_msg_atomic *m,
                               struct fi_ioc *resultv, void **result_desc, size_t result_n,
                               uint64_t flags) {
  (void)result_desc;
  const struct fi_ioc *r = one_ioc(resultv, result_n);
  if (!msg_ok(m) || !r || r->count != m->msg_iov[0].count)
    return -FI_EINVAL;
  return do_atomic(EP(e), OMX_ATOMIC_FETCH, m->msg_iov[0].addr, m->msg_iov[0].count, NULL,
                   r->addr, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key, m->datatype,
                   m->op, flags & ~OFX_NO_COMPLETION, m->context);
}

static ssize_t at_compwrite(struct fid_ep *e, const void *buf, size_t count, void *desc,
                            const void *compare, void *compare_desc, void *result,
                            void *result_desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                            enum fi_datatype dt, enum fi_op op, void *ctx) {
  (void)desc, (void)compare_desc, (void)result_desc;
  return do_atomic(EP(e), OMX_ATOMIC_COMPARE, buf, count, compare, result, dest, addr, key,
                   dt, op, TX_FLAGS(e), ctx);
}
static ssize_t at_compwritev(struct fid_ep *e, const struct fi_ioc *iov, void **desc,
                             size_t n, const struct fi_ioc *comparev, void **compare_desc,
                             size_t compare_n, struct fi_ioc *resultv, void **result_desc,
                             size_t result_n, fi_addr_t dest, uint64_t addr, uint64_t key,
                             enum fi_datatype dt, enum fi_op op, void *ctx) {
  (void)desc, (void)compare_desc, (void)result_desc;
  const struct fi_ioc *v = one_ioc(iov, n), *c = one_ioc(comparev, compare_n),
                      *r = one_ioc(resultv, result_n);
  if (!v || !c || !r || c->count != v->count || r->count != v->count)
    return -FI_EINVAL;
  return do_atomic(EP(e), OMX_ATOMIC_COMPARE, v->addr, v->count, c->addr, r->addr, dest,
                   addr, key, dt, op, TX_FLAGS(e), ctx);
}
static ssize_t at_compwritemsg(struct fid_ep *e, const struct fi_msg_atomic *m,
                               const struct fi_ioc *comparev, void **compare_desc,
                               size_t compare_n, struct fi_ioc *resultv, void **result_desc,
                               size_t result_n, uint64_t flags) {
  (void)compare_desc, (void)result_desc;
  const struct fi_ioc *c = one_ioc(comparev, compare_n), *r = one_ioc(resultv, result_n);
  if (!msg_ok(m) || !c || !r || c->count != m->msg_iov[0].count ||
      r->count != m->msg_iov[0].count)
    return -FI_EINVAL;
  return do_atomic(EP(e), OMX_ATOMIC_COMPARE, m->msg_iov[0].addr, m->msg_iov[0].count,
                   c->addr, r->addr, m->addr, m->rma_iov[0].addr, m->rma_iov[0].key,
                   m->datatype, m->op, flags & ~OFX_NO_COMPLETION, m->context);
}

static int answer_valid(size_t max, size_t *count) {
  if (!max)
    return -FI_EOPNOTSUPP;
  if (count)
    *count = max;
  return 0;
}
static int at_writevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op,
                         size_t *count) {
  (void)e;
  return answer_valid(valid_count(dt, op, OMX_ATOMIC_PLAIN), count);
}
static int at_readwritevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op,
                             size_t *count) {
  (void)e;
  return answer_valid(valid_count(dt, op, OMX_ATOMIC_FETCH), count);
}
static int at_compwritevalid(struct fid_ep *e, enum fi_datatype dt, enum fi_op op,
                             size_t *count) {
  (void)e;
  return answer_valid(valid_count(dt, op, OMX_ATOMIC_COMPARE), count);
}

/* fi_query_atomic: FI_FETCH_ATOMIC or FI_COMPARE_ATOMIC in flags pick the kind. */
int ofx_query_atomic(struct fid_domain *d, enum fi_datatype dt, enum fi_op op,
                     struct fi_atomic_attr *attr, uint64_t flags) {
  (void)d;
  if (!attr || (flags & FI_FETCH_ATOMIC && flags & FI_COMPARE_ATOMIC))
    return -FI_EINVAL;
  uint32_t kind = (flags & FI_COMPARE_ATOMIC) ? OMX_ATOMIC_COMPARE
                  : (flags & FI_FETCH_ATOMIC) ? OMX_ATOMIC_FETCH
                                              : OMX_ATOMIC_PLAIN;
  size_t max = valid_count(dt, op, kind);
  if (!max)
    return -FI_EOPNOTSUPP;
  attr->size = type_size[dt];
  attr->count = max;
  return 0;
}

struct fi_ops_atomic ofx_atomic_ops = {
    .size = sizeof(struct fi_ops_atomic),
    .write = at_write,
    .writev = at_writev,
    .writemsg = at_writemsg,
    .inject = at_inject,
    .readwrite = at_readwrite,
    .readwritev = at_readwritev,
    .readwritemsg = at_readwritemsg,
    .compwrite = at_compwrite,
    .compwritev = at_compwritev,
    .compwritemsg = at_compwritemsg,
    .writevalid = at_writevalid,
    .readwritevalid = at_readwritevalid,
    .compwritevalid = at_compwritevalid,
};
