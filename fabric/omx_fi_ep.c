/* omx_fi_ep.c - RDM endpoints, message and tagged operations.
 *
 * One MX endpoint per fi_endpoint, opened by fi_enable. Every operation is
 * one MX request whose context is a struct ofx_op; completions are taken
 * from MX with mx_test_any and written to the bound CQ. Every message
 * carries a struct ofx_hdr as its first segment (remote CQ data).
 *
 * FI_PEEK needs the header (CQ data) of the message it reports, and
 * FI_CLAIM must later deliver exactly that message: a peek therefore takes
 * messages out of MX into the endpoint's stash, oldest first, up to the one
 * it reports. Everything in the stash is older than what MX still holds, so
 * receives look in the stash first and arrival order is kept.
 */
#include "omx_fi.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

void ofx_op_track(struct ofx_ep *ep, struct ofx_op *op);
static void list_add(struct ofx_ep *ep, struct ofx_op *op) {
  op->next = ep->pending.next;
  op->prev = &ep->pending;
  ep->pending.next->prev = op;
  ep->pending.next = op;
}

static void list_del(struct ofx_op *op) {
  op->prev->next = op->next;
  op->next->prev = op->prev;
}

/* Ops are recycled through a per-endpoint free list (under the provider
 * lock): no allocation on the fast path. Pooled ops have room for the data of
 * a small injected message behind them; larger injections get their own. */
#define OFX_POOL_INLINE 64

static struct ofx_op *op_get(struct ofx_ep *ep, size_t extra) {
  struct ofx_op *op;
  if (extra <= OFX_POOL_INLINE && ep->free_ops) {
    op = ep->free_ops;
    ep->free_ops = op->next;
  } else {
    op = malloc(sizeof *op + (extra <= OFX_POOL_INLINE ? OFX_POOL_INLINE : extra));
    if (!op)
      return NULL;
  }
  op->pooled = extra <= OFX_POOL_INLINE;
  op->multi = op->notify = false;
  return op;
}

static void op_put(struct ofx_ep *ep, struct ofx_op *op) {
  if (op->pooled) {
    op->next = ep->free_ops;
    ep->free_ops = op;
  } else {
    free(op);
  }
}

/* ---- connections ---- */

void ofx_ep_forget_conn(struct ofx_ep *ep, fi_addr_t a) {
  if (a < ep->conn_cap && ep->conn_ok[a]) {
    ep->conn_ok[a] = false;
    if (ep->enabled)
      mx_disconnect(ep->mx, ep->conn[a]);
  }
}

/* The MX address of AV entry `dest`, connecting on first use. */
int ofx_get_conn(struct ofx_ep *ep, fi_addr_t dest, mx_endpoint_addr_t *out);
static int get_conn(struct ofx_ep *ep, fi_addr_t dest, mx_endpoint_addr_t *out) {
  struct ofx_av *av = ep->av;
  if (!av || dest >= ofx_av_len(av) || !av->tab[dest].used)
    return -FI_EINVAL;
  if (dest >= ep->conn_cap) {
    size_t cap = ep->conn_cap ? ep->conn_cap : 64;
    while (cap <= dest)
      cap *= 2;
    mx_endpoint_addr_t *c = realloc(ep->conn, cap * sizeof *c);
    if (!c)
      return -FI_ENOMEM;
    ep->conn = c;
    bool *ok = realloc(ep->conn_ok, cap * sizeof *ok);
    if (!ok)
      return -FI_ENOMEM;
    memset(ok + ep->conn_cap, 0, (cap - ep->conn_cap) * sizeof *ok);
    ep->conn_ok = ok;
    ep->conn_cap = cap;
  }
  if (!ep->conn_ok[dest]) {
    const struct ofx_name *nm = &av->tab[dest].name;
    /* An address that came out of band (an MPI modex) may name a board that this
     * host's discovery has not met yet: MX says NIC_NOT_FOUND at once, so retry
     * within the connect budget while discovery catches up. */
    mx_return_t rc;
    for (uint32_t waited = 0;; waited += OFX_NIC_RETRY_MS) {
      rc = mx_connect(ep->mx, nm->nic_id, nm->eid, nm->key, OFX_CONNECT_MS,
                      &ep->conn[dest]);
      if (rc != MX_NIC_NOT_FOUND || waited >= OFX_CONNECT_MS)
        break;
      struct timespec ts = {0, OFX_NIC_RETRY_MS * 1000000L};
      nanosleep(&ts, NULL);
    }
    if (rc != MX_SUCCESS) {
      FI_WARN(&ofx_prov, FI_LOG_EP_CTRL,
              "connect to AV entry %zu (nic %012llx endpoint %u key %#x): %s\n",
              (size_t)dest, (unsigned long long)nm->nic_id, nm->eid, nm->key,
              mx_strerror(rc));
      return ofx_errno(rc);
    }
    ep->conn_ok[dest] = true;
  }
  *out = ep->conn[dest];
  return 0;
}

static fi_addr_t source_of(struct ofx_ep *ep, mx_endpoint_addr_t a) {
  uint64_t nic;
  uint32_t eid;
  if (!(ep->caps & FI_SOURCE) || !ep->av ||
      mx_decompose_endpoint_addr(a, &nic, &eid) != MX_SUCCESS)
    return FI_ADDR_NOTAVAIL;
  /* The peer's MX context remembers the index found last time. */
  void *hint = NULL;
  struct ofx_av *av = ep->av;
  if (mx_get_endpoint_addr_context(a, &hint) == MX_SUCCESS && hint) {
    fi_addr_t i = (fi_addr_t)(uintptr_t)hint - 1;
    if (i < ofx_av_len(av) && av->tab[i].used && av->tab[i].name.nic_id == nic &&
        av->tab[i].name.eid == eid)
      return i;
  }
  fi_addr_t i = ofx_av_find(av, nic, eid);
  if (i != FI_ADDR_NOTAVAIL)
    mx_set_endpoint_addr_context(a, (void *)(uintptr_t)(i + 1));
  return i;
}

/* For the other modules (RMA): the same op records and connections. */
struct ofx_op *ofx_op_get(struct ofx_ep *ep, size_t extra) { return op_get(ep, extra); }
void ofx_op_put(struct ofx_ep *ep, struct ofx_op *op) { op_put(ep, op); }
void ofx_op_track(struct ofx_ep *ep, struct ofx_op *op) { list_add(ep, op); }
int ofx_get_conn(struct ofx_ep *ep, fi_addr_t dest, mx_endpoint_addr_t *out) {
  return get_conn(ep, dest, out);
}

/* Posts (again) the standing receive of RMA write notifications. */
int ofx_notify_post(struct ofx_ep *ep, struct ofx_op *op) {
  mx_segment_t seg[2] = {{&op->hdr, OFX_HDR_LEN}, {&op->rma_len, sizeof op->rma_len}};
  op->hdr.flags = 0;
  op->rma_len = 0;
  return mx_irecv(ep->mx, seg, 2, OFX_NOTIFY_BIT, OFX_TAGGED_BIT | OFX_TAG_MASK, op,
                  &op->req) == MX_SUCCESS
             ? 0
             : -FI_EIO;
}

