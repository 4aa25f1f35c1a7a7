/* omx_fi.c - the libfabric provider "omx": provider entry point, fi_getinfo,
 * fabric, domain, memory registration and event queue. */
#include "omx_fi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- MX library, once per process ---- */

static pthread_once_t mx_once = PTHREAD_ONCE_INIT;
static int mx_init_rc;

static void mx_init_once(void) {
  mx_return_t rc = mx_init();
  if (rc != MX_SUCCESS && rc != MX_ALREADY_INITIALIZED) {
    mx_init_rc = -FI_ENODEV;
    return;
  }
  /* Failures come back as codes, never exit the process. */
  mx_set_error_handler(MX_ERRORS_RETURN);
}

int ofx_mx_init(void) {
  pthread_once(&mx_once, mx_init_once);
  return mx_init_rc;
}

int ofx_errno(mx_return_t rc) {
  switch (rc) {
  case MX_SUCCESS:
    return 0;
  case MX_NO_RESOURCES:
    return -FI_ENOMEM;
  case MX_BAD_SEG_CNT:
  case MX_BAD_SEG_LIST:
  case MX_BAD_MATCH_MASK:
  case MX_BAD_PARAM_VAL:
    return -FI_EINVAL;
  case MX_BUSY:
    return -FI_EBUSY;
  case MX_TIMEOUT:
    return -FI_ETIMEDOUT;
  case MX_CONNECTION_FAILED:
  case MX_NIC_NOT_FOUND:
  case MX_HOST_NOT_FOUND:
  case MX_BAD_ENDPOINT_ID:
    return -FI_EHOSTUNREACH;
  case MX_BAD_CONNECTION_KEY:
    return -FI_EACCES;
  case MX_BOARD_UNKNOWN:
  case MX_NO_DEV:
    return -FI_ENODEV;
  default:
    return -FI_EIO;
  }
}

/* A node's nic id: an IP address or a host name resolving to one, localhost,
 * or an omx board name (omx_resolve_node: the runtime's one mapping). */
int ofx_lookup_host(const char *node, uint64_t *nic) {
  if (!node || !*node)
    return -FI_EINVAL;
  return omx_resolve_node(node, OFX_RESOLVE_MS, nic) == MX_SUCCESS
             ? 0
             : -FI_EADDRNOTAVAIL;
}

/* A service: empty = any endpoint; 0..31 = that MX endpoint index (omx's own
 * addressing, provider key); any other port = the endpoint and key the
 * runtime maps it to (omx_port_endpoint), so a port names one process. */
int ofx_parse_service(const char *service, uint32_t *eid, uint32_t *key) {
  *eid = MX_ANY_ENDPOINT;
  *key = OFX_KEY;
  if (!service || !*service)
    return 0;
  char *end;
  errno = 0;
  unsigned long v = strtoul(service, &end, 10);
  if (*end || errno || v > 65535 || *service == '-' || *service == '+')
    return -FI_EINVAL;
  if (v < OFX_INDEX_SERVICES) {
    *eid = (uint32_t)v;
    return 0;
  }
  return omx_port_endpoint((uint32_t)v, eid, key) == MX_SUCCESS ? 0 : -FI_EINVAL;
}

/* A domain opened FI_THREAD_DOMAIN is serialized by the application (MX's
 * progress thread never enters the provider): no lock to take. */
void ofx_lock(struct ofx_domain *d) {
  if (!d->serialized)
    pthread_mutex_lock(&d->lock);
}
void ofx_unlock(struct ofx_domain *d) {
  if (!d->serialized)
    pthread_mutex_unlock(&d->lock);
}

/* ---- fi_getinfo ---- */

#define OFX_MSG_ORDER FI_ORDER_SAS
#define OFX_TX_OP_FLAGS                                                        \
  (FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE |     \
   FI_DELIVERY_COMPLETE | FI_REMOTE_CQ_DATA)
#define OFX_RX_OP_FLAGS (FI_COMPLETION)

/* Hints asking for something we lack: ENODATA, and the reason in libfabric's log
 * (FI_LOG_LEVEL=info), since applications only say that no provider matched. */
