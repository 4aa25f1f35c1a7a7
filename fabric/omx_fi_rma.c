/* omx_fi_rma.c - RMA over MX's one-sided put/get (native wire mode only).
 *
 * A memory registration with remote access is exposed on every enabled
 * endpoint of its domain as the MX window key << 32 (omx_expose_window), its
 * region id the key. A remote fi_write/fi_read with key K at offset O names
 * MX address (K << 32) + O: a wrong key names no window and a range past the
 * region's end leaves its window, so the target refuses the access
 * (MX_STATUS_BAD_RDMAWIN: FI_EACCES at the initiator) and not one byte is
 * read or written. Keys are below 2^32: random ones (FI_MR_PROV_KEY) or the
 * application's requested_key; addresses are offsets (no FI_MR_VIRT_ADDR).
 * fi_writedata: the put carries a notice (omx_iput_notify): once the write is
 * in place, omx's progress at the initiator sends the target an untagged
 * message with OFX_NOTIFY_BIT (the CQ data and the write's length), which no
 * application receive matches, without waiting for any call of the
 * initiator's application (fi_inject_writedata never reads a CQ for it). The
 * target keeps a receive posted for them and reports each as a completion with
 * FI_REMOTE_CQ_DATA. */
#include "omx_fi.h"

#include <string.h>
#include <sys/random.h>

#define OFX_WINDOW_SHIFT 32
#define OFX_KEY_LIMIT (1ULL << 32)

/* ---- registrations ---- */

static bool key_used(struct ofx_domain *d, uint64_t key) {
  for (struct ofx_mr *m = d->mrs; m; m = m->next)
    if (m->mr.key == key)
      return true;
  return false;
}

static int expose_on(struct ofx_mr *m, struct ofx_ep *ep) {
  if (!ep->enabled)
    return 0;
  mx_return_t rc = omx_expose_window(ep->mx, m->base, m->len,
                                     m->mr.key << OFX_WINDOW_SHIFT, m->mr.key, m->expose);
  return rc == MX_SUCCESS ? 0 : rc == MX_BUSY ? -FI_ENOKEY : -FI_EINVAL;
}

static void unexpose_from(struct ofx_mr *m, struct ofx_ep *until) {
  for (struct ofx_ep *ep = m->dom->eps; ep && ep != until; ep = ep->dom_next)
    if (ep->enabled)
      omx_unexpose_region(ep->mx, m->mr.key);
}

/* Under the lock: a key for m and its exposure on the domain's endpoints. */
int ofx_mr_reg_remote(struct ofx_mr *m, uint64_t access, uint64_t requested_key) {
  struct ofx_domain *d = m->dom;
  if (m->len >= OFX_KEY_LIMIT || (!m->base && m->len))
    return -FI_EINVAL; /* a window is 4 GiB */
  m->expose = ((access & FI_REMOTE_READ) ? OMX_REGION_READ : 0) |
              ((access & FI_REMOTE_WRITE) ? OMX_REGION_WRITE : 0);
  uint64_t key = requested_key;
  if (d->prov_key) {
    do {
      uint32_t r = 0;
      if (getrandom(&r, sizeof r, 0) != sizeof r)
        return -FI_EIO;
      key = r;
    } while (key == 0 || key_used(d, key));
  } else if (key >= OFX_KEY_LIMIT || key_used(d, key)) {
    return -FI_ENOKEY;
  }
  m->mr.key = key;
  for (struct ofx_ep *ep = d->eps; ep; ep = ep->dom_next) {
    int ret = expose_on(m, ep);
    if (ret) {
      unexpose_from(m, ep);
      return ret;
    }
  }
  m->next = d->mrs;
  d->mrs = m;
  return 0;
}

/* Under the lock: withdraws m from every endpoint (no new access). */
void ofx_mr_unexpose(struct ofx_mr *m) {
  if (!m->expose)
    return;
  unexpose_from(m, NULL);
  for (struct ofx_mr **pp = &m->dom->mrs; *pp; pp = &(*pp)->next)
    if (*pp == m) {
      *pp = m->next;
      break;
    }
}

/* Under the lock, at fi_enable: the domain's registrations on a new endpoint. */
int ofx_mr_expose_all(struct ofx_ep *ep) {
  for (struct ofx_mr *m = ep->dom->mrs; m; m = m->next) {
    int ret = expose_on(m, ep);
    if (ret)
      return ret;
  }
  return 0;
}