/* ---- completions ---- */

static int status_errno(mx_status_code_t c) {
  switch (c) {
  case MX_STATUS_SUCCESS:
    return 0;
  case MX_STATUS_TRUNCATED:
    return FI_ETRUNC;
  case MX_STATUS_CANCELLED:
    return FI_ECANCELED;
  case MX_STATUS_TIMEOUT:
    return FI_ETIMEDOUT;
  case MX_STATUS_ENDPOINT_CLOSED:
  case MX_STATUS_ENDPOINT_UNKNOWN:
  case MX_STATUS_ENDPOINT_UNREACHABLE:
  case MX_STATUS_BAD_ENDPOINT:
    return FI_EHOSTUNREACH;
  case MX_STATUS_BAD_KEY:
  case MX_STATUS_BAD_RDMAWIN: /* RMA outside every window: bad key or range */
    return FI_EACCES;
  case MX_STATUS_NO_RESOURCES:
    return FI_ENOMEM;
  default:
    return FI_EIO;
  }
}

/* ---- FI_MULTI_RECV: one buffer, one MX receive at a time into what is left ---- */

/* Posts the MX receive of a multi-receive buffer's remaining room. */
static mx_return_t multi_post(struct ofx_ep *ep, struct ofx_op *op) {
  mx_segment_t seg[2] = {{&op->hdr, OFX_HDR_LEN},
                         {op->mr_base + op->mr_off, (uint32_t)(op->mr_len - op->mr_off)}};
  op->buf = op->mr_base + op->mr_off;
  op->hdr.flags = 0;
  return mx_irecv(ep->mx, seg, 2, op->mr_match, op->mr_mask, op, &op->req);
}

/* A message landed in a multi-receive buffer (completion e): advance, and
 * either post the next receive (true) or release the buffer, flagging e
 * FI_MULTI_RECV (false). */
static bool multi_next(struct ofx_ep *ep, struct ofx_op *op, struct ofx_cqe *e) {
  op->mr_off += e->len;
  bool room = (!e->err || e->err == FI_ETRUNC) &&
              op->mr_len - op->mr_off >= ep->min_multi_recv &&
              op->mr_len - op->mr_off > 0;
  if (room && multi_post(ep, op) == MX_SUCCESS)
    return true;
  e->flags |= FI_MULTI_RECV;
  return false;
}

static void complete(struct ofx_ep *ep, const mx_status_t *st) {
  struct ofx_op *op = st->context;
  if (!op)
    return;
  list_del(op);
  struct ofx_cqe e = {.ctx = op->ctx, .flags = op->flags, .src = FI_ADDR_NOTAVAIL};
  e.err = status_errno(st->code);
  e.prov_errno = st->code;
  /* The receiver truncating a message is its own business, not an error
   * of the send. */
  if (op->kind == OFX_OP_SEND && e.err == FI_ETRUNC)
    e.err = 0;
  struct ofx_cq *cq = op->kind == OFX_OP_RECV ? ep->rx_cq : ep->tx_cq;
  if (op->kind == OFX_OP_RECV) {
    uint32_t xfer = st->xfer_length;
    e.buf = op->buf;
    e.len = xfer >= OFX_HDR_LEN ? xfer - OFX_HDR_LEN : 0;
    if (xfer >= OFX_HDR_LEN && (op->hdr.flags & OFX_HDR_DATA)) {
      e.flags |= FI_REMOTE_CQ_DATA;
      e.data = op->hdr.data;
    }
    if (op->flags & FI_TAGGED)
      e.tag = st->match_info & OFX_TAG_MASK;
    if (e.err == FI_ETRUNC)
      e.olen = st->msg_length > xfer ? st->msg_length - xfer : 0;
    if (!e.err || e.err == FI_ETRUNC)
      e.src = source_of(ep, st->source);
  }
  if (op->notify) {
    /* A remote write with CQ data: no context, the write's length. */
    e.ctx = NULL;
    e.buf = NULL;
    e.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA;
    e.len = (size_t)op->rma_len;
    e.tag = 0;
    if (!e.err && ep->rx_cq)
      ofx_cq_push(ep->rx_cq, &e);
    bool ok = !e.err && ofx_notify_post(ep, op) == 0; /* else: closing */
    if (ok)
      list_add(ep, op);
    else
      op_put(ep, op);
    return;
  }
  bool keep = op->multi && multi_next(ep, op, &e);
  if (cq && ((e.err && !op->quiet) || op->report))
    ofx_cq_push(cq, &e);
  ofx_cntr_count(op->kind == OFX_OP_SEND    ? ep->tx_cntr
                 : op->kind == OFX_OP_RECV  ? ep->rx_cntr
                 : op->kind == OFX_OP_WRITE ? ep->wr_cntr
                                            : ep->rd_cntr,
                 e.err != 0);
  if (keep)
    list_add(ep, op);
  else
    op_put(ep, op);
}

/* Under the lock: move up to `max` finished MX requests of the endpoint to
 * their CQs (a bound, so that a read of one entry asks MX once). */
size_t ofx_ep_progress(struct ofx_ep *ep, size_t max, bool polled) {
  size_t n = 0;
  if (!ep->enabled)
    return 0;
  while (n < max) {
    mx_status_t st;
    uint32_t result = 0;
    /* One poll of the network (none when the caller polls it by waiting in
     * MX on this endpoint), then only what has completed already: a read
     * that finds a completion returns without another pass. */
    mx_return_t rc = n || polled
                         ? omx_test_any_completed(ep->mx, 0, 0, &st, &result)
                         : mx_test_any(ep->mx, 0, 0, &st, &result);
    if (rc != MX_SUCCESS || !result)
      break;
    complete(ep, &st);
    n++;
  }
  return n;
}

/* ---- sends ---- */