#define REFUSE_IF(cond)                                                        \
  do {                                                                         \
    if (cond) {                                                                \
      FI_INFO(&ofx_prov, FI_LOG_CORE, "hints refused: %s\n", #cond);          \
      return -FI_ENODATA;                                                      \
    }                                                                          \
  } while (0)

static int check_hints(const struct fi_info *h) {
  if (!h)
    return 0;
  REFUSE_IF(h->caps & ~(OFX_CAPS | OFX_RMA_CAPS | FI_REMOTE_CQ_DATA | FI_SHARED_AV |
                        FI_TRANSMIT | FI_RECV));
  /* RMA windows are keyed, addressed by offset: the application must take
   * provider keys or give keys below 2^32 (mr_mode without FI_MR_VIRT_ADDR
   * is always acceptable). */
  REFUSE_IF(h->addr_format != FI_FORMAT_UNSPEC);
  if (h->ep_attr) {
    const struct fi_ep_attr *e = h->ep_attr;
    REFUSE_IF(e->type != FI_EP_UNSPEC && e->type != FI_EP_RDM);
    REFUSE_IF(e->protocol != FI_PROTO_UNSPEC);
    REFUSE_IF(e->max_msg_size > OFX_MAX_MSG);
    /* Tag bits beyond ours: the answer's format has its upper bits cleared, which
     * tells the application how many it has (FI_TAG_BITS, libfabric 1.x's rule). */
    REFUSE_IF(e->tx_ctx_cnt > 1 || e->rx_ctx_cnt > 1);
    REFUSE_IF(e->auth_key_size);
  }
  if (h->domain_attr) {
    const struct fi_domain_attr *d = h->domain_attr;
    /* RMA addresses are offsets: FI_MR_BASIC's virtual addresses are not offered. */
    REFUSE_IF((h->caps & OFX_RMA_CAPS) &&
        (d->mr_mode & FI_MR_BASIC));
    REFUSE_IF(d->name && strcmp(d->name, OFX_NAME));
    REFUSE_IF(d->cq_data_size > sizeof(uint32_t));
    REFUSE_IF(d->av_type != FI_AV_UNSPEC && d->av_type != FI_AV_MAP &&
        d->av_type != FI_AV_TABLE);
    /* mr_mode: modes the application accepts; we need none of them. */
    REFUSE_IF(d->caps & ~(FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SHARED_AV));
    REFUSE_IF(d->auth_key_size);
  }
  if (h->fabric_attr) {
    const struct fi_fabric_attr *f = h->fabric_attr;
    REFUSE_IF(f->name && strcmp(f->name, OFX_NAME));
    REFUSE_IF(f->prov_name && strcmp(f->prov_name, OFX_NAME) &&
        !strstr(f->prov_name, OFX_NAME));
  }
  if (h->tx_attr) {
    const struct fi_tx_attr *t = h->tx_attr;
    REFUSE_IF(t->msg_order & ~OFX_MSG_ORDER);
    REFUSE_IF(t->comp_order & ~FI_ORDER_NONE);
    REFUSE_IF(t->inject_size > OFX_INJECT_SIZE || t->iov_limit > OFX_IOV_LIMIT);
    REFUSE_IF(t->op_flags & ~OFX_TX_OP_FLAGS);
    REFUSE_IF(t->caps & ~(OFX_CAPS | OFX_RMA_CAPS | FI_TRANSMIT));
  }
  if (h->rx_attr) {
    const struct fi_rx_attr *r = h->rx_attr;
    REFUSE_IF(r->msg_order & ~OFX_MSG_ORDER);
    REFUSE_IF(r->comp_order & ~FI_ORDER_NONE);
    REFUSE_IF(r->iov_limit > OFX_IOV_LIMIT);
    REFUSE_IF(r->op_flags & ~(OFX_RX_OP_FLAGS | FI_MULTI_RECV));
    REFUSE_IF(r->caps & ~(OFX_CAPS | OFX_RMA_CAPS | FI_RECV | FI_REMOTE_CQ_DATA));
  }
  return 0;
}

/* node/service: with FI_SOURCE (or no node) a local endpoint, service = its
 * MX endpoint index; otherwise a destination "host[:board]" + index. */
static int resolve_addr(const char *node, const char *service, uint64_t flags,
                        struct ofx_name *src, bool *has_src,
                        struct ofx_name *dst, bool *has_dst) {
  uint32_t eid, key;
  if (ofx_parse_service(service, &eid, &key))
    return -FI_ENODATA;
  *has_src = *has_dst = false;
  if ((flags & FI_SOURCE) || !node) {
    if (node && *node) {
      uint64_t nic;
      uint32_t board;
      if (ofx_lookup_host(node, &nic) ||
          mx_nic_id_to_board_number(nic, &board) != MX_SUCCESS)
        return -FI_ENODATA;
      src->nic_id = nic;
    } else if (mx_board_number_to_nic_id(0, &src->nic_id) != MX_SUCCESS) {
      return -FI_ENODATA;
    }
    src->eid = eid;
    src->key = key;
    *has_src = true;
    return 0;
  }
  uint64_t nic;
  uint32_t board;
  if (ofx_lookup_host(node, &nic))
    return -FI_ENODATA;
  if (eid == MX_ANY_ENDPOINT) {
    /* No service: a node of this host names where to open (fabtests pass their
     * -s address so); a peer's node needs its endpoint. */
    if (mx_nic_id_to_board_number(nic, &board) != MX_SUCCESS)
      return -FI_ENODATA;
    src->nic_id = nic;
    src->eid = MX_ANY_ENDPOINT;
    src->key = OFX_KEY;
    *has_src = true;
    return 0;
  }
  dst->nic_id = nic;
  dst->eid = eid;
  dst->key = key;
  *has_dst = true;
  /* The source: this host's first board, any endpoint. */
  if (mx_board_number_to_nic_id(0, &src->nic_id) == MX_SUCCESS) {
    src->eid = MX_ANY_ENDPOINT;
    src->key = OFX_KEY;
    *has_src = true;
  }
  return 0;
}

static struct fi_info *make_info(uint32_t version, const struct fi_info *h) {
  struct fi_info *fi = fi_allocinfo();
  if (!fi)
    return NULL;
  uint64_t caps = OFX_CAPS | FI_REMOTE_CQ_DATA;
  if (h && h->caps) {
    /* Secondary caps only when asked; primaries asked, or all when none is. */
    uint64_t prim = h->caps & (FI_MSG | FI_TAGGED | OFX_REMOTE_CAPS);
    uint64_t dirs = h->caps & (FI_SEND | FI_RECV);
    uint64_t rma_dirs = h->caps & (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE);
    if (rma_dirs && !(prim & OFX_REMOTE_CAPS))
      prim |= FI_RMA;
    if ((prim & OFX_REMOTE_CAPS) && !rma_dirs)
      rma_dirs = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    caps = (prim ? prim : (FI_MSG | FI_TAGGED)) | rma_dirs |
           (dirs ? dirs : (FI_SEND | FI_RECV)) |
           (h->caps & (FI_SOURCE | FI_DIRECTED_RECV | FI_REMOTE_CQ_DATA |
                       FI_MULTI_RECV | FI_SHARED_AV)) |
           FI_LOCAL_COMM | FI_REMOTE_COMM;
  }
  fi->caps = caps;
  fi->mode = 0;
  fi->addr_format = FI_FORMAT_UNSPEC;

  /* tx/rx caps: the primary and modifier caps of each side (domain caps and
   * FI_REMOTE_CQ_DATA belong to the info only). */
  fi->tx_attr->caps =
      caps & (FI_MSG | FI_TAGGED | FI_SEND | OFX_REMOTE_CAPS | FI_READ | FI_WRITE);
  fi->tx_attr->op_flags = (h && h->tx_attr) ? h->tx_attr->op_flags : 0;
  fi->tx_attr->msg_order = OFX_MSG_ORDER;
  fi->tx_attr->comp_order = FI_ORDER_NONE;
  fi->tx_attr->inject_size = OFX_INJECT_SIZE;
  fi->tx_attr->size = 65536;
  fi->tx_attr->iov_limit = OFX_IOV_LIMIT;
  fi->tx_attr->rma_iov_limit = (caps & OFX_REMOTE_CAPS) ? 1 : 0;

  fi->rx_attr->caps = caps & (FI_MSG | FI_TAGGED | FI_RECV | FI_SOURCE | FI_DIRECTED_RECV |
                              FI_MULTI_RECV | OFX_REMOTE_CAPS | FI_REMOTE_READ |
                              FI_REMOTE_WRITE);
  fi->rx_attr->op_flags = (h && h->rx_attr) ? h->rx_attr->op_flags : 0;
  fi->rx_attr->msg_order = OFX_MSG_ORDER;
  fi->rx_attr->comp_order = FI_ORDER_NONE;
  fi->rx_attr->total_buffered_recv = 0;
  fi->rx_attr->size = 65536;
  fi->rx_attr->iov_limit = OFX_IOV_LIMIT;

  fi->ep_attr->type = FI_EP_RDM;
  fi->ep_attr->protocol = FI_PROTO_UNSPEC;
  fi->ep_attr->protocol_version = 1;
  fi->ep_attr->max_msg_size = OFX_MAX_MSG;
  fi->ep_attr->msg_prefix_size = 0;
  fi->ep_attr->max_order_raw_size = 0;
  fi->ep_attr->max_order_war_size = 0;
  fi->ep_attr->max_order_waw_size = 0;
  /* FI_TAG_BITS: the requested format with the bits we reserve cleared (the
   * upper ones), or all our bits. */
  uint64_t tag_format = h && h->ep_attr ? h->ep_attr->mem_tag_format : 0;
  if (FI_VERSION_GE(version, FI_VERSION(2, 0)) && tag_format < (1ULL << 16))
    tag_format = 0; /* one of 2.x's named formats: plain bits is what we do */
  fi->ep_attr->mem_tag_format = tag_format ? tag_format & OFX_TAG_MASK : OFX_TAG_MASK;
  fi->ep_attr->tx_ctx_cnt = 1;
  fi->ep_attr->rx_ctx_cnt = 1;

  struct fi_domain_attr *d = fi->domain_attr;
  d->name = strdup(OFX_NAME);
  d->threading = (h && h->domain_attr && h->domain_attr->threading)
                     ? h->domain_attr->threading
                     : FI_THREAD_SAFE;
  /* MX progresses in a background thread: automatic, which also serves
   * applications that promise to drive progress themselves. */
  d->control_progress = (h && h->domain_attr && h->domain_attr->control_progress)
                            ? h->domain_attr->control_progress
                            : FI_PROGRESS_AUTO;
  d->data_progress = (h && h->domain_attr && h->domain_attr->data_progress)
                         ? h->domain_attr->data_progress
                         : FI_PROGRESS_AUTO;
  d->resource_mgmt = FI_RM_ENABLED;
  d->av_type = (h && h->domain_attr) ? h->domain_attr->av_type : FI_AV_UNSPEC;
  /* RMA: provider keys when the application takes them, windows addressed
   * by offset (no FI_MR_VIRT_ADDR). */
  d->mr_mode = ((caps & OFX_REMOTE_CAPS) && h && h->domain_attr &&
                (h->domain_attr->mr_mode & FI_MR_PROV_KEY))
                   ? FI_MR_PROV_KEY
                   : 0;
  /* The v1.0 modes: FI_MR_SCALABLE is what omx does (the application's keys,
   * offsets); FI_MR_BASIC (virtual addresses) is refused in check_hints. */
  if ((caps & OFX_REMOTE_CAPS) && ((h && h->domain_attr && h->domain_attr->mr_mode == FI_MR_SCALABLE) ||
                          (FI_VERSION_LT(version, FI_VERSION(1, 5)) &&
                           (!h || !h->domain_attr || h->domain_attr->mr_mode == FI_MR_UNSPEC))))
    d->mr_mode = FI_MR_SCALABLE;
  d->mr_key_size = sizeof(uint64_t);
  d->cq_data_size = sizeof(uint32_t);
  d->cq_cnt = 256;
  d->ep_cnt = 32;
  d->tx_ctx_cnt = 32;
  d->rx_ctx_cnt = 32;
  d->max_ep_tx_ctx = 1;
  d->max_ep_rx_ctx = 1;
  d->max_ep_stx_ctx = 0;
  d->max_ep_srx_ctx = 0;
  d->cntr_cnt = 256;
  d->mr_iov_limit = 1;
  uint64_t dom_hint = h && h->domain_attr ? h->domain_attr->caps : 0;
  d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM | ((caps | dom_hint) & FI_SHARED_AV);
  d->mr_cnt = 65536;

  fi->fabric_attr->name = strdup(OFX_NAME);
  fi->fabric_attr->prov_version = OFX_PROV_VERSION;
  if (!d->name || !fi->fabric_attr->name) {
    fi_freeinfo(fi);
    return NULL;
  }
  return fi;
}

static int ofx_getinfo(uint32_t version, const char *node, const char *service,
                       uint64_t flags, const struct fi_info *hints,
                       struct fi_info **info) {
  if (!info)
    return -FI_EINVAL;
  *info = NULL;
  int ret = check_hints(hints);
  if (ret)
    return ret;
  if (ofx_mx_init())
    return -FI_ENODATA;
  uint32_t nics = 0;
  if (mx_get_info(NULL, MX_NIC_COUNT, NULL, 0, &nics, sizeof nics) !=
          MX_SUCCESS ||
      nics == 0)
    return -FI_ENODATA;

  struct ofx_name src, dst;
  bool has_src = false, has_dst = false;
  ret = resolve_addr(node, service, flags, &src, &has_src, &dst, &has_dst);
  if (ret)
    return ret;
  if (hints && hints->src_addr) {
    if (hints->src_addrlen != sizeof(struct ofx_name))
      return -FI_ENODATA;
    memcpy(&src, hints->src_addr, sizeof src);
    has_src = true;
  }
  if (hints && hints->dest_addr && !has_dst) {
    if (hints->dest_addrlen != sizeof(struct ofx_name))
      return -FI_ENODATA;
    memcpy(&dst, hints->dest_addr, sizeof dst);
    has_dst = true;
  }

  struct fi_info *fi = make_info(version, hints);
  if (!fi)
    return -FI_ENOMEM;
  if (has_src) {
    fi->src_addr = malloc(sizeof src);
    if (!fi->src_addr)
      goto nomem;
    memcpy(fi->src_addr, &src, sizeof src);
    fi->src_addrlen = sizeof src;
  }
  if (has_dst) {
    fi->dest_addr = malloc(sizeof dst);
    if (!fi->dest_addr)
      goto nomem;
    memcpy(fi->dest_addr, &dst, sizeof dst);
    fi->dest_addrlen = sizeof dst;
  }
  *info = fi;
  return 0;
nomem:
  fi_freeinfo(fi);
  return -FI_ENOMEM;
}

/* ---- operations an object does not have ---- */

static int no_bind(struct fid *fid, struct fid *bfid, uint64_t flags) {
  (void)fid, (void)bfid, (void)flags;
  return -FI_ENOSYS;
}
static int no_control(struct fid *fid, int command, void *arg) {
  (void)fid, (void)command, (void)arg;
  return -FI_ENOSYS;
}
static int no_ops_open(struct fid *fid, const char *name, uint64_t flags,
                       void **ops, void *context) {
  (void)fid, (void)name, (void)flags, (void)ops, (void)context;
  return -FI_ENOSYS;
}

/* ---- memory registration: local use needs nothing (MX takes any memory);
 * remote access exposes the region (omx_fi_rma.c) ---- */

static int mr_close(struct fid *fid) {
  struct ofx_mr *m = (struct ofx_mr *)fid;
  ofx_lock(m->dom);
  ofx_mr_unexpose(m);
  m->dom->refs--;
  ofx_unlock(m->dom);
  free(m);
  return 0;
}

static struct fi_ops mr_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = mr_close,
    .bind = no_bind,
    .control = no_control,
    .ops_open = no_ops_open,
};

