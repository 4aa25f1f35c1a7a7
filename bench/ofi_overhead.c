/* ofi_overhead.c - the omx libfabric provider's CPU cost per message.
 *
 * One thread drives two endpoints of one process: post a receive, send 8
 * bytes, read both completions; 200,000 times on raw MX, then the same
 * through libfabric. The calling thread's CPU time per message does not
 * depend on the machine's load, unlike ping-pong latency; the difference of
 * the two is the provider's share.
 *
 *   gcc -O2 bench/ofi_overhead.c -Iinclude -Lbuild/lib -lmyriexpress \
 *       -Wl,-rpath,$PWD/build/lib -lfabric -o /tmp/ofi_overhead
 *   scripts/hosts.sh up 1
 *   scripts/hosts.sh exec 0 env OMX_IFACES=lo /tmp/ofi_overhead raw
 *   scripts/hosts.sh exec 0 env OMX_IFACES=lo FI_PROVIDER_PATH=$PWD/build/lib/libfabric \
 *       /tmp/ofi_overhead
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <myriexpress.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 200000 };

static double us(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void report(const char *what, double cpu0, double wall0) {
  printf("%-10s %.3f us CPU, %.3f us wall per message\n", what,
         (us(CLOCK_THREAD_CPUTIME_ID) - cpu0) / N, (us(CLOCK_MONOTONIC) - wall0) / N);
}

static int raw(void) {
  mx_endpoint_t a, b;
  mx_endpoint_addr_t to, me;
  uint64_t nic;
  uint32_t eid, res;
  if (mx_init() != MX_SUCCESS)
    return 1;
  mx_set_error_handler(MX_ERRORS_RETURN);
  if (mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, 1, NULL, 0, &a) ||
      mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, 1, NULL, 0, &b) ||
      mx_get_endpoint_addr(b, &me) || mx_decompose_endpoint_addr(me, &nic, &eid) ||
      mx_connect(a, nic, eid, 1, 1000, &to))
    return 1;
  char s[8] = {1}, r[8];
  mx_segment_t ss = {s, 8}, rs = {r, 8};
  mx_request_t q;
  mx_status_t st;
  for (int pass = 0; pass < 2; pass++) { /* the first pass warms up */
    double c0 = us(CLOCK_THREAD_CPUTIME_ID), w0 = us(CLOCK_MONOTONIC);
    for (int i = 0; i < N; i++) {
      mx_irecv(b, &rs, 1, 0, ~0ULL, NULL, &q);
      mx_isend(a, &ss, 1, to, 0, NULL, &q);
      do
        mx_test_any(b, 0, 0, &st, &res);
      while (!res);
      do
        mx_test_any(a, 0, 0, &st, &res);
      while (!res);
    }
    if (pass)
      report("raw MX:", c0, w0);
  }
  return 0;
}

static int ofi(void) {
  struct fi_info *h = fi_allocinfo(), *info;
  h->caps = FI_TAGGED;
  h->ep_attr->type = FI_EP_RDM;
  h->fabric_attr->prov_name = strdup("omx");
  if (fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info)) {
    fprintf(stderr, "fi_getinfo: no omx provider (FI_PROVIDER_PATH?)\n");
    return 1;
  }
  fi_freeinfo(h);
  struct fid_fabric *f;
  struct fid_domain *d;
  struct fid_av *av;
  struct fid_cq *cq[2];
  struct fid_ep *ep[2];
  fi_addr_t ad[2];
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  if (fi_fabric(info->fabric_attr, &f, NULL) || fi_domain(f, info, &d, NULL) ||
      fi_av_open(d, &aa, &av, NULL))
    return 1;
  for (int i = 0; i < 2; i++) {
    struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
    char name[16];
    size_t l = sizeof name;
    if (fi_cq_open(d, &ca, &cq[i], NULL) || fi_endpoint(d, info, &ep[i], NULL) ||
        fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV) ||
        fi_ep_bind(ep[i], &av->fid, 0) || fi_enable(ep[i]) ||
        fi_getname(&ep[i]->fid, name, &l) || fi_av_insert(av, name, 1, &ad[i], 0, NULL) != 1)
      return 1;
  }
  char s[8] = {1}, r[8];
  struct fi_context c;
  struct fi_cq_tagged_entry e;
  for (int pass = 0; pass < 2; pass++) {
    double c0 = us(CLOCK_THREAD_CPUTIME_ID), w0 = us(CLOCK_MONOTONIC);
    for (int i = 0; i < N; i++) {
      fi_trecv(ep[1], r, 8, NULL, FI_ADDR_UNSPEC, 0, 0, &c);
      fi_tsend(ep[0], s, 8, NULL, ad[1], 0, &c);
      while (fi_cq_read(cq[1], &e, 1) != 1)
        ;
      while (fi_cq_read(cq[0], &e, 1) != 1)
        ;
    }
    if (pass)
      report("libfabric:", c0, w0);
  }
  return 0;
}

int main(int argc, char **argv) {
  return argc > 1 && !strcmp(argv[1], "raw") ? raw() : ofi();
}