static ssize_t do_send(struct ofx_ep *ep, const struct iovec *iov, size_t count,
                       fi_addr_t dest, uint64_t match, uint64_t data,
                       uint64_t flags, void *ctx, uint64_t kind) {
  if (count > OFX_IOV_LIMIT || (count && !iov))
    return -FI_EINVAL;
  size_t total = 0;
  mx_segment_t seg[OFX_IOV_LIMIT + 1];
  for (size_t i = 0; i < count; i++) {
    if (iov[i].iov_len && !iov[i].iov_base)
      return -FI_EINVAL;
    seg[i + 1].segment_ptr = iov[i].iov_base;
    seg[i + 1].segment_length = (uint32_t)iov[i].iov_len;
    total += iov[i].iov_len;
    if (iov[i].iov_len > OFX_MAX_MSG || total > OFX_MAX_MSG)
      return -FI_EMSGSIZE;
  }
  if ((flags & FI_INJECT) && total > OFX_INJECT_SIZE)
    return -FI_EMSGSIZE;
  match |= (uint64_t)ep->src_id << OFX_SRC_SHIFT;

  ofx_lock(ep->dom);
  if (!ep->enabled) {
    ofx_unlock(ep->dom);
    return -FI_EOPBADSTATE;
  }
  mx_endpoint_addr_t to;
  int ret = get_conn(ep, dest, &to);
  if (ret) {
    ofx_unlock(ep->dom);
    return ret;
  }
  /* An fi_inject message MX copies at post (up to MX_COPY_SEND_MAX, on every
   * path) needs neither an op nor a request: MX forgets it, so it costs no
   * completion to collect. fi_inject messages never report, not even errors. */
  if ((flags & (OFX_NO_COMPLETION | FI_DELIVERY_COMPLETE)) == OFX_NO_COMPLETION &&
      total + OFX_HDR_LEN <= ep->copy_send_max) {
    struct ofx_hdr hdr = {
        .data = (uint32_t)data,
        .flags = (flags & FI_REMOTE_CQ_DATA) ? OFX_HDR_DATA : 0};
    seg[0].segment_ptr = &hdr;
    seg[0].segment_length = OFX_HDR_LEN;
    mx_return_t rc =
        mx_isend(ep->mx, seg, (uint32_t)count + 1, to, match, NULL, NULL);
    /* Complete as an inject is (the buffer is free): a counter counts it now. */
    if (rc == MX_SUCCESS)
      ofx_cntr_count(ep->tx_cntr, false);
    ofx_unlock(ep->dom);
    return rc == MX_SUCCESS ? 0 : ofx_errno(rc);
  }
  /* Otherwise an injected message is copied behind its op: the caller's
   * buffer is free at return whatever path (eager, rendezvous, shared memory)
   * MX takes; the op completes unless it came from fi_inject. */
  size_t extra = (flags & FI_INJECT) ? total : 0;
  struct ofx_op *op = op_get(ep, extra);
  if (!op) {
    ofx_unlock(ep->dom);
    return -FI_EAGAIN;
  }
  if (extra) {
    char *copy = (char *)(op + 1);
    for (size_t i = 0, off = 0; i < count; off += iov[i].iov_len, i++)
      memcpy(copy + off, iov[i].iov_base, iov[i].iov_len);
    seg[1].segment_ptr = copy;
    seg[1].segment_length = (uint32_t)total;
    count = 1;
  }
  op->kind = OFX_OP_SEND;
  op->ep = ep;
  op->ctx = ctx;
  op->flags = FI_SEND | kind;
  op->report = !(flags & OFX_NO_COMPLETION) &&
               (!ep->tx_selective || (flags & FI_COMPLETION));
  op->quiet = (flags & OFX_NO_COMPLETION) != 0;
  op->buf = NULL;
  op->hdr.data = (uint32_t)data;
  op->hdr.flags = (flags & FI_REMOTE_CQ_DATA) ? OFX_HDR_DATA : 0;
  seg[0].segment_ptr = &op->hdr;
  seg[0].segment_length = OFX_HDR_LEN;
  mx_return_t rc;
  if (flags & FI_DELIVERY_COMPLETE)
    rc = mx_issend(ep->mx, seg, (uint32_t)count + 1, to, match, op, &op->req);
  else
    rc = mx_isend(ep->mx, seg, (uint32_t)count + 1, to, match, op, &op->req);
  if (rc != MX_SUCCESS) {
    op_put(ep, op);
    ofx_unlock(ep->dom);
    return ofx_errno(rc);
  }
  list_add(ep, op);
  ofx_unlock(ep->dom);
  return 0;
}

/* ---- the stash of peeked messages ---- */

static struct ofx_stash *stash_find(struct ofx_ep *ep, uint64_t match,
                                    uint64_t mask, struct ofx_stash ***link) {
  struct ofx_stash **pp = &ep->stash;
  for (; *pp; pp = &(*pp)->next)
    if (!(*pp)->claimed && (((*pp)->match ^ match) & mask) == 0)
      break;
  if (link)
    *link = pp;
  return *pp;
}

static void stash_unlink(struct ofx_ep *ep, struct ofx_stash **link) {
  struct ofx_stash *s = *link;
  *link = s->next;
  if (ep->stash_tail == &s->next)
    ep->stash_tail = link;
  free(s->data);
  free(s);
}

/* Takes the oldest message MX holds as unexpected (any match) into the
 * stash, waiting for its data; NULL if there is none or on failure. */
static struct ofx_stash *steal_one(struct ofx_ep *ep, int *err);

/* The oldest unexpected message, stashed; RMA notifications met on the way
 * are reported as the completions they are, never stashed. */
static struct ofx_stash *steal_oldest(struct ofx_ep *ep, int *err) {
  struct ofx_stash *s;
  while ((s = steal_one(ep, err)) && (s->match & OFX_NOTIFY_BIT) &&
         !(s->match & OFX_TAGGED_BIT)) {
    uint64_t len = 0;
    memcpy(&len, s->data, s->len < sizeof len ? s->len : sizeof len);
    struct ofx_cqe e = {.flags = FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA,
                        .data = s->hdr.data, .len = (size_t)len, .src = s->src};
    if (ep->rx_cq)
      ofx_cq_push(ep->rx_cq, &e);
    struct ofx_stash **pp = &ep->stash;
    while (*pp != s)
      pp = &(*pp)->next;
    stash_unlink(ep, pp);
  }
  return s;
}

static struct ofx_stash *steal_one(struct ofx_ep *ep, int *err) {
  mx_status_t st;
  uint32_t result = 0;
  *err = 0;
  if (mx_iprobe(ep->mx, 0, 0, &st, &result) != MX_SUCCESS || !result)
    return NULL;
  struct ofx_stash *s = calloc(1, sizeof *s);
  size_t len = st.msg_length > OFX_HDR_LEN ? st.msg_length - OFX_HDR_LEN : 0;
  void *data = malloc(len ? len : 1);
  if (!s || !data) {
    free(s);
    free(data);
    *err = -FI_ENOMEM;
    return NULL;
  }
  mx_segment_t seg[2] = {{&s->hdr, OFX_HDR_LEN}, {data, (uint32_t)len}};
  mx_request_t req;
  /* The exact match value: the oldest message with it is this one. */
  if (mx_irecv(ep->mx, seg, 2, st.match_info, MX_MATCH_MASK_NONE, NULL,
               &req) != MX_SUCCESS) {
    free(s);
    free(data);
    *err = -FI_EIO;
    return NULL;
  }
  mx_status_t got;
  result = 0;
  if (mx_wait(ep->mx, &req, OFX_STEAL_MS, &got, &result) != MX_SUCCESS ||
      !result) {
    uint32_t cancelled = 0;
    mx_cancel(ep->mx, &req, &cancelled);
    if (!cancelled) {
      /* MX may still write into the header and data: leave them allocated. */
      mx_forget(ep->mx, &req);
      *err = -FI_ETIMEDOUT;
      return NULL;
    }
    free(data);
    free(s);
    *err = -FI_ETIMEDOUT;
    return NULL;
  }
  s->match = got.match_info;
  s->data = data;
  s->len = got.xfer_length > OFX_HDR_LEN ? got.xfer_length - OFX_HDR_LEN : 0;
  if (got.xfer_length < OFX_HDR_LEN)
    s->hdr.flags = 0;
  s->src = source_of(ep, got.source);
  *ep->stash_tail = s;
  ep->stash_tail = &s->next;
  return s;
}