static int mr_regv(struct fid *fid, const struct iovec *iov, size_t count,
                   uint64_t access, uint64_t offset, uint64_t requested_key,
                   uint64_t flags, struct fid_mr **mr, void *context) {
  struct ofx_domain *d = (struct ofx_domain *)fid;
  (void)offset;
  if (!mr || (count && !iov) || count > 1 || flags)
    return -FI_EINVAL;
  /* Remote access only on a domain opened for RMA. */
  uint64_t remote = access & (FI_REMOTE_READ | FI_REMOTE_WRITE);
  if (remote && !(d->caps & OFX_REMOTE_CAPS))
    return -FI_EINVAL;
  struct ofx_mr *m = calloc(1, sizeof *m);
  if (!m)
    return -FI_ENOMEM;
  m->mr.fid.fclass = FI_CLASS_MR;
  m->mr.fid.context = context;
  m->mr.fid.ops = &mr_fi_ops;
  m->mr.mem_desc = m;
  m->dom = d;
  m->base = count ? iov[0].iov_base : NULL;
  m->len = count ? iov[0].iov_len : 0;
  ofx_lock(d);
  int ret = 0;
  if (remote)
    ret = ofx_mr_reg_remote(m, access, requested_key);
  else
    m->mr.key = d->mr_key++;
  if (!ret)
    d->refs++;
  ofx_unlock(d);
  if (ret) {
    free(m);
    return ret;
  }
  *mr = &m->mr;
  return 0;
}

