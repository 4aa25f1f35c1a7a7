/* ofi_control.c - the control path of the omx provider: fi_getinfo hints,
 * FI_SOURCE/node/service, AV_MAP and AV_TABLE, fi_av_lookup/straddr/remove,
 * selective completion, memory registration, unsupported objects and bad
 * arguments (errors, never crashes or hangs), unreachable peers. */
#include "common.h"

#include <rdma/fi_atomic.h>

#define T 5000.0

static int getinfo(struct fi_info *h, struct fi_info **out) {
  int r = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, out);
  fi_freeinfo(h);
  return r;
}

static void test_getinfo(void) {
  struct fi_info *info = NULL;
  /* Open MPI's OFI MTL hints. */
  struct fi_info *h = t_hints(FI_TAGGED | FI_MSG | FI_LOCAL_COMM | FI_REMOTE_COMM |
                              FI_DIRECTED_RECV);
  h->mode = FI_CONTEXT | FI_CONTEXT2;
  h->tx_attr->msg_order = FI_ORDER_SAS;
  h->rx_attr->msg_order = FI_ORDER_SAS;
  h->tx_attr->op_flags = FI_COMPLETION;
  h->rx_attr->op_flags = FI_COMPLETION;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->domain_attr->cq_data_size = 4;
  h->domain_attr->control_progress = FI_PROGRESS_MANUAL;
  h->domain_attr->data_progress = FI_PROGRESS_MANUAL;
  h->domain_attr->av_type = FI_AV_MAP;
  h->domain_attr->resource_mgmt = FI_RM_ENABLED;
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                            FI_MR_PROV_KEY;
  CHECK_RET(getinfo(h, &info), 0);
  if (info) {
    CHECK(!strcmp(info->fabric_attr->prov_name, "omx"), "prov_name");
    CHECK((info->caps & (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV)) ==
              (FI_TAGGED | FI_MSG | FI_DIRECTED_RECV),
          "caps %#llx", (unsigned long long)info->caps);
    CHECK(info->mode == 0, "mode %#llx", (unsigned long long)info->mode);
    CHECK(info->domain_attr->cq_data_size == 4, "cq_data_size");
    CHECK(info->domain_attr->mr_mode == 0, "mr_mode");
    CHECK(info->domain_attr->av_type == FI_AV_MAP, "av_type");
    CHECK(info->domain_attr->threading == FI_THREAD_DOMAIN, "threading");
    CHECK(info->ep_attr->mem_tag_format == 0x00007fffffffffffULL, "tag format");
    CHECK(info->tx_attr->msg_order & FI_ORDER_SAS, "SAS");
    CHECK(info->tx_attr->inject_size >= 64, "inject size");
    CHECK(info->next == NULL, "one info");
    fi_freeinfo(info);
  }
  /* What we lack: no data. */
  static const uint64_t lacking[] = {FI_MULTICAST,
                                     FI_NAMED_RX_CTX, FI_HMEM, FI_COLLECTIVE,
                                     FI_RMA_EVENT, FI_TRIGGER, FI_FENCE};
  for (size_t i = 0; i < sizeof lacking / sizeof *lacking; i++) {
    info = NULL;
    CHECK_RET(getinfo(t_hints(FI_TAGGED | lacking[i]), &info), -FI_ENODATA);
  }
  h = t_hints(FI_TAGGED);
  h->ep_attr->type = FI_EP_MSG;
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  h = t_hints(FI_TAGGED);
  h->ep_attr->type = FI_EP_DGRAM;
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  /* More tag bits than the provider has: libfabric's FI_TAG_BITS rule answers the
   * format with the upper bits it reserves cleared (47 tag bits are left). */
  h = t_hints(FI_TAGGED);
  h->ep_attr->mem_tag_format = ~0ULL;
  info = NULL;
  CHECK_RET(getinfo(h, &info), 0);
  CHECK(info && info->ep_attr->mem_tag_format == (1ULL << 47) - 1,
        "mem_tag_format %#llx for all bits requested",
        info ? (unsigned long long)info->ep_attr->mem_tag_format : 0ULL);
  if (info)
    fi_freeinfo(info);
  h = t_hints(FI_TAGGED);
  h->ep_attr->mem_tag_format = 0x00c000007fffffffULL; /* MPICH's request */
  info = NULL;
  CHECK_RET(getinfo(h, &info), 0);
  CHECK(info && info->ep_attr->mem_tag_format == 0x7fffffffULL,
        "mem_tag_format %#llx for MPICH's request",
        info ? (unsigned long long)info->ep_attr->mem_tag_format : 0ULL);
  if (info)
    fi_freeinfo(info);
  h = t_hints(FI_TAGGED);
  h->domain_attr->cq_data_size = 8;
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  h = t_hints(FI_TAGGED);
  h->tx_attr->inject_size = 1 << 20;
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  h = t_hints(FI_TAGGED);
  h->tx_attr->msg_order = FI_ORDER_RAW | FI_ORDER_SAS;
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  h = t_hints(FI_TAGGED);
  h->domain_attr->name = strdup("verbs0");
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  h = t_hints(FI_TAGGED);
  h->addr_format = FI_SOCKADDR_IN;
  CHECK_RET(getinfo(h, &info), -FI_ENODATA);
  /* Only tagged asked: MSG not offered. */
  info = NULL;
  CHECK_RET(getinfo(t_hints(FI_TAGGED), &info), 0);
  if (info) {
    CHECK(!(info->caps & FI_MSG) && (info->caps & FI_TAGGED), "caps %#llx",
          (unsigned long long)info->caps);
    fi_freeinfo(info);
  }
  /* FI_SOURCE with a service: that endpoint index. */
  h = t_hints(FI_TAGGED);
  info = NULL;
  CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, "13", FI_SOURCE, h, &info), 0);
  fi_freeinfo(h);
  if (info) {
    CHECK(info->src_addr && info->src_addrlen == 16, "src_addr");
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fi_av_attr aa = {.type = FI_AV_TABLE};
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    REQUIRE(fi_fabric(info->fabric_attr, &fab, NULL) == 0 &&
                fi_domain(fab, info, &dom, NULL) == 0 &&
                fi_av_open(dom, &aa, &av, NULL) == 0 &&
                fi_cq_open(dom, &ca, &cq, NULL) == 0 &&
                fi_endpoint(dom, info, &ep, NULL) == 0,
            "open");
    struct {
      uint64_t nic;
      uint32_t eid, key;
    } name;
    size_t len = sizeof name;
    CHECK_RET(fi_getname(&ep->fid, &name, &len), -FI_EOPBADSTATE);
    CHECK_RET(fi_enable(ep), -FI_ENOAV);
    CHECK_RET(fi_ep_bind(ep, &av->fid, 0), 0);
    CHECK_RET(fi_enable(ep), -FI_ENOCQ);
    CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), 0);
    CHECK_RET(fi_enable(ep), 0);
    CHECK_RET(fi_getname(&ep->fid, &name, &len), 0);
    CHECK(name.eid == 13, "endpoint index %u", name.eid);
    /* A bind after enable is refused. */
    CHECK_RET(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT), -FI_EOPBADSTATE);
    /* Busy objects are not closed. */
    CHECK_RET(fi_close(&cq->fid), -FI_EBUSY);
    CHECK_RET(fi_close(&av->fid), -FI_EBUSY);
    CHECK_RET(fi_close(&dom->fid), -FI_EBUSY);
    CHECK_RET(fi_close(&ep->fid), 0);
    CHECK_RET(fi_close(&cq->fid), 0);
    CHECK_RET(fi_close(&av->fid), 0);
    CHECK_RET(fi_close(&dom->fid), 0);
    CHECK_RET(fi_close(&fab->fid), 0);
    fi_freeinfo(info);
  }
  h = t_hints(FI_TAGGED);
  CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, "65536", FI_SOURCE, h, &info),
            -FI_ENODATA);
  fi_freeinfo(h);
  /* A destination by name: this host's loopback board, index 3. */
  h = t_hints(FI_TAGGED);
  info = NULL;
  CHECK_RET(fi_getinfo(FI_VERSION(1, 17), "localhost", "3", 0, h, &info), 0);
  fi_freeinfo(h);
  if (info) {
    CHECK(info->dest_addr && info->dest_addrlen == 16 &&
              ((uint32_t *)info->dest_addr)[2] == 3,
          "dest_addr");
    fi_freeinfo(info);
  }
  h = t_hints(FI_TAGGED);
  CHECK_RET(fi_getinfo(FI_VERSION(1, 17), "no-such-host", "3", 0, h, &info),
            -FI_ENODATA);
  fi_freeinfo(h);
}