/* Copies a stashed message into iov and writes its completion. */
static void deliver_stash(struct ofx_ep *ep, struct ofx_stash **link,
                          const struct iovec *iov, size_t count, void *ctx,
                          uint64_t kind, bool report, bool discard) {
  struct ofx_stash *s = *link;
  struct ofx_cqe e = {.ctx = ctx, .flags = FI_RECV | kind, .src = s->src};
  size_t done = 0;
  if (!discard) {
    for (size_t i = 0; i < count && done < s->len; i++) {
      size_t n = iov[i].iov_len < s->len - done ? iov[i].iov_len : s->len - done;
      memcpy(iov[i].iov_base, (char *)s->data + done, n);
      done += n;
    }
    if (done < s->len) {
      e.err = FI_ETRUNC;
      e.prov_errno = MX_STATUS_TRUNCATED;
      e.olen = s->len - done;
    }
    e.buf = count ? iov[0].iov_base : NULL;
  }
  e.len = done;
  if (kind & FI_TAGGED)
    e.tag = s->match & OFX_TAG_MASK;
  if (s->hdr.flags & OFX_HDR_DATA) {
    e.flags |= FI_REMOTE_CQ_DATA;
    e.data = s->hdr.data;
  }
  if (ep->rx_cq && (e.err || report))
    ofx_cq_push(ep->rx_cq, &e);
  ofx_cntr_count(ep->rx_cntr, e.err != 0);
  stash_unlink(ep, link);
}

/* FI_PEEK (with FI_CLAIM or FI_DISCARD): report the oldest matching message
 * without receiving it into the user's buffer. */
static ssize_t do_peek(struct ofx_ep *ep, uint64_t match, uint64_t mask,
                       uint64_t flags, void *ctx, uint64_t kind) {
  struct ofx_stash **link;
  struct ofx_stash *s = stash_find(ep, match, mask, &link);
  if (!s) {
    mx_status_t st;
    uint32_t result = 0;
    if (mx_iprobe(ep->mx, match, mask, &st, &result) == MX_SUCCESS && result) {
      int err = 0;
      struct ofx_stash *t;
      while ((t = steal_oldest(ep, &err))) {
        if (((t->match ^ match) & mask) == 0) {
          s = stash_find(ep, match, mask, &link);
          break;
        }
      }
      if (err)
        return err;
    }
  }
  struct ofx_cqe e = {.ctx = ctx, .flags = FI_RECV | kind, .src = FI_ADDR_NOTAVAIL};
  if (!s) {
    e.err = FI_ENOMSG;
    e.prov_errno = 0;
    return ep->rx_cq ? ofx_cq_push(ep->rx_cq, &e) : 0;
  }
  e.len = s->len;
  e.src = s->src;
  if (kind & FI_TAGGED)
    e.tag = s->match & OFX_TAG_MASK;
  if (s->hdr.flags & OFX_HDR_DATA) {
    e.flags |= FI_REMOTE_CQ_DATA;
    e.data = s->hdr.data;
  }
  int ret = ep->rx_cq ? ofx_cq_push(ep->rx_cq, &e) : 0;
  if (flags & FI_CLAIM) {
    s->claimed = true;
    s->claim_ctx = ctx;
  } else if (flags & FI_DISCARD) {
    stash_unlink(ep, link);
  }
  return ret;
}

/* ---- receives ---- */

/* Under the lock: a multi-receive buffer. Messages a peek stashed go in first
 * (each its own completion; a buffer they fill is released by an empty
 * completion flagged FI_MULTI_RECV), then MX receives into the rest. */
static ssize_t multi_start(struct ofx_ep *ep, const struct iovec *iov,
                           uint64_t match, uint64_t mask, void *ctx, bool report) {
  size_t off = 0, len = iov[0].iov_len;
  char *base = iov[0].iov_base;
  struct ofx_stash **link;
  while (len - off >= ep->min_multi_recv && len > off &&
         stash_find(ep, match, mask, &link)) {
    size_t n = (*link)->len < len - off ? (*link)->len : len - off;
    struct iovec room = {base + off, len - off};
    deliver_stash(ep, link, &room, 1, ctx, FI_MSG, report, false);
    off += n;
  }
  if (len - off < ep->min_multi_recv || len == off) {
    struct ofx_cqe e = {.ctx = ctx, .flags = FI_RECV | FI_MSG | FI_MULTI_RECV,
                        .buf = base + off, .src = FI_ADDR_NOTAVAIL};
    return ep->rx_cq ? ofx_cq_push(ep->rx_cq, &e) : 0;
  }
  struct ofx_op *op = op_get(ep, 0);
  if (!op)
    return -FI_EAGAIN;
  op->kind = OFX_OP_RECV;
  op->ep = ep;
  op->ctx = ctx;
  op->flags = FI_RECV | FI_MSG;
  op->report = report;
  op->quiet = false;
  op->multi = true;
  op->mr_base = base;
  op->mr_len = len;
  op->mr_off = off;
  op->mr_match = match;
  op->mr_mask = mask;
  mx_return_t rc = multi_post(ep, op);
  if (rc != MX_SUCCESS) {
    op_put(ep, op);
    return ofx_errno(rc);
  }
  list_add(ep, op);
  return 0;
}