static int mr_reg(struct fid *fid, const void *buf, size_t len,
                  uint64_t access, uint64_t offset, uint64_t requested_key,
                  uint64_t flags, struct fid_mr **mr, void *context) {
  struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
  return mr_regv(fid, &iov, 1, access, offset, requested_key, flags, mr,
                 context);
}

static int mr_regattr(struct fid *fid, const struct fi_mr_attr *attr,
                      uint64_t flags, struct fid_mr **mr) {
  if (!attr)
    return -FI_EINVAL;
  if (attr->iface != FI_HMEM_SYSTEM)
    return -FI_ENOSYS;
  return mr_regv(fid, attr->mr_iov, attr->iov_count, attr->access,
                 attr->offset, attr->requested_key, flags, mr, attr->context);
}

static struct fi_ops_mr mr_ops = {
    .size = sizeof(struct fi_ops_mr),
    .reg = mr_reg,
    .regv = mr_regv,
    .regattr = mr_regattr,
};

/* ---- domain ---- */

static int domain_close(struct fid *fid) {
  struct ofx_domain *d = (struct ofx_domain *)fid;
  if (d->refs)
    return -FI_EBUSY;
  pthread_mutex_destroy(&d->lock);
  free(d);
  return 0;
}

static struct fi_ops domain_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = domain_close,
    .bind = no_bind,
    .control = no_control,
    .ops_open = no_ops_open,
};

