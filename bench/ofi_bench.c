/* ofi_bench.c - RMA and tagged figures of one libfabric provider between two
 * processes: RMA write and read bandwidth, RMA write latency (a write and its
 * completion: the data is in place at the target), tagged ping-pong latency
 * (half a round trip) and tagged bandwidth (a window of sends, then a 1-byte
 * ack), at 64 B .. 4 MiB (x4 steps).
 *
 *   ofi_bench server                 prints its name (hex), serves until the
 *                                    client says it is done
 *   ofi_bench client NAME            prints "TEST SIZE VALUE" lines (MB/s for
 *                                    *_bw, us for *_lat)
 *
 * FI_PROVIDER picks the provider (default omx, found through
 * FI_PROVIDER_PATH); OFI_BENCH_NODE names the local address to bind (an IP
 * address: tcp;ofi_rxm needs the veth's, not lo's). The server's memory is
 * one 4 MiB registration with remote read and write; its key and base travel
 * to the client in the first message. The client drives every test with a
 * command message (test, size, iterations); the server keeps reading its CQ
 * meanwhile, so providers that progress only in calls (tcp;ofi_rxm) serve
 * RMA too. A benchmark, not a test: nothing is checked but the calls.
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NAME 64
#define MAX_SIZE (4u << 20)
#define WINDOW 16
#define TAG_CTL 1
#define TAG_DATA 2

enum test { T_DONE, T_WRITE_BW, T_READ_BW, T_WRITE_LAT, T_PINGPONG, T_TAGGED_BW };
static const char *test_name[] = {"done", "rma_write_bw", "rma_read_bw", "rma_write_lat",
                                  "tagged_lat", "tagged_bw"};

struct ctl {
  uint64_t test, size, iters, key, base;
};

static struct fid_ep *ep;
static struct fid_cq *cq;
static struct fid_domain *dom;
static struct fi_info *info;
static void *local_desc;
static fi_addr_t peer;
static struct fid_av *av;

static void die(const char *what, long rc) {
  fprintf(stderr, "ofi_bench: %s: %ld (%s)\n", what, rc, rc < 0 ? fi_strerror((int)-rc) : "");
  exit(1);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Spins on the CQ until n completions arrived. */
static void wait_n(long n) {
  struct fi_cq_tagged_entry e[16];
  while (n > 0) {
    ssize_t got = fi_cq_read(cq, e, n < 16 ? (size_t)n : 16);
    if (got > 0)
      n -= got;
    else if (got == -FI_EAVAIL) {
      struct fi_cq_err_entry ee = {0};
      fi_cq_readerr(cq, &ee, 0);
      die("completion error", -(long)ee.err);
    } else if (got != -FI_EAGAIN)
      die("fi_cq_read", (long)got);
  }
}

/* Posts with a retry while the provider is busy (its completions drained). */
#define POST(call)                                                                         \
  do {                                                                                     \
    ssize_t rc_;                                                                           \
    while ((rc_ = (call)) == -FI_EAGAIN) {                                                 \
      struct fi_cq_tagged_entry e_;                                                        \
      if (fi_cq_read(cq, &e_, 1) == 1)                                                     \
        pending--;                                                                         \
    }                                                                                      \
    if (rc_)                                                                               \
      die(#call, (long)rc_);                                                               \
  } while (0)

static long pending; /* completions owed by what was posted */

static void send_wait(const void *buf, size_t len, uint64_t tag) {
  POST(fi_tsend(ep, buf, len, local_desc, peer, tag, NULL));
  wait_n(1);
}
static void recv_wait(void *buf, size_t len, uint64_t tag) {
  POST(fi_trecv(ep, buf, len, local_desc, FI_ADDR_UNSPEC, tag, 0, NULL));
  wait_n(1);
}

static void open_all(void) {
  struct fi_info *h = fi_allocinfo();
  h->caps = FI_TAGGED | FI_RMA;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->mode = FI_CONTEXT;
  if (!getenv("FI_PROVIDER"))
    h->fabric_attr->prov_name = strdup("omx");
  const char *node = getenv("OFI_BENCH_NODE");
  int rc = fi_getinfo(FI_VERSION(1, 17), node, node ? "0" : NULL, node ? FI_SOURCE : 0, h,
                      &info);
  fi_freeinfo(h);
  if (rc || !info)
    die("fi_getinfo", rc);
  struct fid_fabric *fab;
  struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED, .size = 1024};
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  if ((rc = fi_fabric(info->fabric_attr, &fab, NULL)) ||
      (rc = fi_domain(fab, info, &dom, NULL)) || (rc = fi_av_open(dom, &aa, &av, NULL)) ||
      (rc = fi_cq_open(dom, &ca, &cq, NULL)) || (rc = fi_endpoint(dom, info, &ep, NULL)) ||
      (rc = fi_ep_bind(ep, &av->fid, 0)) ||
      (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) || (rc = fi_enable(ep)))
    die("open", rc);
}