static ssize_t do_recv(struct ofx_ep *ep, const struct iovec *iov, size_t count,
                       fi_addr_t src, uint64_t tag, uint64_t ignore,
                       uint64_t flags, void *ctx, uint64_t kind) {
  if ((flags & FI_DISCARD) && !(flags & (FI_PEEK | FI_CLAIM)))
    return -FI_EINVAL;
  /* fi_tagged(3), FI_DISCARD: "the input buffer(s) and length parameters are
   * ignored". */
  if (flags & FI_DISCARD) {
    iov = NULL;
    count = 0;
  }
  if (count > OFX_IOV_LIMIT || (count && !iov))
    return -FI_EINVAL;
  if ((flags & FI_MULTI_RECV) &&
      ((kind & FI_TAGGED) || count != 1 || (flags & (FI_PEEK | FI_CLAIM))))
    return (kind & FI_TAGGED) ? -FI_EOPNOTSUPP : -FI_EINVAL; /* untagged, one buffer */
  mx_segment_t seg[OFX_IOV_LIMIT + 1];
  size_t total = 0;
  for (size_t i = 0; i < count; i++) {
    if (iov[i].iov_len && !iov[i].iov_base)
      return -FI_EINVAL;
    seg[i + 1].segment_ptr = iov[i].iov_base;
    seg[i + 1].segment_length = (uint32_t)iov[i].iov_len;
    total += iov[i].iov_len;
    if (iov[i].iov_len > OFX_MAX_MSG || total > OFX_MAX_MSG)
      return -FI_EMSGSIZE;
  }
  /* Untagged messages carry tag 0: RMA notifications (another tag) never match. */
  uint64_t match = 0, mask = OFX_TAGGED_BIT | OFX_TAG_MASK;
  if (kind & FI_TAGGED) {
    uint64_t care = ~ignore;
    if (tag & care & ~OFX_TAG_MASK)
      return -FI_EINVAL; /* a tag bit the provider reserves */
    match = OFX_TAGGED_BIT | (tag & care & OFX_TAG_MASK);
    mask = OFX_TAGGED_BIT | (care & OFX_TAG_MASK);
  }
  bool report = !ep->rx_selective || (flags & FI_COMPLETION);

  ofx_lock(ep->dom);
  ssize_t ret = 0;
  if (!ep->enabled) {
    ret = -FI_EOPBADSTATE;
    goto out;
  }
  if ((ep->caps & FI_DIRECTED_RECV) && src != FI_ADDR_UNSPEC) {
    struct ofx_av *av = ep->av;
    if (!av || src >= ofx_av_len(av) || !av->tab[src].used) {
      ret = -FI_EINVAL;
      goto out;
    }
    const struct ofx_name *nm = &av->tab[src].name;
    match |= (uint64_t)ofx_src_id(nm->nic_id, nm->eid) << OFX_SRC_SHIFT;
    mask |= OFX_SRC_MASK;
  }
  if (flags & FI_PEEK) {
    ret = do_peek(ep, match, mask, flags, ctx, kind);
    goto out;
  }
  if (flags & FI_CLAIM) {
    struct ofx_stash **pp = &ep->stash;
    while (*pp && !((*pp)->claimed && (*pp)->claim_ctx == ctx))
      pp = &(*pp)->next;
    if (!*pp) {
      ret = -FI_EINVAL; /* nothing was claimed with this context */
      goto out;
    }
    deliver_stash(ep, pp, iov, count, ctx, kind, report,
                  (flags & FI_DISCARD) != 0);
    goto out;
  }
  if (flags & FI_MULTI_RECV) {
    ret = multi_start(ep, iov, match, mask, ctx, report);
    goto out;
  }
  if (ep->stash) {
    struct ofx_stash **link;
    if (stash_find(ep, match, mask, &link)) {
      deliver_stash(ep, link, iov, count, ctx, kind, report, false);
      goto out;
    }
  }
  struct ofx_op *op = op_get(ep, 0);
  if (!op) {
    ret = -FI_EAGAIN;
    goto out;
  }
  op->kind = OFX_OP_RECV;
  op->ep = ep;
  op->ctx = ctx;
  op->flags = FI_RECV | kind;
  op->report = report;
  op->quiet = false;
  op->buf = count ? iov[0].iov_base : NULL;
  op->hdr.flags = 0;
  seg[0].segment_ptr = &op->hdr;
  seg[0].segment_length = OFX_HDR_LEN;
  mx_return_t rc = mx_irecv(ep->mx, seg, (uint32_t)count + 1, match, mask, op,
                            &op->req);
  if (rc != MX_SUCCESS) {
    op_put(ep, op);
    ret = ofx_errno(rc);
    goto out;
  }
  list_add(ep, op);
out:
  ofx_unlock(ep->dom);
  return ret;
}

/* ---- fi_ops_msg ---- */

#define EP(e) ((struct ofx_ep *)(e))

static ssize_t msg_recv(struct fid_ep *e, void *buf, size_t len, void *desc,
                        fi_addr_t src, void *ctx) {
  (void)desc;
  struct iovec iov = {buf, len};
  return do_recv(EP(e), &iov, 1, src, 0, 0, EP(e)->rx_op_flags, ctx, FI_MSG);
}
static ssize_t msg_recvv(struct fid_ep *e, const struct iovec *iov, void **desc,
                         size_t count, fi_addr_t src, void *ctx) {
  (void)desc;
  return do_recv(EP(e), iov, count, src, 0, 0, EP(e)->rx_op_flags, ctx, FI_MSG);
}
static ssize_t msg_recvmsg(struct fid_ep *e, const struct fi_msg *m,
                           uint64_t flags) {
  if (!m)
    return -FI_EINVAL;
  if (flags & (FI_PEEK | FI_CLAIM | FI_DISCARD))
    return -FI_EINVAL; /* tagged only */
  return do_recv(EP(e), m->msg_iov, m->iov_count, m->addr, 0, 0, flags,
                 m->context, FI_MSG);
}
static ssize_t msg_send(struct fid_ep *e, const void *buf, size_t len,
                        void *desc, fi_addr_t dest, void *ctx) {
  (void)desc;
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, 0, 0, EP(e)->tx_op_flags, ctx, FI_MSG);
}
static ssize_t msg_sendv(struct fid_ep *e, const struct iovec *iov, void **desc,
                         size_t count, fi_addr_t dest, void *ctx) {
  (void)desc;
  return do_send(EP(e), iov, count, dest, 0, 0, EP(e)->tx_op_flags, ctx, FI_MSG);
}
static ssize_t msg_sendmsg(struct fid_ep *e, const struct fi_msg *m,
                           uint64_t flags) {
  if (!m)
    return -FI_EINVAL;
  return do_send(EP(e), m->msg_iov, m->iov_count, m->addr, 0, m->data,
                 flags & ~OFX_NO_COMPLETION,
                 m->context, FI_MSG);
}
static ssize_t msg_inject(struct fid_ep *e, const void *buf, size_t len,
                          fi_addr_t dest) {
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, 0, 0, FI_INJECT | OFX_NO_COMPLETION, NULL, FI_MSG);
}
static ssize_t msg_senddata(struct fid_ep *e, const void *buf, size_t len,
                            void *desc, uint64_t data, fi_addr_t dest,
                            void *ctx) {
  (void)desc;
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, 0, data,
                 EP(e)->tx_op_flags | FI_REMOTE_CQ_DATA, ctx, FI_MSG);
}
static ssize_t msg_injectdata(struct fid_ep *e, const void *buf, size_t len,
                              uint64_t data, fi_addr_t dest) {
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, 0, data,
                 FI_INJECT | OFX_NO_COMPLETION | FI_REMOTE_CQ_DATA,
                 NULL, FI_MSG);
}

static struct fi_ops_msg msg_ops = {
    .size = sizeof(struct fi_ops_msg),
    .recv = msg_recv,
    .recvv = msg_recvv,
    .recvmsg = msg_recvmsg,
    .send = msg_send,
    .sendv = msg_sendv,
    .sendmsg = msg_sendmsg,
    .inject = msg_inject,
    .senddata = msg_senddata,
    .injectdata = msg_injectdata,
};

/* ---- fi_ops_tagged ---- */

static int check_tag(uint64_t tag) {
  return (tag & ~OFX_TAG_MASK) ? -FI_EINVAL : 0;
}