static int no_scalable_ep(struct fid_domain *d, struct fi_info *i,
                          struct fid_ep **ep, void *c) {
  (void)d, (void)i, (void)ep, (void)c;
  return -FI_ENOSYS;
}
static int no_stx_ctx(struct fid_domain *d, struct fi_tx_attr *a,
                      struct fid_stx **s, void *c) {
  (void)d, (void)a, (void)s, (void)c;
  return -FI_ENOSYS;
}
static int no_srx_ctx(struct fid_domain *d, struct fi_rx_attr *a,
                      struct fid_ep **e, void *c) {
  (void)d, (void)a, (void)e, (void)c;
  return -FI_ENOSYS;
}
static int no_query_collective(struct fid_domain *d, enum fi_collective_op o,
                               struct fi_collective_attr *a, uint64_t f) {
  (void)d, (void)o, (void)a, (void)f;
  return -FI_EOPNOTSUPP;
}
static int endpoint2(struct fid_domain *d, struct fi_info *info,
                     struct fid_ep **ep, uint64_t flags, void *context) {
  if (flags)
    return -FI_EINVAL;
  return ofx_endpoint(d, info, ep, context);
}

static struct fi_ops_domain domain_ops = {
    .size = sizeof(struct fi_ops_domain),
    .av_open = ofx_av_open,
    .cq_open = ofx_cq_open,
    .endpoint = ofx_endpoint,
    .scalable_ep = no_scalable_ep,
    .cntr_open = ofx_cntr_open,
    .poll_open = ofx_poll_open,
    .stx_ctx = no_stx_ctx,
    .srx_ctx = no_srx_ctx,
    .query_atomic = ofx_query_atomic,
    .query_collective = no_query_collective,
    .endpoint2 = endpoint2,
};