static struct fid_mr *reg(void *buf, size_t len, uint64_t access, uint64_t key) {
  struct fid_mr *mr;
  int rc = fi_mr_reg(dom, buf, len, access, 0, key, 0, &mr, NULL);
  if (rc)
    die("fi_mr_reg", rc);
  if (info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
    if ((rc = fi_mr_bind(mr, &ep->fid, 0)) || (rc = fi_mr_enable(mr)))
      die("fi_mr_bind", rc);
  }
  return mr;
}

static long iters_for(size_t size) {
  long n = (long)((64u << 20) / (size ? size : 1));
  return n < 50 ? 50 : n > 20000 ? 20000 : n;
}

static void serve(char *buf, struct fid_mr *mr) {
  for (;;) {
    struct ctl c;
    recv_wait(&c, sizeof c, TAG_CTL);
    if (c.test == T_DONE)
      return;
    if (c.test == T_PINGPONG) {
      for (long i = 0; i < (long)c.iters; i++) {
        recv_wait(buf, c.size, TAG_DATA);
        send_wait(buf, c.size, TAG_DATA);
      }
    } else if (c.test == T_TAGGED_BW) {
      for (long i = 0; i < (long)c.iters; i += WINDOW) {
        for (int w = 0; w < WINDOW; w++)
          POST(fi_trecv(ep, buf, c.size, fi_mr_desc(mr), FI_ADDR_UNSPEC, TAG_DATA, 0, NULL));
        wait_n(WINDOW);
        send_wait(buf, 1, TAG_DATA);
      }
    }
    /* RMA tests: the next command comes when the client is done; the receive
     * above keeps reading the CQ (progress) meanwhile. */
  }
}

static double run(enum test t, char *buf, size_t size, long iters, const struct ctl *srv) {
  struct ctl c = {.test = t, .size = size, .iters = (uint64_t)iters};
  send_wait(&c, sizeof c, TAG_CTL);
  double t0 = now_us();
  uint64_t base = srv->base;
  if (t == T_WRITE_BW || t == T_READ_BW) {
    for (long i = 0; i < iters; i += WINDOW) {
      for (int w = 0; w < WINDOW; w++) {
        if (t == T_WRITE_BW)
          POST(fi_write(ep, buf, size, local_desc, peer, base, srv->key, NULL));
        else
          POST(fi_read(ep, buf, size, local_desc, peer, base, srv->key, NULL));
      }
      wait_n(WINDOW);
    }
    return (double)size * (double)(iters + (WINDOW - iters % WINDOW) % WINDOW) /
           (now_us() - t0);
  }
  if (t == T_WRITE_LAT) {
    for (long i = 0; i < iters; i++) {
      POST(fi_write(ep, buf, size, local_desc, peer, base, srv->key, NULL));
      wait_n(1);
    }
    return (now_us() - t0) / (double)iters;
  }
  if (t == T_PINGPONG) {
    for (long i = 0; i < iters; i++) {
      POST(fi_trecv(ep, buf + MAX_SIZE, size, local_desc, FI_ADDR_UNSPEC, TAG_DATA, 0, NULL));
      send_wait(buf, size, TAG_DATA);
      wait_n(1);
    }
    return (now_us() - t0) / (2.0 * (double)iters);
  }
  long sent = 0;
  for (long i = 0; i < iters; i += WINDOW) {
    POST(fi_trecv(ep, buf + MAX_SIZE, 1, local_desc, FI_ADDR_UNSPEC, TAG_DATA, 0, NULL));
    for (int w = 0; w < WINDOW; w++)
      POST(fi_tsend(ep, buf, size, local_desc, peer, TAG_DATA, NULL));
    sent += WINDOW;
    wait_n(WINDOW + 1);
  }
  return (double)size * (double)sent / (now_us() - t0);
}