static ssize_t tag_recv(struct fid_ep *e, void *buf, size_t len, void *desc,
                        fi_addr_t src, uint64_t tag, uint64_t ignore, void *ctx) {
  (void)desc;
  struct iovec iov = {buf, len};
  return do_recv(EP(e), &iov, 1, src, tag, ignore,
                 EP(e)->rx_op_flags & ~FI_MULTI_RECV, ctx, FI_TAGGED);
}
static ssize_t tag_recvv(struct fid_ep *e, const struct iovec *iov, void **desc,
                         size_t count, fi_addr_t src, uint64_t tag,
                         uint64_t ignore, void *ctx) {
  (void)desc;
  return do_recv(EP(e), iov, count, src, tag, ignore,
                 EP(e)->rx_op_flags & ~FI_MULTI_RECV, ctx, FI_TAGGED);
}
static ssize_t tag_recvmsg(struct fid_ep *e, const struct fi_msg_tagged *m,
                           uint64_t flags) {
  if (!m)
    return -FI_EINVAL;
  return do_recv(EP(e), m->msg_iov, m->iov_count, m->addr, m->tag, m->ignore,
                 flags, m->context, FI_TAGGED);
}
static ssize_t tag_send(struct fid_ep *e, const void *buf, size_t len,
                        void *desc, fi_addr_t dest, uint64_t tag, void *ctx) {
  (void)desc;
  if (check_tag(tag))
    return -FI_EINVAL;
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, OFX_TAGGED_BIT | tag, 0,
                 EP(e)->tx_op_flags, ctx, FI_TAGGED);
}
static ssize_t tag_sendv(struct fid_ep *e, const struct iovec *iov, void **desc,
                         size_t count, fi_addr_t dest, uint64_t tag, void *ctx) {
  (void)desc;
  if (check_tag(tag))
    return -FI_EINVAL;
  return do_send(EP(e), iov, count, dest, OFX_TAGGED_BIT | tag, 0,
                 EP(e)->tx_op_flags, ctx, FI_TAGGED);
}
static ssize_t tag_sendmsg(struct fid_ep *e, const struct fi_msg_tagged *m,
                           uint64_t flags) {
  if (!m || check_tag(m->tag))
    return -FI_EINVAL;
  return do_send(EP(e), m->msg_iov, m->iov_count, m->addr,
                 OFX_TAGGED_BIT | m->tag, m->data, flags & ~OFX_NO_COMPLETION, m->context,
                 FI_TAGGED);
}
static ssize_t tag_inject(struct fid_ep *e, const void *buf, size_t len,
                          fi_addr_t dest, uint64_t tag) {
  if (check_tag(tag))
    return -FI_EINVAL;
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, OFX_TAGGED_BIT | tag, 0,
                 FI_INJECT | OFX_NO_COMPLETION, NULL,
                 FI_TAGGED);
}
static ssize_t tag_senddata(struct fid_ep *e, const void *buf, size_t len,
                            void *desc, uint64_t data, fi_addr_t dest,
                            uint64_t tag, void *ctx) {
  (void)desc;
  if (check_tag(tag))
    return -FI_EINVAL;
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, OFX_TAGGED_BIT | tag, data,
                 EP(e)->tx_op_flags | FI_REMOTE_CQ_DATA, ctx, FI_TAGGED);
}
static ssize_t tag_injectdata(struct fid_ep *e, const void *buf, size_t len,
                              uint64_t data, fi_addr_t dest, uint64_t tag) {
  if (check_tag(tag))
    return -FI_EINVAL;
  struct iovec iov = {(void *)buf, len};
  return do_send(EP(e), &iov, 1, dest, OFX_TAGGED_BIT | tag, data,
                 FI_INJECT | OFX_NO_COMPLETION | FI_REMOTE_CQ_DATA, NULL, FI_TAGGED);
}

static struct fi_ops_tagged tagged_ops = {
    .size = sizeof(struct fi_ops_tagged),
    .recv = tag_recv,
    .recvv = tag_recvv,
    .recvmsg = tag_recvmsg,
    .send = tag_send,
    .sendv = tag_sendv,
    .sendmsg = tag_sendmsg,
    .inject = tag_inject,
    .senddata = tag_senddata,
    .injectdata = tag_injectdata,
};

/* ---- fi_ops_ep ---- */

static ssize_t ep_cancel(fid_t fid, void *context) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  if (!fid)
    return -FI_EINVAL;
  ofx_lock(ep->dom);
  ssize_t ret = -FI_ENOENT;
  for (struct ofx_op *op = ep->pending.next; op != &ep->pending; op = op->next) {
    if (op->kind != OFX_OP_RECV || op->ctx != context || op->notify)
      continue;
    uint32_t cancelled = 0;
    mx_cancel(ep->mx, &op->req, &cancelled);
    if (cancelled) {
      struct ofx_cqe e = {.ctx = op->ctx, .flags = op->flags, .buf = op->buf,
                          .src = FI_ADDR_NOTAVAIL, .err = FI_ECANCELED,
                          .prov_errno = MX_STATUS_CANCELLED};
      if (op->flags & FI_TAGGED)
        e.tag = 0;
      if (op->multi)
        e.flags |= FI_MULTI_RECV; /* the buffer is released */
      list_del(op);
      if (ep->rx_cq)
        ofx_cq_push(ep->rx_cq, &e);
      ofx_cntr_count(ep->rx_cntr, true);
      op_put(ep, op);
    }
    ret = 0; /* matched already: it completes normally */
    break;
  }
  ofx_unlock(ep->dom);
  return ret;
}

static int ep_getopt(fid_t fid, int level, int optname, void *optval,
                     size_t *optlen) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV)
    return -FI_ENOPROTOOPT;
  if (!optval || !optlen || *optlen < sizeof(size_t))
    return -FI_EINVAL;
  *(size_t *)optval = ep->min_multi_recv;
  *optlen = sizeof(size_t);
  return 0;
}
static int ep_setopt(fid_t fid, int level, int optname, const void *optval,
                     size_t optlen) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  if (level != FI_OPT_ENDPOINT || optname != FI_OPT_MIN_MULTI_RECV)
    return -FI_ENOPROTOOPT;
  if (!optval || optlen != sizeof(size_t))
    return -FI_EINVAL;
  ofx_lock(ep->dom);
  ep->min_multi_recv = *(const size_t *)optval;
  ofx_unlock(ep->dom);
  return 0;
}
static int no_tx_ctx(struct fid_ep *sep, int index, struct fi_tx_attr *attr,
                     struct fid_ep **tx, void *ctx) {
  (void)sep, (void)index, (void)attr, (void)tx, (void)ctx;
  return -FI_ENOSYS;
}
static int no_rx_ctx(struct fid_ep *sep, int index, struct fi_rx_attr *attr,
                     struct fid_ep **rx, void *ctx) {
  (void)sep, (void)index, (void)attr, (void)rx, (void)ctx;
  return -FI_ENOSYS;
}
static ssize_t size_left(struct fid_ep *e) {
  return EP(e)->enabled ? 65536 : -FI_EOPBADSTATE;
}

static struct fi_ops_ep ep_ops = {
    .size = sizeof(struct fi_ops_ep),
    .cancel = ep_cancel,
    .getopt = ep_getopt,
    .setopt = ep_setopt,
    .tx_ctx = no_tx_ctx,
    .rx_ctx = no_rx_ctx,
    .rx_size_left = size_left,
    .tx_size_left = size_left,
};