/* Both AV types carry traffic; lookup, straddr, remove. */
static void test_av(enum fi_av_type type) {
  struct tctx t;
  t_setup(&t, 2, FI_TAGGED | FI_MSG | FI_DIRECTED_RECV, type,
          FI_CQ_FORMAT_CONTEXT, 0);
  uint64_t v = 0xabc, g = 0;
  struct fi_context c;
  struct fi_cq_entry e;
  CHECK_RET(fi_trecv(t.ep[1], &g, 8, NULL, t.addr[0], 1, 0, &c), 0);
  CHECK_RET(fi_tsend(t.ep[0], &v, 8, NULL, t.addr[1], 1, &c), 0);
  int got = 0;
  for (double end = now_ms() + T; got < 2 && now_ms() < end;) {
    if (fi_cq_read(t.cq[1], &e, 1) == 1)
      got++;
    if (fi_cq_read(t.cq[0], &e, 1) == 1)
      got++;
  }
  CHECK(got == 2 && g == 0xabc, "av type %d: transfer", type);
  char name[16], back[32];
  size_t len = sizeof name;
  CHECK_RET(fi_getname(&t.ep[1]->fid, name, &len), 0);
  size_t blen = sizeof back;
  CHECK_RET(fi_av_lookup(t.av, t.addr[1], back, &blen), 0);
  CHECK(blen == 16 && !memcmp(name, back, 16), "lookup");
  blen = 4; /* too small: the size needed comes back */
  CHECK_RET(fi_av_lookup(t.av, t.addr[1], back, &blen), 0);
  CHECK(blen == 16, "lookup size %zu", blen);
  char s[64];
  size_t slen = sizeof s;
  CHECK(fi_av_straddr(t.av, name, s, &slen) == s && !strncmp(s, "omx://", 6) &&
            slen == strlen(s) + 1,
        "straddr %s", s);
  /* Inserting the same name again gives another usable address. */
  fi_addr_t again;
  CHECK_RET(fi_av_insert(t.av, name, 1, &again, 0, NULL), 1);
  CHECK_RET(fi_av_remove(t.av, &t.addr[1], 1, 0), 0);
  blen = sizeof back;
  CHECK_RET(fi_av_lookup(t.av, t.addr[1], back, &blen), -FI_ENOENT);
  CHECK_RET(fi_tsend(t.ep[0], &v, 8, NULL, t.addr[1], 1, &c), -FI_EINVAL);
  CHECK_RET(fi_av_remove(t.av, &t.addr[1], 1, 0), -FI_EINVAL);
  CHECK_RET(fi_trecv(t.ep[1], &g, 8, NULL, FI_ADDR_UNSPEC, 2, 0, &c), 0);
  CHECK_RET(fi_tinject(t.ep[0], &v, 8, again, 2), 0);
  got = 0;
  for (double end = now_ms() + T; !got && now_ms() < end;)
    got = fi_cq_read(t.cq[1], &e, 1) == 1;
  CHECK(got, "send through the re-inserted address");
  /* Bad arguments. */
  CHECK_RET(fi_av_insert(t.av, NULL, 1, &again, 0, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insert(t.av, name, 1, &again, 0xf0, NULL), -FI_EINVAL);
  struct {
    uint64_t nic;
    uint32_t eid, key;
  } bad = {0, 40, 0};
  fi_addr_t ba = 0;
  CHECK_RET(fi_av_insert(t.av, &bad, 1, &ba, 0, NULL), 0);
  CHECK(ba == FI_ADDR_NOTAVAIL, "bad name address");
  CHECK_RET(fi_av_remove(t.av, NULL, 1, 0), -FI_EINVAL);
  CHECK_RET(fi_av_lookup(t.av, 0, back, NULL), -FI_EINVAL);
  /* fi_av_insertsvc: node = board name ("localhost" for lo), service = endpoint
   * index; gives the same name as the endpoint's own. */
  struct {
    uint64_t nic;
    uint32_t eid, key;
  } own;
  memcpy(&own, name, sizeof own);
  char svc[16];
  snprintf(svc, sizeof svc, "%u", own.eid);
  fi_addr_t sa = FI_ADDR_NOTAVAIL;
  CHECK_RET(fi_av_insertsvc(t.av, "localhost", svc, &sa, 0, NULL), 1);
  blen = sizeof back;
  CHECK_RET(fi_av_lookup(t.av, sa, back, &blen), 0);
  CHECK(blen == 16 && !memcmp(name, back, 16), "insertsvc gives the endpoint's name");
  CHECK_RET(fi_trecv(t.ep[1], &g, 8, NULL, FI_ADDR_UNSPEC, 3, 0, &c), 0);
  v = 0x5c5c;
  CHECK_RET(fi_tinject(t.ep[0], &v, 8, sa, 3), 0);
  got = 0;
  for (double end = now_ms() + T; !got && now_ms() < end;)
    got = fi_cq_read(t.cq[1], &e, 1) == 1;
  CHECK(got && g == 0x5c5c, "send through an fi_av_insertsvc address");
  CHECK_RET(fi_av_insertsvc(t.av, "localhost", "65536", &sa, 0, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insertsvc(t.av, "localhost", "1x", &sa, 0, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insertsvc(t.av, NULL, svc, &sa, 0, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insertsvc(t.av, "localhost", svc, &sa, 1, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insertsvc(t.av, "no-such-host-omx", svc, &sa, 0, NULL), -FI_EADDRNOTAVAIL);
  CHECK_RET(fi_av_insertsym(t.av, "localhost", 1, svc, 1, &sa, 0, NULL), 1);
  blen = sizeof back;
  CHECK_RET(fi_av_lookup(t.av, sa, back, &blen), 0);
  CHECK(blen == 16 && !memcmp(name, back, 16), "insertsym gives the endpoint's name");
  t_teardown(&t);
}

static void test_selective(void) {
  struct tctx t;
  t_setup(&t, 2, FI_TAGGED | FI_MSG, FI_AV_TABLE, FI_CQ_FORMAT_TAGGED,
          FI_SELECTIVE_COMPLETION);
  uint64_t v = 1, g[2];
  struct fi_context c0, c1, s0, s1;
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_trecv(t.ep[1], &g[0], 8, NULL, FI_ADDR_UNSPEC, 1, 0, &c0), 0);
  struct iovec iov = {&g[1], 8};
  struct fi_msg_tagged rm = {.msg_iov = &iov, .iov_count = 1,
                             .addr = FI_ADDR_UNSPEC, .tag = 1, .context = &c1};
  CHECK_RET(fi_trecvmsg(t.ep[1], &rm, FI_COMPLETION), 0);
  CHECK_RET(fi_tsend(t.ep[0], &v, 8, NULL, t.addr[1], 1, &s0), 0);
  struct iovec siov = {&v, 8};
  struct fi_msg_tagged sm = {.msg_iov = &siov, .iov_count = 1, .addr = t.addr[1],
                             .tag = 1, .context = &s1};
  CHECK_RET(fi_tsendmsg(t.ep[0], &sm, FI_COMPLETION), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.op_context == &c1,
        "only the FI_COMPLETION receive reports");
  CHECK(t_wait(t.cq[1], &e, NULL, 100) == -FI_EAGAIN, "no second receive report");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &s1,
        "only the FI_COMPLETION send reports");
  CHECK(t_wait(t.cq[0], &e, NULL, 100) == -FI_EAGAIN, "no second send report");
  /* Errors are reported even without FI_COMPLETION. */
  CHECK_RET(fi_trecv(t.ep[1], &g[0], 8, NULL, FI_ADDR_UNSPEC, 5, 0, &c0), 0);
  CHECK_RET(fi_cancel(&t.ep[1]->fid, &c0), 0);
  struct fi_cq_err_entry err;
  CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ECANCELED, "error");
  /* Op flags: FI_COMPLETION as the default of fi_tsend. */
  uint64_t of = FI_TRANSMIT | FI_COMPLETION;
  CHECK_RET(fi_control(&t.ep[0]->fid, FI_SETOPSFLAG, &of), 0);
  of = FI_TRANSMIT;
  CHECK_RET(fi_control(&t.ep[0]->fid, FI_GETOPSFLAG, &of), 0);
  CHECK(of & FI_COMPLETION, "GETOPSFLAG");
  CHECK_RET(fi_trecv(t.ep[1], &g[0], 8, NULL, FI_ADDR_UNSPEC, 1, 0, &c0), 0);
  CHECK_RET(fi_tsend(t.ep[0], &v, 8, NULL, t.addr[1], 1, &s0), 0);
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &s0,
        "default FI_COMPLETION");
  of = 0;
  CHECK_RET(fi_control(&t.ep[0]->fid, FI_SETOPSFLAG, &of), -FI_EINVAL);
  t_teardown(&t);
}

static void test_errors(void) {
  struct tctx t;
  t_setup(&t, 2, FI_TAGGED | FI_MSG, FI_AV_TABLE, FI_CQ_FORMAT_TAGGED, 0);
  char b[16];
  struct fi_context c;
  /* Unsupported objects and calls. */
  struct fid_ep *sep;
  CHECK_RET(fi_scalable_ep(t.dom, t.info, &sep, NULL), -FI_ENOSYS);
  struct fid_ep *srx;
  struct fi_rx_attr ra = {0};
  CHECK_RET(fi_srx_context(t.dom, &ra, &srx, NULL), -FI_ENOSYS);
  CHECK_RET(fi_setname(&t.ep[0]->fid, b, 16), -FI_ENOSYS);
  CHECK_RET(fi_connect(t.ep[0], b, NULL, 0), -FI_ENOSYS);
  struct fid_pep *pep;
  CHECK_RET(fi_passive_ep(t.fab, t.info, &pep, NULL), -FI_ENOSYS);
  struct fid_wait *ws;
  struct fi_wait_attr wa = {.wait_obj = FI_WAIT_UNSPEC};
  CHECK_RET(fi_wait_open(t.fab, &wa, &ws), -FI_ENOSYS);
  CHECK_RET(fi_query_atomic(t.dom, FI_INT32, FI_SUM, NULL, 0), -FI_EINVAL);
  struct fi_atomic_attr aa;
  CHECK_RET(fi_query_atomic(t.dom, FI_INT32, FI_CSWAP, &aa, 0), -FI_EOPNOTSUPP);
  size_t ol = 0;
  CHECK_RET(fi_getopt(&t.ep[0]->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, b, &ol),
            -FI_ENOPROTOOPT);
  ol = sizeof b;
  CHECK_RET(fi_setopt(&t.ep[0]->fid, FI_OPT_ENDPOINT, FI_OPT_CM_DATA_SIZE, b, sizeof(size_t)),
            -FI_ENOPROTOOPT);
  CHECK_RET(fi_getpeer(t.ep[0], b, &ol), -FI_ENOSYS);
  /* Memory registration: a descriptor and a key, nothing more. */
  struct fid_mr *mr, *mr2;
  CHECK_RET(fi_mr_reg(t.dom, b, sizeof b, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL), 0);
  CHECK_RET(fi_mr_reg(t.dom, b, sizeof b, FI_SEND, 0, 0, 0, &mr2, NULL), 0);
  CHECK(fi_mr_key(mr) != fi_mr_key(mr2) && fi_mr_desc(mr), "mr keys");
  CHECK_RET(fi_tsend(t.ep[0], b, 8, fi_mr_desc(mr), t.addr[1], 1, &c), 0);
  CHECK_RET(fi_close(&mr->fid), 0);
  CHECK_RET(fi_close(&mr2->fid), 0);
  CHECK_RET(fi_mr_reg(t.dom, b, sizeof b, FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL),
            -FI_EINVAL);
  /* fi_mr_regv (one iovec) and fi_mr_regattr (host memory) do the same. */
  struct iovec mv[2] = {{b, 8}, {b + 8, 8}};
  CHECK_RET(fi_mr_regv(t.dom, mv, 1, FI_SEND, 0, 0, 0, &mr, NULL), 0);
  CHECK_RET(fi_mr_regv(t.dom, mv, 2, FI_SEND, 0, 0, 0, &mr2, NULL), -FI_EINVAL);
  struct fi_mr_attr ma = {.mr_iov = mv, .iov_count = 1, .access = FI_RECV,
                          .iface = FI_HMEM_SYSTEM};
  CHECK_RET(fi_mr_regattr(t.dom, &ma, 0, &mr2), 0);
  CHECK(fi_mr_key(mr) != fi_mr_key(mr2) && fi_mr_desc(mr) && fi_mr_desc(mr2), "regv/regattr keys");
  CHECK_RET(fi_trecv(t.ep[1], b + 8, 8, fi_mr_desc(mr2), FI_ADDR_UNSPEC, 2, 0, &c), 0);
  CHECK_RET(fi_tsend(t.ep[0], b, 8, fi_mr_desc(mr), t.addr[1], 2, &c), 0);
  CHECK_RET(fi_close(&mr->fid), 0);
  CHECK_RET(fi_close(&mr2->fid), 0);
  ma.iface = FI_HMEM_CUDA;
  CHECK_RET(fi_mr_regattr(t.dom, &ma, 0, &mr2), -FI_ENOSYS);
  /* EQ: opens, never has an event, does not hang. */
  struct fid_eq *eq;
  struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
  CHECK_RET(fi_eq_open(t.fab, &ea, &eq, NULL), 0);
  uint32_t ev;
  CHECK_RET(fi_eq_read(eq, &ev, b, sizeof b, 0), -FI_EAGAIN);
  CHECK_RET(fi_eq_sread(eq, &ev, b, sizeof b, 10, 0), -FI_EAGAIN);
  CHECK_RET(fi_eq_sread(eq, &ev, b, sizeof b, -1, 0), -FI_EINVAL);
  struct fi_eq_err_entry ee;
  CHECK_RET(fi_eq_readerr(eq, &ee, 0), -FI_EAGAIN);
  /* no asynchronous events exist here, so none can be written either */
  CHECK_RET(fi_eq_write(eq, FI_NOTIFY, b, sizeof b, 0), -FI_ENOSYS);
  CHECK_RET(fi_close(&eq->fid), 0);
  /* fi_eq(3), FI_WRITE: "If this flag is set, then the fi_eq_write operation
   * must be supported by the provider": without fi_eq_write, the open fails. */
  struct fi_eq_attr ew = {.wait_obj = FI_WAIT_UNSPEC, .flags = FI_WRITE};
  eq = NULL;
  CHECK_RET(fi_eq_open(t.fab, &ew, &eq, NULL), -FI_ENOSYS);
  if (eq)
    fi_close(&eq->fid);
  /* Bad arguments. */
  CHECK_RET(fi_tsend(t.ep[0], NULL, 8, NULL, t.addr[1], 1, &c), -FI_EINVAL);
  CHECK_RET(fi_trecv(t.ep[1], NULL, 8, NULL, FI_ADDR_UNSPEC, 1, 0, &c), -FI_EINVAL);
  CHECK_RET(fi_tsend(t.ep[0], b, 8, NULL, 12345, 1, &c), -FI_EINVAL);
  CHECK_RET(fi_tsendmsg(t.ep[0], NULL, 0), -FI_EINVAL);
  CHECK_RET(fi_trecvmsg(t.ep[0], NULL, 0), -FI_EINVAL);
  CHECK_RET(fi_sendmsg(t.ep[0], NULL, 0), -FI_EINVAL);
  CHECK_RET(fi_recvmsg(t.ep[0], NULL, 0), -FI_EINVAL);
  struct iovec iov = {b, 8};
  struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC};
  m.iov_count = 2; /* a multi-receive buffer is one buffer */
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), -FI_EINVAL);
  m.iov_count = 1;
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_PEEK), -FI_EINVAL);
  struct fi_msg_tagged tm = {.msg_iov = &iov, .iov_count = 1,
                             .addr = FI_ADDR_UNSPEC, .tag = 1};
  CHECK_RET(fi_trecvmsg(t.ep[1], &tm, FI_DISCARD), -FI_EINVAL);
  CHECK_RET(fi_tinject(t.ep[0], b, 8, FI_ADDR_NOTAVAIL, 1), -FI_EINVAL);
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_cq_read(t.cq[0], NULL, 1), -FI_EINVAL);
  CHECK_RET(fi_cq_read(t.cq[0], &e, 0), 0);
  CHECK_RET(fi_cq_readerr(t.cq[0], NULL, 0), -FI_EINVAL);
  struct fi_cq_err_entry err;
  CHECK_RET(fi_cq_readerr(t.cq[0], &err, 1), -FI_EINVAL);
  CHECK_RET(fi_ep_bind(t.ep[0], &t.cq[0]->fid, FI_TRANSMIT), -FI_EOPBADSTATE);
  size_t len = 4;
  CHECK_RET(fi_getname(&t.ep[0]->fid, b, &len), -FI_ETOOSMALL);
  CHECK(len == 16, "getname size %zu", len);
  CHECK_RET(fi_getname(&t.ep[0]->fid, b, NULL), -FI_EINVAL);
  CHECK_RET(fi_cancel(&t.ep[0]->fid, NULL), -FI_ENOENT);
  /* Bind checks on a fresh endpoint. */
  struct fid_ep *ep;
  CHECK_RET(fi_endpoint(t.dom, t.info, &ep, NULL), 0);
  CHECK_RET(fi_tsend(ep, b, 8, NULL, 0, 1, &c), -FI_EOPBADSTATE);
  CHECK_RET(fi_ep_bind(ep, &t.cq[0]->fid, 0), -FI_EINVAL);
  CHECK_RET(fi_ep_bind(ep, &t.cq[0]->fid, FI_TRANSMIT | (1ULL << 40)), -FI_EINVAL);
  CHECK_RET(fi_ep_bind(ep, &t.cq[0]->fid, FI_TRANSMIT), 0);
  CHECK_RET(fi_ep_bind(ep, &t.cq[0]->fid, FI_TRANSMIT), -FI_EINVAL);
  CHECK_RET(fi_ep_bind(ep, &t.av->fid, 0), 0);
  CHECK_RET(fi_ep_bind(ep, &t.av->fid, 0), -FI_EINVAL);
  CHECK_RET(fi_ep_bind(ep, &t.dom->fid, 0), -FI_EINVAL);
  CHECK_RET(fi_close(&ep->fid), 0);
  /* Drain the send of the registration test. */
  struct fi_cq_tagged_entry x;
  (void)t_wait(t.cq[0], &x, NULL, 200);
  CHECK_RET(fi_trecv(t.ep[1], b, 8, NULL, FI_ADDR_UNSPEC, 1, 0, &c), 0);
  CHECK(t_wait(t.cq[1], &x, NULL, T) == 1, "registered-buffer message");
  /* An unreachable peer: an endpoint index nobody opened answers at once. */
  struct {
    uint64_t nic;
    uint32_t eid, key;
  } name;
  len = sizeof name;
  CHECK_RET(fi_getname(&t.ep[0]->fid, &name, &len), 0);
  name.eid = 30;
  fi_addr_t dead;
  CHECK_RET(fi_av_insert(t.av, &name, 1, &dead, 0, NULL), 1);
  double t0 = now_ms();
  ssize_t r = fi_tsend(t.ep[0], b, 8, NULL, dead, 1, &c);
  CHECK(r == -FI_EHOSTUNREACH, "send to a closed endpoint: %zd", r);
  CHECK(now_ms() - t0 < 11000, "gave up in %.0f ms", now_ms() - t0);
  t_teardown(&t);
}