void ofx_domain_forget_ep(struct ofx_domain *d, struct ofx_ep *ep) {
  for (struct ofx_ep **pp = &d->eps; *pp; pp = &(*pp)->dom_next)
    if (*pp == ep) {
      *pp = ep->dom_next;
      return;
    }
}

/* ---- remote CQ data: a notification once the write is in place ---- */

/* Under the lock, at fi_enable: an RMA endpoint with a receive CQ keeps a
 * receive posted for the notifications of writes with CQ data. */
int ofx_rma_listen(struct ofx_ep *ep) {
  if (!(ep->caps & FI_RMA) || !ep->rx_cq)
    return 0;
  struct ofx_op *op = ofx_op_get(ep, 0);
  if (!op)
    return -FI_ENOMEM;
  op->kind = OFX_OP_RECV;
  op->ep = ep;
  op->ctx = NULL;
  op->flags = FI_RMA | FI_REMOTE_WRITE;
  op->report = true;
  op->quiet = false;
  op->buf = NULL;
  op->notify = true;
  if (ofx_notify_post(ep, op)) {
    ofx_op_put(ep, op);
    return -FI_EIO;
  }
  ofx_op_track(ep, op);
  return 0;
}

/* ---- operations ---- */

static ssize_t do_rma(struct ofx_ep *ep, void *buf, size_t len, fi_addr_t peer,
                      uint64_t addr, uint64_t key, uint64_t flags, void *ctx, bool write,
                      uint64_t data) {
  if (!(ep->caps & FI_RMA))
    return -FI_EOPNOTSUPP;
  if ((len && !buf) || key >= OFX_KEY_LIMIT || addr >= OFX_KEY_LIMIT ||
      len > OFX_KEY_LIMIT - addr)
    return -FI_EINVAL; /* outside any window the key could name */
  bool inject = (flags & FI_INJECT) != 0;
  if (inject && (len > OFX_INJECT_SIZE || !write))
    return inject && !write ? -FI_EINVAL : -FI_EMSGSIZE;
  ofx_lock(ep->dom);
  ssize_t ret;
  mx_endpoint_addr_t to;
  if (!ep->enabled) {
    ret = -FI_EOPBADSTATE;
    goto out;
  }
  if ((ret = ofx_get_conn(ep, peer, &to)))
    goto out;
  struct ofx_op *op = ofx_op_get(ep, inject ? len : 0);
  if (!op) {
    ret = -FI_EAGAIN;
    goto out;
  }
  void *local = buf;
  if (inject) {
    local = op + 1; /* the data is the op's: the caller's buffer is free now */
    memcpy(local, buf, len);
  }
  op->kind = write ? OFX_OP_WRITE : OFX_OP_READ;
  op->ep = ep;
  op->ctx = ctx;
  op->flags = FI_RMA | (write ? FI_WRITE : FI_READ);
  op->report = !(flags & OFX_NO_COMPLETION) && (!ep->tx_selective || (flags & FI_COMPLETION));
  op->quiet = (flags & OFX_NO_COMPLETION) != 0;
  op->buf = NULL;
  uint64_t remote = (key << OFX_WINDOW_SHIFT) + addr;
  mx_return_t rc;
  if (write && (flags & FI_REMOTE_CQ_DATA)) {
    /* What the target's notification receive takes: header, then the length. */
    struct {
      struct ofx_hdr hdr;
      uint64_t len;
    } notice = {{(uint32_t)data, OFX_HDR_DATA}, len};
    uint64_t match = OFX_NOTIFY_BIT | ((uint64_t)ep->src_id << OFX_SRC_SHIFT);
    rc = omx_iput_notify(ep->mx, local, (uint32_t)len, to, remote, match, &notice,
                         sizeof notice, op, &op->req);
  } else if (write) {
    rc = mx_iput(ep->mx, local, (uint32_t)len, to, remote, op, &op->req);
  } else {
    rc = mx_iget(ep->mx, local, (uint32_t)len, to, remote, op, &op->req);
  }
  if (rc != MX_SUCCESS) {
    ofx_op_put(ep, op);
    ret = rc == MX_BAD_REQUEST ? -FI_EOPNOTSUPP : ofx_errno(rc); /* MX wire mode */
    goto out;
  }
  ofx_op_track(ep, op);
out:
  ofx_unlock(ep->dom);
  return ret;
}

