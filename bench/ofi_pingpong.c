/* ofi_pingpong.c - omx_perf's ping-pong loop written over libfabric, so that the
 * difference with omx_perf is the provider's cost and nothing else.
 *
 * fi_pingpong (fabtests) reposts its receive between a completion and the reply,
 * on the critical path, and polls through a timeout check; omx_perf posts the
 * next receive before it sends (client) or after it replies (server). This
 * program keeps omx_perf's order: client: post receive, send, wait for the
 * reply; server: post receive, wait, reply. Sends up to the inject size use
 * fi_tinject (as Open MPI's OFI MTL does), larger ones fi_tsend.
 *
 *   ofi_pingpong server [SIZE [ITERS]]      prints its name (32 hex digits)
 *   ofi_pingpong client NAME [SIZE [ITERS]] prints "SIZE LATENCY_US" (half a
 *                                           round trip, mean over ITERS after
 *                                           ITERS/20 warm-up round trips)
 *
 * Build: cc -O2 bench/ofi_pingpong.c -lfabric -o ofi_pingpong; run with
 * FI_PROVIDER_PATH=build/lib/libfabric (the omx provider; FI_PROVIDER picks
 * another). OFI_PINGPONG_BLOCK=1 waits in fi_cq_sread instead of spinning on
 * fi_cq_read (bench/instructions.sh: no idle polls in the count). The client sends its own name first,
 * so the server needs no address from outside. Defaults: 8 B, 20000.
 */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAME_LEN 16
#define TAG_NAME 1
#define TAG_DATA 2

static void die(const char *what, long rc) {
  fprintf(stderr, "ofi_pingpong: %s: %ld (%s)\n", what, rc,
          rc < 0 ? fi_strerror((int)-rc) : "");
  exit(1);
}

static struct fid_ep *ep;
static struct fid_cq *cq;
static size_t inject_max;
static int blocking;

/* Spins on the CQ until one completion arrives (or sleeps in fi_cq_sread). */
static void wait_one(void) {
  struct fi_cq_tagged_entry e;
  for (;;) {
    ssize_t n = blocking ? fi_cq_sread(cq, &e, 1, NULL, -1) : fi_cq_read(cq, &e, 1);
    if (n == 1)
      return;
    if (n != -FI_EAGAIN)
      die("fi_cq_read", (long)n);
  }
}

static void post_recv(void *buf, size_t len, uint64_t tag) {
  ssize_t rc = fi_trecv(ep, buf, len, NULL, FI_ADDR_UNSPEC, tag, 0, NULL);
  if (rc)
    die("fi_trecv", (long)rc);
}

/* Sends one message; returns the completions it will produce (0 for an
 * inject, 1 for a send). Callers count completions rather than telling them
 * apart: a reply may be read before the completion of the send it answers. */