/* An endpoint sends to itself; endpoints closed with operations pending
 * (a rendezvous send nobody receives, a receive, a stashed message). */
static void test_self_and_close(void) {
  struct tctx t;
  t_setup(&t, 2, FI_TAGGED | FI_MSG, FI_AV_TABLE, FI_CQ_FORMAT_TAGGED, 0);
  uint64_t v = 42, g = 0;
  struct fi_context c, c2;
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_trecv(t.ep[0], &g, 8, NULL, FI_ADDR_UNSPEC, 3, 0, &c), 0);
  CHECK_RET(fi_tsend(t.ep[0], &v, 8, NULL, t.addr[0], 3, &c2), 0);
  int got = 0;
  for (double end = now_ms() + T; got < 2 && now_ms() < end;)
    got += fi_cq_read(t.cq[0], &e, 1) == 1;
  CHECK(got == 2 && g == 42, "send to oneself");
  size_t bl = 4 << 20;
  char *big = xmalloc(bl);
  fill(big, bl, 1);
  CHECK_RET(fi_tsend(t.ep[0], big, bl, NULL, t.addr[1], 8, &c), 0);
  CHECK_RET(fi_tinject(t.ep[0], &v, 8, t.addr[1], 9), 0);
  CHECK_RET(fi_trecv(t.ep[1], &g, 8, NULL, FI_ADDR_UNSPEC, 7, 0, &c2), 0);
  struct iovec iov = {&g, 8};
  struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1,
                            .addr = FI_ADDR_UNSPEC, .tag = 9, .context = &c2};
  ssize_t r = -FI_EAGAIN;
  for (double end = now_ms() + T; r != 1 && now_ms() < end;) {
    CHECK_RET(fi_trecvmsg(t.ep[1], &m, FI_PEEK | FI_CLAIM), 0);
    struct fi_cq_err_entry err;
    r = t_wait(t.cq[1], &e, NULL, T);
    if (r == -FI_EAVAIL)
      CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ENOMSG, "enomsg");
  }
  CHECK(r == 1 && e.tag == 9, "peek and claim before closing");
  CHECK_RET(fi_close(&t.ep[1]->fid), 0);
  /* The peek took the older big message too (oldest first): it is done. */
  r = t_wait(t.cq[0], &e, NULL, T);
  CHECK(r == 1 && e.op_context == &c, "big send taken by the peek: %zd", r);
  /* A send to the closed endpoint fails, at once or in its completion. */
  r = fi_tsend(t.ep[0], big, bl, NULL, t.addr[1], 8, &c);
  if (r == 0) {
    struct fi_cq_err_entry err;
    r = t_wait(t.cq[0], &e, NULL, T);
    CHECK(r == -FI_EAVAIL, "send to a closed endpoint: %zd", r);
    if (r == -FI_EAVAIL) {
      CHECK_RET(fi_cq_readerr(t.cq[0], &err, 0), 1);
      CHECK(err.op_context == &c && err.err == FI_EHOSTUNREACH,
            "send error: %d (%s)", err.err, fi_strerror(err.err));
    }
  } else {
    CHECK(r == -FI_EHOSTUNREACH, "send to a closed endpoint: %zd", r);
  }
  /* Closed with a receive pending. */
  CHECK_RET(fi_trecv(t.ep[0], &g, 8, NULL, FI_ADDR_UNSPEC, 7, 0, &c2), 0);
  CHECK_RET(fi_close(&t.ep[0]->fid), 0);
  t.n = 0;
  CHECK_RET(fi_close(&t.cq[0]->fid), 0);
  CHECK_RET(fi_close(&t.cq[1]->fid), 0);
  CHECK_RET(fi_close(&t.av->fid), 0);
  CHECK_RET(fi_close(&t.dom->fid), 0);
  CHECK_RET(fi_close(&t.fab->fid), 0);
  fi_freeinfo(t.info);
  free(big);
}