int main(int argc, char **argv) {
  int server = argc == 2 && !strcmp(argv[1], "server");
  int client = argc == 3 && !strcmp(argv[1], "client");
  if (!server && !client) {
    fprintf(stderr, "usage: ofi_bench server | ofi_bench client NAME\n");
    return 2;
  }
  open_all();
  char *buf = aligned_alloc(4096, 2 * MAX_SIZE);
  if (!buf)
    die("out of memory", 0);
  memset(buf, 0x5a, 2 * MAX_SIZE);
  struct fid_mr *mr =
      reg(buf, 2 * MAX_SIZE, FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ |
                                 FI_REMOTE_WRITE, 0x0b);
  local_desc = fi_mr_desc(mr);
  unsigned char name[MAX_NAME];
  size_t len = sizeof name;
  int rc = fi_getname(&ep->fid, name, &len);
  if (rc)
    die("fi_getname", rc);
  if (server) {
    for (size_t i = 0; i < len; i++)
      printf("%02x", name[i]);
    printf("\n");
    fflush(stdout);
    /* The client's name arrives first (any source). */
    unsigned char cname[MAX_NAME + 8];
    POST(fi_trecv(ep, cname, sizeof cname, NULL, FI_ADDR_UNSPEC, TAG_CTL, 0, NULL));
    struct fi_cq_tagged_entry e;
    ssize_t got;
    while ((got = fi_cq_read(cq, &e, 1)) == -FI_EAGAIN)
      ;
    if (got != 1)
      die("client name", (long)got);
    if (fi_av_insert(av, cname, 1, &peer, 0, NULL) != 1)
      die("fi_av_insert client", 0);
    struct ctl c = {.key = fi_mr_key(mr),
                    .base = (info->domain_attr->mr_mode & FI_MR_VIRT_ADDR) ? (uintptr_t)buf : 0};
    send_wait(&c, sizeof c, TAG_CTL);
    serve(buf, mr);
    return 0;
  }
  unsigned char sname[MAX_NAME];
  size_t slen = strlen(argv[2]) / 2;
  if (slen == 0 || slen > MAX_NAME || strlen(argv[2]) != 2 * slen)
    die("bad server name", 0);
  for (size_t i = 0; i < slen; i++)
    if (sscanf(argv[2] + 2 * i, "%2hhx", &sname[i]) != 1)
      die("bad hex digit in the server name", (long)i);
  if (fi_av_insert(av, sname, 1, &peer, 0, NULL) != 1)
    die("fi_av_insert server", 0);
  send_wait(name, len, TAG_CTL);
  struct ctl srv;
  recv_wait(&srv, sizeof srv, TAG_CTL);
  for (enum test t = T_WRITE_BW; t <= T_TAGGED_BW; t++)
    for (size_t size = 64; size <= MAX_SIZE; size *= 4) {
      long iters = iters_for(size);
      if (t == T_WRITE_LAT || t == T_PINGPONG)
        iters = iters > 5000 ? 5000 : iters / 4 < 20 ? 20 : iters / 4;
      run(t, buf, size, iters / 10 < 16 ? 16 : iters / 10, &srv); /* warm-up */
      double v = run(t, buf, size, iters, &srv);
      printf("%s %zu %.2f\n", test_name[t], size, v);
      fflush(stdout);
    }
  struct ctl done = {.test = T_DONE};
  send_wait(&done, sizeof done, TAG_CTL);
  return 0;
}