static int domain_open(struct fid_fabric *fabric, struct fi_info *info,
                       struct fid_domain **dom, void *context) {
  if (!fabric || !info || !dom)
    return -FI_EINVAL;
  if (info->domain_attr && info->domain_attr->name &&
      strcmp(info->domain_attr->name, OFX_NAME))
    return -FI_EINVAL;
  struct ofx_domain *d = calloc(1, sizeof *d);
  if (!d)
    return -FI_ENOMEM;
  pthread_mutex_init(&d->lock, NULL);
  d->fid.fid.fclass = FI_CLASS_DOMAIN;
  d->fid.fid.context = context;
  d->fid.fid.ops = &domain_fi_ops;
  d->fid.ops = &domain_ops;
  d->fid.mr = &mr_ops;
  d->caps = info->caps ? info->caps : OFX_CAPS;
  d->av_type = info->domain_attr ? info->domain_attr->av_type : FI_AV_UNSPEC;
  d->serialized =
      info->domain_attr && info->domain_attr->threading == FI_THREAD_DOMAIN;
  d->mr_key = 1;
  d->prov_key = info->domain_attr && (info->domain_attr->mr_mode & FI_MR_PROV_KEY);
  *dom = &d->fid;
  return 0;
}

static int domain2_open(struct fid_fabric *fabric, struct fi_info *info,
                        struct fid_domain **dom, uint64_t flags,
                        void *context) {
  if (flags)
    return -FI_EINVAL;
  return domain_open(fabric, info, dom, context);
}