#define EP(e) ((struct ofx_ep *)(e))

static ssize_t rma_read(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src,
                        uint64_t addr, uint64_t key, void *ctx) {
  (void)desc;
  return do_rma(EP(e), buf, len, src, addr, key, EP(e)->tx_op_flags & ~FI_REMOTE_CQ_DATA,
                ctx, false, 0);
}
static ssize_t rma_readv(struct fid_ep *e, const struct iovec *iov, void **desc,
                         size_t count, fi_addr_t src, uint64_t addr, uint64_t key,
                         void *ctx) {
  (void)desc;
  if (count != 1 || !iov)
    return -FI_EINVAL; /* rma_iov_limit 1: MX puts and gets take one buffer */
  return do_rma(EP(e), iov[0].iov_base, iov[0].iov_len, src, addr, key,
                EP(e)->tx_op_flags & ~FI_REMOTE_CQ_DATA, ctx, false, 0);
}
static ssize_t rma_msg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t flags,
                       bool write) {
  if (!m || m->iov_count != 1 || !m->msg_iov || m->rma_iov_count != 1 || !m->rma_iov ||
      m->msg_iov[0].iov_len != m->rma_iov[0].len)
    return -FI_EINVAL;
  if ((flags & FI_REMOTE_CQ_DATA) && !write)
    return -FI_EINVAL; /* CQ data goes with writes */
  return do_rma(EP(e), m->msg_iov[0].iov_base, m->msg_iov[0].iov_len, m->addr,
                m->rma_iov[0].addr, m->rma_iov[0].key, flags & ~OFX_NO_COMPLETION, m->context,
                write, m->data);
}
static ssize_t rma_readmsg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t flags) {
  return rma_msg(e, m, flags, false);
}
static ssize_t rma_write(struct fid_ep *e, const void *buf, size_t len, void *desc,
                         fi_addr_t dest, uint64_t addr, uint64_t key, void *ctx) {
  (void)desc;
  return do_rma(EP(e), (void *)buf, len, dest, addr, key,
                EP(e)->tx_op_flags & ~FI_REMOTE_CQ_DATA, ctx, true, 0);
}
static ssize_t rma_writev(struct fid_ep *e, const struct iovec *iov, void **desc,
                          size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
                          void *ctx) {
  (void)desc;
  if (count != 1 || !iov)
    return -FI_EINVAL;
  return do_rma(EP(e), iov[0].iov_base, iov[0].iov_len, dest, addr, key,
                EP(e)->tx_op_flags & ~FI_REMOTE_CQ_DATA, ctx, true, 0);
}
static ssize_t rma_writemsg(struct fid_ep *e, const struct fi_msg_rma *m, uint64_t flags) {
  return rma_msg(e, m, flags, true);
}
static ssize_t rma_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dest,
                          uint64_t addr, uint64_t key) {
  return do_rma(EP(e), (void *)buf, len, dest, addr, key, FI_INJECT | OFX_NO_COMPLETION, NULL,
                true, 0);
}
static ssize_t rma_writedata(struct fid_ep *e, const void *buf, size_t len, void *desc,
                             uint64_t data, fi_addr_t dest, uint64_t addr, uint64_t key,
                             void *ctx) {
  (void)desc;
  return do_rma(EP(e), (void *)buf, len, dest, addr, key,
                EP(e)->tx_op_flags | FI_REMOTE_CQ_DATA, ctx, true, data);
}
static ssize_t rma_injectdata(struct fid_ep *e, const void *buf, size_t len, uint64_t data,
                              fi_addr_t dest, uint64_t addr, uint64_t key) {
  return do_rma(EP(e), (void *)buf, len, dest, addr, key,
                FI_INJECT | OFX_NO_COMPLETION | FI_REMOTE_CQ_DATA, NULL, true, data);
}

struct fi_ops_rma ofx_rma_ops = {
    .size = sizeof(struct fi_ops_rma),
    .read = rma_read,
    .readv = rma_readv,
    .readmsg = rma_readmsg,
    .write = rma_write,
    .writev = rma_writev,
    .writemsg = rma_writemsg,
    .inject = rma_inject,
    .writedata = rma_writedata,
    .injectdata = rma_injectdata,
};
