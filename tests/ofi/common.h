/* common.h - helpers of the libfabric provider tests (tests/ofi).
 *
 * Each test is one program, run by tests/ofi/run.sh with FI_PROVIDER_PATH
 * pointing at build/lib/libfabric and OMX_IFACES=lo inside a test host. It
 * prints "FAIL file:line: ..." per failed check and ends with
 * "<name>: N checks, M failed"; exit status 0 only if every check passed.
 * Endpoints of one process talk to each other (fabtests-style functional
 * tests without a second process).
 */
#ifndef OMX_OFI_TEST_COMMON_H
#define OMX_OFI_TEST_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../common/check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Expect a libfabric call to return `want`. */
#define CHECK_RET(call, want)                                                  \
  do {                                                                         \
    long r_ = (long)(call);                                                    \
    CHECK(r_ == (long)(want), "%s returned %ld (%s), expected %ld", #call, r_, \
          r_ < 0 ? fi_strerror((int)-r_) : "", (long)(want));                  \
  } while (0)

/* Tests sleep in milliseconds (whole ones). */
#define usleep(us) sleep_ms((us) / 1000)

/* ---- a fabric with N endpoints in one domain sharing one AV ---- */

#define MAXEP 3
struct tctx {
  struct fi_info *info;
  struct fid_fabric *fab;
  struct fid_domain *dom;
  struct fid_av *av;
  struct fid_cq *cq[MAXEP];
  struct fid_ep *ep[MAXEP];
  fi_addr_t addr[MAXEP];
  int n;
};

static inline struct fi_info *t_hints(uint64_t caps) {
  struct fi_info *h = fi_allocinfo();
  REQUIRE(h, "fi_allocinfo");
  h->caps = caps;
  h->ep_attr->type = FI_EP_RDM;
  h->fabric_attr->prov_name = strdup("omx");
  /* OFX_TEST_THREADING=domain: the application serializes (no provider lock). */
  const char *th = getenv("OFX_TEST_THREADING");
  if (th && !strcmp(th, "domain"))
    h->domain_attr->threading = FI_THREAD_DOMAIN;
  return h;
}

/* n endpoints, each with one CQ (both directions), bound with bind_flags
 * added (e.g. FI_SELECTIVE_COMPLETION); every name inserted in the AV. */
static inline void t_setup(struct tctx *t, int n, uint64_t caps,
                           enum fi_av_type av_type, enum fi_cq_format fmt,
                           uint64_t bind_flags) {
  memset(t, 0, sizeof *t);
  t->n = n;
  struct fi_info *h = t_hints(caps);
  h->domain_attr->av_type = av_type;
  int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &t->info);
  fi_freeinfo(h);
  REQUIRE(ret == 0 && t->info, "fi_getinfo: %d (%s)", ret, fi_strerror(-ret));
  REQUIRE(fi_fabric(t->info->fabric_attr, &t->fab, NULL) == 0, "fi_fabric");
  REQUIRE(fi_domain(t->fab, t->info, &t->dom, NULL) == 0, "fi_domain");
  struct fi_av_attr aa = {.type = av_type};
  REQUIRE(fi_av_open(t->dom, &aa, &t->av, NULL) == 0, "fi_av_open");
  char names[MAXEP][64];
  for (int i = 0; i < n; i++) {
    struct fi_cq_attr ca = {.format = fmt, .wait_obj = FI_WAIT_UNSPEC};
    REQUIRE(fi_cq_open(t->dom, &ca, &t->cq[i], NULL) == 0, "fi_cq_open");
    REQUIRE(fi_endpoint(t->dom, t->info, &t->ep[i], NULL) == 0, "fi_endpoint");
    REQUIRE(fi_ep_bind(t->ep[i], &t->cq[i]->fid,
                       FI_TRANSMIT | FI_RECV | bind_flags) == 0,
            "fi_ep_bind cq");
    REQUIRE(fi_ep_bind(t->ep[i], &t->av->fid, 0) == 0, "fi_ep_bind av");
    REQUIRE(fi_enable(t->ep[i]) == 0, "fi_enable");
    size_t len = sizeof names[i];
    REQUIRE(fi_getname(&t->ep[i]->fid, names[i], &len) == 0 && len == 16,
            "fi_getname");
  }
  for (int i = 0; i < n; i++)
    REQUIRE(fi_av_insert(t->av, names[i], 1, &t->addr[i], 0, NULL) == 1,
            "fi_av_insert");
}