/* ---- event queue: the provider raises no asynchronous events ---- */

static int eq_close(struct fid *fid) {
  free(fid);
  return 0;
}

static struct fi_ops eq_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = eq_close,
    .bind = no_bind,
    .control = no_control,
    .ops_open = no_ops_open,
};

static ssize_t eq_read(struct fid_eq *eq, uint32_t *event, void *buf,
                       size_t len, uint64_t flags) {
  (void)eq, (void)event, (void)buf, (void)len, (void)flags;
  return -FI_EAGAIN;
}
static ssize_t eq_readerr(struct fid_eq *eq, struct fi_eq_err_entry *buf,
                          uint64_t flags) {
  (void)eq, (void)buf, (void)flags;
  return -FI_EAGAIN;
}
static ssize_t eq_write(struct fid_eq *eq, uint32_t event, const void *buf,
                        size_t len, uint64_t flags) {
  (void)eq, (void)event, (void)buf, (void)len, (void)flags;
  return -FI_ENOSYS;
}
static ssize_t eq_sread(struct fid_eq *eq, uint32_t *event, void *buf,
                        size_t len, int timeout, uint64_t flags) {
  (void)eq, (void)event, (void)buf, (void)len, (void)flags;
  if (timeout < 0)
    return -FI_EINVAL; /* nothing will ever arrive: refuse to hang */
  struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) && errno == EINTR)
    ;
  return -FI_EAGAIN;
}
static const char *eq_strerror(struct fid_eq *eq, int prov_errno,
                               const void *err_data, char *buf, size_t len) {
  (void)eq, (void)err_data;
  const char *s = mx_strstatus((mx_status_code_t)prov_errno);
  if (buf && len) {
    snprintf(buf, len, "%s", s);
    return buf;
  }
  return s;
}