/* fi_av(3) flags an application may pass: FI_SYNC_ERR on inserts ("the
 * context parameter ... references an array of integers ... Successful
 * insertions will be updated to 0. Failures will contain a fabric errno
 * code") and FI_SYMMETRIC when opening (a promise about the addresses). */
static void test_av_flags(void) {
  struct tctx t;
  t_setup(&t, 1, FI_TAGGED | FI_MSG | FI_DIRECTED_RECV, FI_AV_TABLE,
          FI_CQ_FORMAT_CONTEXT, 0);
  struct {
    uint64_t nic;
    uint32_t eid, key;
  } names[3];
  size_t len = sizeof names[0];
  CHECK_RET(fi_getname(&t.ep[0]->fid, &names[0], &len), 0);
  names[1] = names[0];
  names[1].eid = 40; /* no such endpoint index */
  names[2] = names[0];
  fi_addr_t a[3] = {0, 0, 0};
  int errs[3] = {-1, -1, -1};
  CHECK_RET(fi_av_insert(t.av, names, 3, a, FI_SYNC_ERR, errs), 2);
  CHECK(errs[0] == 0 && errs[1] == FI_EINVAL && errs[2] == 0,
        "FI_SYNC_ERR statuses %d %d %d", errs[0], errs[1], errs[2]);
  CHECK(a[0] != FI_ADDR_NOTAVAIL && a[1] == FI_ADDR_NOTAVAIL && a[2] != FI_ADDR_NOTAVAIL,
        "FI_SYNC_ERR addresses");
  char svc[16];
  snprintf(svc, sizeof svc, "%u", names[0].eid);
  int e1 = -1;
  fi_addr_t sa = FI_ADDR_NOTAVAIL;
  CHECK_RET(fi_av_insertsvc(t.av, "localhost", svc, &sa, FI_SYNC_ERR, &e1), 1);
  CHECK(e1 == 0 && sa != FI_ADDR_NOTAVAIL, "insertsvc FI_SYNC_ERR %d", e1);
  int e2[2] = {-1, -1};
  fi_addr_t sy[2];
  int n2 = fi_av_insertsym(t.av, "localhost", 1, svc, 2, sy, FI_SYNC_ERR, e2);
  CHECK(e2[0] == 0 && e2[1] >= 0 && n2 == (e2[0] == 0) + (e2[1] == 0),
        "insertsym FI_SYNC_ERR: %d inserted, statuses %d %d", n2, e2[0], e2[1]);
  /* A message through an address inserted with FI_SYNC_ERR. */
  uint64_t v = 0x5e, g = 0;
  struct fi_context c;
  struct fi_cq_entry ce;
  CHECK_RET(fi_trecv(t.ep[0], &g, 8, NULL, FI_ADDR_UNSPEC, 4, 0, &c), 0);
  CHECK_RET(fi_tinject(t.ep[0], &v, 8, a[2], 4), 0);
  int got = 0;
  for (double end = now_ms() + T; !got && now_ms() < end;)
    got = fi_cq_read(t.cq[0], &ce, 1) == 1;
  CHECK(got && g == 0x5e, "send through an FI_SYNC_ERR address");
  struct fi_av_attr aa = {.type = FI_AV_TABLE, .flags = FI_SYMMETRIC};
  struct fid_av *av2 = NULL;
  CHECK_RET(fi_av_open(t.dom, &aa, &av2, NULL), 0);
  if (av2)
    CHECK_RET(fi_close(&av2->fid), 0);
  t_teardown(&t);
}

int main(void) {
  test_getinfo();
  test_av_flags();
  test_self_and_close();
  test_av(FI_AV_TABLE);
  test_av(FI_AV_MAP);
  test_selective();
  test_errors();
  DONE();
}