static int send_msg(const void *buf, size_t len, fi_addr_t to, uint64_t tag) {
  ssize_t rc;
  if (len <= inject_max) {
    while ((rc = fi_tinject(ep, buf, len, to, tag)) == -FI_EAGAIN)
      ;
    if (rc)
      die("fi_tinject", (long)rc);
    return 0;
  }
  rc = fi_tsend(ep, buf, len, NULL, to, tag, NULL);
  if (rc)
    die("fi_tsend", (long)rc);
  return 1;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void hex_to_name(const char *hex, unsigned char *name) {
  if (strlen(hex) != 2 * NAME_LEN)
    die("a name is 32 hex digits", 0);
  for (int i = 0; i < NAME_LEN; i++)
    if (sscanf(hex + 2 * i, "%2hhx", &name[i]) != 1)
      die("bad hex digit in name", i);
}

/* N round trips of SIZE bytes: client: post a receive, send, wait for both; server:
 * post a receive, wait, reply. */
static void rounds(long n, int client, char *sbuf, char *rbuf, size_t size, fi_addr_t to) {
  for (long i = 0; i < n; i++) {
    post_recv(rbuf, size, TAG_DATA);
    int c = 1;
    if (client) {
      c += send_msg(sbuf, size, to, TAG_DATA);
    } else {
      wait_one();
      c = send_msg(sbuf, size, to, TAG_DATA);
    }
    while (c--)
      wait_one();
  }
}

/* The timed rounds, in a function of their own: bench/instructions.sh counts what
 * runs inside it (callgrind --toggle-collect=measured_rounds*). */
__attribute__((noinline)) void measured_rounds(long n, int client, char *sbuf, char *rbuf,
                                               size_t size, fi_addr_t to) {
  rounds(n, client, sbuf, rbuf, size, to);
}

int main(int argc, char **argv) {
  int server = argc >= 2 && !strcmp(argv[1], "server");
  int client = argc >= 3 && !strcmp(argv[1], "client");
  if (!server && !client) {
    fprintf(stderr, "usage: ofi_pingpong server [SIZE [ITERS]] | "
                    "client NAME [SIZE [ITERS]]\n");
    return 2;
  }
  int a = server ? 2 : 3;
  size_t size = argc > a ? strtoul(argv[a], NULL, 0) : 8;
  long iters = argc > a + 1 ? strtol(argv[a + 1], NULL, 0) : 20000;
  if (iters < 1)
    die("ITERS must be at least 1", iters);

  struct fi_info *h = fi_allocinfo(), *info = NULL;
  h->caps = FI_TAGGED;
  h->ep_attr->type = FI_EP_RDM;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  h->domain_attr->av_type = FI_AV_TABLE;
  h->mode = FI_CONTEXT;
  /* The omx provider unless FI_PROVIDER names another one. */
  if (!getenv("FI_PROVIDER"))
    h->fabric_attr->prov_name = strdup("omx");
  int rc = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
  if (rc)
    die("fi_getinfo", rc);
  fi_freeinfo(h);
  inject_max = info->tx_attr->inject_size;

  struct fid_fabric *fab;
  struct fid_domain *dom;
  struct fid_av *av;
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  blocking = getenv("OFI_PINGPONG_BLOCK") && atoi(getenv("OFI_PINGPONG_BLOCK"));
  struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED,
                          .wait_obj = blocking ? FI_WAIT_UNSPEC : FI_WAIT_NONE};
  if ((rc = fi_fabric(info->fabric_attr, &fab, NULL)) ||
      (rc = fi_domain(fab, info, &dom, NULL)) ||
      (rc = fi_av_open(dom, &aa, &av, NULL)) ||
      (rc = fi_cq_open(dom, &ca, &cq, NULL)) ||
      (rc = fi_endpoint(dom, info, &ep, NULL)) ||
      (rc = fi_ep_bind(ep, &av->fid, 0)) ||
      (rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV)) ||
      (rc = fi_enable(ep)))
    die("opening the endpoint", rc);

  unsigned char me[NAME_LEN], peer[NAME_LEN];
  size_t len = sizeof me;
  if ((rc = fi_getname(&ep->fid, me, &len)) || len != NAME_LEN)
    die("fi_getname", rc);
  char *sbuf = calloc(1, size ? size : 1), *rbuf = calloc(1, size ? size : 1);
  if (!sbuf || !rbuf)
    die("out of memory", 0);

  fi_addr_t to;
  if (server) {
    for (int i = 0; i < NAME_LEN; i++)
      printf("%02x", me[i]);
    printf("\n");
    fflush(stdout);
    post_recv(peer, NAME_LEN, TAG_NAME);
    wait_one();
  } else {
    hex_to_name(argv[2], peer);
  }
  if (fi_av_insert(av, peer, 1, &to, 0, NULL) != 1)
    die("fi_av_insert", 0);
  if (client && send_msg(me, NAME_LEN, to, TAG_NAME))
    wait_one();

  long warm = iters / 20 + 1;
  rounds(warm, client, sbuf, rbuf, size, to);
  double t0 = now_us();
  measured_rounds(iters, client, sbuf, rbuf, size, to);
  if (client)
    printf("%zu %.3f\n", size, (now_us() - t0) / iters / 2);
  /* The server's last reply may still be on its way: let MX flush it. */
  if (server) {
    struct timespec ts = {0, 200 * 1000000L};
    nanosleep(&ts, NULL);
  }
  fi_close(&ep->fid);
  fi_close(&av->fid);
  fi_close(&cq->fid);
  fi_close(&dom->fid);
  fi_close(&fab->fid);
  fi_freeinfo(info);
  free(sbuf);
  free(rbuf);
  return 0;
}