static struct fi_ops_eq eq_ops = {
    .size = sizeof(struct fi_ops_eq),
    .read = eq_read,
    .readerr = eq_readerr,
    .write = eq_write,
    .sread = eq_sread,
    .strerror = eq_strerror,
};

int ofx_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
                struct fid_eq **eq, void *context) {
  if (!fabric || !attr || !eq)
    return -FI_EINVAL;
  if (attr->wait_obj != FI_WAIT_NONE && attr->wait_obj != FI_WAIT_UNSPEC)
    return -FI_ENOSYS;
  /* FI_WRITE asks for fi_eq_write (fi_eq(3): "must be supported by the
   * provider"), which this EQ has not: refuse it here, not at the write. */
  if (attr->flags & FI_WRITE)
    return -FI_ENOSYS;
  struct ofx_eq *q = calloc(1, sizeof *q);
  if (!q)
    return -FI_ENOMEM;
  q->fid.fid.fclass = FI_CLASS_EQ;
  q->fid.fid.context = context;
  q->fid.fid.ops = &eq_fi_ops;
  q->fid.ops = &eq_ops;
  *eq = &q->fid;
  return 0;
}

/* ---- fabric ---- */

static int fabric_close(struct fid *fid) {
  free(fid);
  return 0;
}

static struct fi_ops fabric_fi_ops = {
    .size = sizeof(struct fi_ops),
    .close = fabric_close,
    .bind = no_bind,
    .control = no_control,
    .ops_open = no_ops_open,
};

static int no_passive_ep(struct fid_fabric *f, struct fi_info *i,
                         struct fid_pep **p, void *c) {
  (void)f, (void)i, (void)p, (void)c;
  return -FI_ENOSYS;
}
static int no_wait_open(struct fid_fabric *f, struct fi_wait_attr *a,
                        struct fid_wait **w) {
  (void)f, (void)a, (void)w;
  return -FI_ENOSYS;
}

static struct fi_ops_fabric fabric_ops = {
    .size = sizeof(struct fi_ops_fabric),
    .domain = domain_open,
    .passive_ep = no_passive_ep,
    .eq_open = ofx_eq_open,
    .wait_open = no_wait_open,
    .trywait = ofx_trywait,
    .domain2 = domain2_open,
};

static int ofx_fabric(struct fi_fabric_attr *attr, struct fid_fabric **fabric,
                      void *context) {
  if (!attr || !fabric)
    return -FI_EINVAL;
  if (attr->name && strcmp(attr->name, OFX_NAME))
    return -FI_ENODATA;
  int ret = ofx_mx_init();
  if (ret)
    return ret;
  struct ofx_fabric *f = calloc(1, sizeof *f);
  if (!f)
    return -FI_ENOMEM;
  f->fid.fid.fclass = FI_CLASS_FABRIC;
  f->fid.fid.context = context;
  f->fid.fid.ops = &fabric_fi_ops;
  f->fid.ops = &fabric_ops;
  *fabric = &f->fid;
  return 0;
}

static void ofx_cleanup(void) {
  /* mx_finalize would break a later re-initialisation by the application's
   * other users of libmyriexpress in the same process: leave MX running. */
}

struct fi_provider ofx_prov = {
    .version = OFX_PROV_VERSION,
    .fi_version = FI_VERSION(1, 17),
    .name = OFX_NAME,
    .getinfo = ofx_getinfo,
    .fabric = ofx_fabric,
    .cleanup = ofx_cleanup,
};

/* The interface version announced is that of the libfabric core loading the provider
 * (1.17 when built): cores refuse providers older than what an application requests,
 * and MPICH's bundled 2.x core requests its own version. The structures the provider
 * fills only grew at their ends from 1.17 to 2.x, and the 2.0 removals (FI_MR_BASIC,
 * FI_MR_SCALABLE for new versions, wait sets) are not offered to 2.x callers. */
FI_EXT_INI {
  uint32_t core = fi_version();
  if (FI_VERSION_GE(core, ofx_prov.fi_version))
    ofx_prov.fi_version = core;
  return &ofx_prov;
}