/* ---- fi_ops_cm ---- */

static int cm_getname(fid_t fid, void *addr, size_t *addrlen) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  if (!fid || !addrlen || (*addrlen && !addr))
    return -FI_EINVAL;
  ofx_lock(ep->dom);
  bool en = ep->enabled;
  struct ofx_name nm = ep->name;
  ofx_unlock(ep->dom);
  if (!en)
    return -FI_EOPBADSTATE; /* the MX endpoint is opened by fi_enable */
  size_t have = *addrlen;
  *addrlen = sizeof nm;
  if (have < sizeof nm)
    return -FI_ETOOSMALL;
  memcpy(addr, &nm, sizeof nm);
  return 0;
}
static int cm_setname(fid_t fid, void *addr, size_t addrlen) {
  (void)fid, (void)addr, (void)addrlen;
  return -FI_ENOSYS;
}
static int cm_getpeer(struct fid_ep *ep, void *addr, size_t *addrlen) {
  (void)ep, (void)addr, (void)addrlen;
  return -FI_ENOSYS;
}
static int cm_connect(struct fid_ep *ep, const void *addr, const void *param,
                      size_t paramlen) {
  (void)ep, (void)addr, (void)param, (void)paramlen;
  return -FI_ENOSYS;
}
static int cm_listen(struct fid_pep *pep) {
  (void)pep;
  return -FI_ENOSYS;
}
static int cm_accept(struct fid_ep *ep, const void *param, size_t paramlen) {
  (void)ep, (void)param, (void)paramlen;
  return -FI_ENOSYS;
}
static int cm_reject(struct fid_pep *pep, fid_t handle, const void *param,
                     size_t paramlen) {
  (void)pep, (void)handle, (void)param, (void)paramlen;
  return -FI_ENOSYS;
}
static int cm_shutdown(struct fid_ep *ep, uint64_t flags) {
  (void)ep, (void)flags;
  return -FI_ENOSYS;
}
static int cm_join(struct fid_ep *ep, const void *addr, uint64_t flags,
                   struct fid_mc **mc, void *context) {
  (void)ep, (void)addr, (void)flags, (void)mc, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops_cm cm_ops = {
    .size = sizeof(struct fi_ops_cm),
    .setname = cm_setname,
    .getname = cm_getname,
    .getpeer = cm_getpeer,
    .connect = cm_connect,
    .listen = cm_listen,
    .accept = cm_accept,
    .reject = cm_reject,
    .shutdown = cm_shutdown,
    .join = cm_join,
};

/* ---- fid ops: close, bind, control ---- */

/* Adds the endpoint's notify descriptor to (or removes it from) the wait
 * objects of its CQs and counters. */
static int watch_waits(struct ofx_ep *ep, bool on) {
  struct ofx_wait *w[6] = {
      ep->tx_cq ? &ep->tx_cq->wait : NULL,     ep->rx_cq ? &ep->rx_cq->wait : NULL,
      ep->tx_cntr ? &ep->tx_cntr->wait : NULL, ep->rx_cntr ? &ep->rx_cntr->wait : NULL,
      ep->rd_cntr ? &ep->rd_cntr->wait : NULL, ep->wr_cntr ? &ep->wr_cntr->wait : NULL};
  for (int i = 0; i < 6; i++) {
    bool seen = false; /* one wait object may serve several roles */
    for (int j = 0; j < i; j++)
      seen |= w[j] == w[i];
    if (!w[i] || seen)
      continue;
    int ret = ofx_wait_watch(w[i], ep, on);
    if (ret && on)
      return ret;
  }
  return 0;
}

static int ep_close(struct fid *fid) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  struct ofx_domain *d = ep->dom;
  ofx_lock(d);
  if (ep->enabled) {
    watch_waits(ep, false);
    /* Pending requests die with the MX endpoint; their ops are ours. */
    mx_close_endpoint(ep->mx);
    ep->enabled = false;
  }
  while (ep->pending.next != &ep->pending) {
    struct ofx_op *op = ep->pending.next;
    list_del(op);
    free(op);
  }
  while (ep->free_ops) {
    struct ofx_op *op = ep->free_ops;
    ep->free_ops = op->next;
    free(op);
  }
  while (ep->stash)
    stash_unlink(ep, &ep->stash);
  if (ep->tx_cq)
    ofx_cq_detach(ep->tx_cq, ep);
  if (ep->rx_cq && ep->rx_cq != ep->tx_cq)
    ofx_cq_detach(ep->rx_cq, ep);
  if (ep->av)
    ofx_av_detach(ep->av, ep);
  struct ofx_cntr *cntrs[4] = {ep->tx_cntr, ep->rx_cntr, ep->rd_cntr, ep->wr_cntr};
  for (int i = 0; i < 4; i++)
    if (cntrs[i])
      ofx_cntr_detach(cntrs[i], ep); /* detaching twice is harmless */
  ofx_domain_forget_ep(d, ep);
  d->refs--;
  ofx_unlock(d);
  free(ep->conn);
  free(ep->conn_ok);
  free(ep);
  return 0;
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  if (!fid || !bfid)
    return -FI_EINVAL;
  int ret = 0;
  ofx_lock(ep->dom);
  if (ep->enabled) {
    ret = -FI_EOPBADSTATE;
    goto out;
  }
  switch (bfid->fclass) {
  case FI_CLASS_CQ: {
    struct ofx_cq *cq = (struct ofx_cq *)bfid;
    if (cq->dom != ep->dom ||
        (flags & ~(FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)) ||
        !(flags & (FI_TRANSMIT | FI_RECV))) {
      ret = -FI_EINVAL;
      break;
    }
    if (((flags & FI_TRANSMIT) && ep->tx_cq) || ((flags & FI_RECV) && ep->rx_cq)) {
      ret = -FI_EINVAL;
      break;
    }
    if ((ret = ofx_cq_attach(cq, ep)))
      break;
    if (flags & FI_TRANSMIT) {
      ep->tx_cq = cq;
      ep->tx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
    }
    if (flags & FI_RECV) {
      ep->rx_cq = cq;
      ep->rx_selective = (flags & FI_SELECTIVE_COMPLETION) != 0;
    }
    break;
  }
  case FI_CLASS_AV: {
    struct ofx_av *av = (struct ofx_av *)bfid;
    if (av->dom != ep->dom || ep->av || flags) {
      ret = -FI_EINVAL;
      break;
    }
    if (!(ret = ofx_av_attach(av, ep)))
      ep->av = av;
    break;
  }
  case FI_CLASS_EQ:
    break; /* no asynchronous event is ever raised */
  case FI_CLASS_CNTR: {
    struct ofx_cntr *c = (struct ofx_cntr *)bfid;
    /* Completions of this endpoint's operations; remote accesses to its
     * memory raise no event here (no FI_RMA_EVENT). */
    uint64_t kinds = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
    if (c->dom != ep->dom || (flags & ~kinds) || !(flags & kinds) ||
        ((flags & FI_SEND) && ep->tx_cntr) || ((flags & FI_RECV) && ep->rx_cntr) ||
        ((flags & FI_READ) && ep->rd_cntr) || ((flags & FI_WRITE) && ep->wr_cntr)) {
      ret = -FI_EINVAL;
      break;
    }
    if ((ret = ofx_cntr_attach(c, ep)))
      break;
    if (flags & FI_SEND)
      ep->tx_cntr = c;
    if (flags & FI_RECV)
      ep->rx_cntr = c;
    if (flags & FI_READ)
      ep->rd_cntr = c;
    if (flags & FI_WRITE)
      ep->wr_cntr = c;
    break;
  }
  default:
    ret = -FI_EINVAL;
  }
out:
  ofx_unlock(ep->dom);
  return ret;
}