static inline void t_teardown(struct tctx *t) {
  for (int i = 0; i < t->n; i++) {
    CHECK_RET(fi_close(&t->ep[i]->fid), 0);
    CHECK_RET(fi_close(&t->cq[i]->fid), 0);
  }
  CHECK_RET(fi_close(&t->av->fid), 0);
  CHECK_RET(fi_close(&t->dom->fid), 0);
  CHECK_RET(fi_close(&t->fab->fid), 0);
  fi_freeinfo(t->info);
}

/* The objects of one endpoint of a two-process test: its own fabric, domain, AV
 * (av_type) and one tagged-format CQ for both directions, bound; not enabled. */
struct tone {
  struct fid_fabric *fab;
  struct fid_domain *dom;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
};

static inline void t_open_one(struct tone *o, struct fi_info *info,
                              enum fi_av_type av_type) {
  struct fi_av_attr aa = {.type = av_type};
  struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .wait_obj = FI_WAIT_UNSPEC};
  REQUIRE(fi_fabric(info->fabric_attr, &o->fab, NULL) == 0 &&
              fi_domain(o->fab, info, &o->dom, NULL) == 0 &&
              fi_av_open(o->dom, &aa, &o->av, NULL) == 0 &&
              fi_cq_open(o->dom, &ca, &o->cq, NULL) == 0 &&
              fi_endpoint(o->dom, info, &o->ep, NULL) == 0 &&
              fi_ep_bind(o->ep, &o->av->fid, 0) == 0 &&
              fi_ep_bind(o->ep, &o->cq->fid, FI_TRANSMIT | FI_RECV) == 0,
          "open");
}

static inline void t_close_one(struct tone *o) {
  CHECK_RET(fi_close(&o->ep->fid), 0);
  CHECK_RET(fi_close(&o->cq->fid), 0);
  CHECK_RET(fi_close(&o->av->fid), 0);
  CHECK_RET(fi_close(&o->dom->fid), 0);
  CHECK_RET(fi_close(&o->fab->fid), 0);
}

/* One completion from cq (FI_CQ_FORMAT_TAGGED) within ms: 1, -FI_EAVAIL
 * (an error waits) or -FI_EAGAIN (timeout). */
static inline ssize_t t_wait(struct fid_cq *cq, struct fi_cq_tagged_entry *e,
                             fi_addr_t *src, double ms) {
  double end = now_ms() + ms;
  for (;;) {
    ssize_t r = src ? fi_cq_readfrom(cq, e, 1, src) : fi_cq_read(cq, e, 1);
    if (r != -FI_EAGAIN || now_ms() > end)
      return r;
  }
}

/* One error completion within ms: 1 or -FI_EAGAIN. */
static inline ssize_t t_wait_err(struct fid_cq *cq, struct fi_cq_err_entry *e,
                                 double ms) {
  double end = now_ms() + ms;
  struct fi_cq_tagged_entry x;
  for (;;) {
    ssize_t r = fi_cq_read(cq, &x, 1);
    if (r == -FI_EAVAIL) {
      memset(e, 0, sizeof *e);
      return fi_cq_readerr(cq, e, 0);
    }
    if (r > 0) {
      fprintf(stderr, "unexpected success completion (ctx %p)\n", x.op_context);
      return -FI_EOTHER;
    }
    if (now_ms() > end)
      return -FI_EAGAIN;
  }
}

#endif