static int ep_enable(struct ofx_ep *ep) {
  if (ep->enabled)
    return 0;
  if (!ep->av)
    return -FI_ENOAV;
  if (!ep->tx_cq && !ep->rx_cq && !ep->tx_cntr && !ep->rx_cntr)
    return -FI_ENOCQ;
  uint32_t board = MX_ANY_NIC;
  if (ep->name.nic_id != UINT64_MAX &&
      mx_nic_id_to_board_number(ep->name.nic_id, &board) != MX_SUCCESS)
    return -FI_ENODEV;
  mx_param_t p;
  memset(&p, 0, sizeof p);
  p.key = MX_PARAM_ERROR_HANDLER;
  p.val.error_handler = MX_ERRORS_RETURN;
  mx_return_t rc = mx_open_endpoint(board, ep->want_eid, ep->want_key, &p, 1, &ep->mx);
  /* A port's endpoint taken by another process (or port): the port is in use. */
  if (rc == MX_BUSY && ep->want_key != OFX_KEY)
    return -FI_EADDRINUSE;
  if (rc != MX_SUCCESS)
    return ofx_errno(rc);
  mx_endpoint_addr_t me;
  uint64_t nic;
  uint32_t eid;
  if (mx_get_endpoint_addr(ep->mx, &me) != MX_SUCCESS ||
      mx_decompose_endpoint_addr(me, &nic, &eid) != MX_SUCCESS) {
    mx_close_endpoint(ep->mx);
    return -FI_EIO;
  }
  ep->name.nic_id = nic;
  ep->name.eid = eid;
  ep->name.key = ep->want_key;
  ep->src_id = ofx_src_id(nic, eid);
  ep->enabled = true;
  int wret = watch_waits(ep, true);
  if (!wret)
    wret = ofx_mr_expose_all(ep);
  ep->enabled = false;
  if (wret) {
    mx_close_endpoint(ep->mx);
    return wret;
  }
  /* Messages MX copies at post on every path it may take. */
  if (mx_get_info(ep->mx, MX_COPY_SEND_MAX, NULL, 0, &ep->copy_send_max,
                  sizeof ep->copy_send_max) != MX_SUCCESS)
    ep->copy_send_max = 0;
  ep->enabled = true;
  int lret = ofx_rma_listen(ep);
  if (lret) {
    ep->enabled = false;
    mx_close_endpoint(ep->mx);
    return lret;
  }
  return 0;
}

static int ep_control(struct fid *fid, int command, void *arg) {
  struct ofx_ep *ep = (struct ofx_ep *)fid;
  if (!fid)
    return -FI_EINVAL;
  int ret;
  ofx_lock(ep->dom);
  switch (command) {
  case FI_ENABLE:
    ret = ep_enable(ep);
    break;
  case FI_GETOPSFLAG:
  case FI_SETOPSFLAG: {
    uint64_t *f = arg;
    if (!f || ((*f & FI_TRANSMIT) != 0) == ((*f & FI_RECV) != 0)) {
      ret = -FI_EINVAL;
      break;
    }
    uint64_t *target = (*f & FI_TRANSMIT) ? &ep->tx_op_flags : &ep->rx_op_flags;
    if (command == FI_GETOPSFLAG)
      *f = *target | (*f & (FI_TRANSMIT | FI_RECV));
    else
      *target = *f & ~(FI_TRANSMIT | FI_RECV);
    ret = 0;
    break;
  }
  default:
    ret = -FI_ENOSYS;
  }
  ofx_unlock(ep->dom);
  return ret;
}

static int ep_ops_open(struct fid *fid, const char *name, uint64_t flags,
                       void **ops, void *context) {
  (void)fid, (void)name, (void)flags, (void)ops, (void)context;
  return -FI_ENOSYS;
}

static struct fi_ops ep_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = ep_close,
    .bind = ep_bind,
    .control = ep_control,
    .ops_open = ep_ops_open,
};

int ofx_endpoint(struct fid_domain *domain, struct fi_info *info,
                 struct fid_ep **fep, void *context) {
  struct ofx_domain *d = (struct ofx_domain *)domain;
  if (!domain || !info || !fep)
    return -FI_EINVAL;
  if (info->ep_attr && info->ep_attr->type != FI_EP_RDM &&
      info->ep_attr->type != FI_EP_UNSPEC)
    return -FI_EINVAL;
  if (info->caps & ~(OFX_CAPS | OFX_RMA_CAPS | FI_REMOTE_CQ_DATA | FI_SHARED_AV |
                     FI_TRANSMIT))
    return -FI_EINVAL;
  struct ofx_ep *ep = calloc(1, sizeof *ep);
  if (!ep)
    return -FI_ENOMEM;
  ep->fid.fid.fclass = FI_CLASS_EP;
  ep->fid.fid.context = context;
  ep->fid.fid.ops = &ep_fi_ops;
  ep->fid.ops = &ep_ops;
  ep->fid.cm = &cm_ops;
  ep->fid.msg = &msg_ops;
  ep->fid.tagged = &tagged_ops;
  ep->fid.rma = &ofx_rma_ops;
  ep->fid.atomic = &ofx_atomic_ops;
  ep->dom = d;
  ep->caps = info->caps ? info->caps : OFX_CAPS;
  ep->tx_op_flags = info->tx_attr ? info->tx_attr->op_flags : 0;
  ep->rx_op_flags = info->rx_attr ? info->rx_attr->op_flags : 0;
  ep->pending.next = ep->pending.prev = &ep->pending;
  ep->stash_tail = &ep->stash;
  ep->want_eid = MX_ANY_ENDPOINT;
  ep->want_key = OFX_KEY;
  ep->min_multi_recv = OFX_MIN_MULTI_RECV;
  ep->name.nic_id = UINT64_MAX;
  if (info->src_addr && info->src_addrlen == sizeof(struct ofx_name)) {
    const struct ofx_name *nm = info->src_addr;
    ep->want_eid = nm->eid;
    ep->name.nic_id = nm->nic_id;
    if (nm->eid != MX_ANY_ENDPOINT && nm->key)
      ep->want_key = nm->key;
  }
  ofx_lock(d);
  d->refs++;
  ep->dom_next = d->eps;
  d->eps = ep;
  ofx_unlock(d);
  *fep = &ep->fid;
  return 0;
}
