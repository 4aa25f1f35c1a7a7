/* ofi_twoproc.c - two processes (on two hosts, or one) exchange names
 * through files and talk through the omx provider: tagged and untagged
 * messages 0 B to 8 MiB with data checked, CQ data, directed receives,
 * sources (fi_cq_readfrom), blocking reads, unexpected messages.
 *
 *   ofi_twoproc server DIR    writes DIR/server.name, reads DIR/client.name
 *   ofi_twoproc client DIR    the other way round
 */
#include "common.h"

#define T 20000.0

static void put_name(const char *dir, const char *who, const void *name) {
  char path[512], tmpp[520];
  snprintf(path, sizeof path, "%s/%s.name", dir, who);
  snprintf(tmpp, sizeof tmpp, "%s.tmp", path);
  FILE *f = fopen(tmpp, "wb");
  REQUIRE(f && fwrite(name, 16, 1, f) == 1 && fclose(f) == 0, "write %s", tmpp);
  REQUIRE(rename(tmpp, path) == 0, "rename %s", path);
}

static void get_name(const char *dir, const char *who, void *name) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.name", dir, who);
  for (double end = now_ms() + T; now_ms() < end; sleep_ms(20)) {
    FILE *f = fopen(path, "rb");
    if (!f)
      continue;
    size_t n = fread(name, 16, 1, f);
    fclose(f);
    if (n == 1)
      return;
  }
  REQUIRE(0, "no name in %s", path);
}

int main(int argc, char **argv) {
  REQUIRE(argc == 3 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "client")),
          "usage: ofi_twoproc server|client DIR");
  int server = !strcmp(argv[1], "server");
  struct fi_info *h = t_hints(FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE |
                              FI_REMOTE_CQ_DATA), *info = NULL;
  h->domain_attr->av_type = FI_AV_MAP;
  REQUIRE(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info) == 0, "getinfo");
  fi_freeinfo(h);
  struct tone one;
  t_open_one(&one, info, FI_AV_MAP);
  struct fid_av *av = one.av;
  struct fid_cq *cq = one.cq;
  struct fid_ep *ep = one.ep;
  REQUIRE(fi_enable(ep) == 0, "fi_enable");
  char me[16], peer[16];
  size_t len = sizeof me;
  REQUIRE(fi_getname(&ep->fid, me, &len) == 0, "getname");
  put_name(argv[2], argv[1], me);
  get_name(argv[2], server ? "client" : "server", peer);
  fi_addr_t pa;
  REQUIRE(fi_av_insert(av, peer, 1, &pa, 0, NULL) == 1, "av_insert");

  static const size_t sizes[] = {0, 1, 8, 4095, 4097, 32768, 65537, 1 << 20, 8 << 20};
  size_t maxl = 8 << 20;
  char *buf = xmalloc(maxl);
  struct fi_context c;
  struct fi_cq_tagged_entry e;
  fi_addr_t src;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t l = sizes[i];
    for (int tagged = 0; tagged < 2; tagged++) {
      uint32_t seed = (uint32_t)(i * 2 + tagged);
      if (server) {
        /* Receive (directed at the client), then echo back with data. */
        memset(buf, 0, l);
        CHECK_RET(tagged ? fi_trecv(ep, buf, maxl, NULL, pa, 100 + i, 0, &c)
                         : fi_recv(ep, buf, maxl, NULL, pa, &c),
                  0);
        ssize_t r = fi_cq_sreadfrom(cq, &e, 1, &src, NULL, (int)T);
        CHECK(r == 1 && e.len == l && src == pa && verify(buf, l, seed) < 0 &&
                  (e.flags & FI_REMOTE_CQ_DATA) && e.data == seed,
              "server: size %zu tagged %d: r %zd len %zu", l, tagged, r, e.len);
        fill(buf, l, seed + 1000);
        CHECK_RET(tagged ? fi_tsenddata(ep, buf, l, NULL, seed + 1000, pa, 200 + i, &c)
                         : fi_senddata(ep, buf, l, NULL, seed + 1000, pa, &c),
                  0);
        CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && e.op_context == &c,
              "server send completion");
      } else {
        fill(buf, l, seed);
        CHECK_RET(tagged ? fi_tsenddata(ep, buf, l, NULL, seed, pa, 100 + i, &c)
                         : fi_senddata(ep, buf, l, NULL, seed, pa, &c),
                  0);
        CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && e.op_context == &c,
              "client send completion");
        /* The reply may already be unexpected when this is posted. */
        memset(buf, 0, l);
        CHECK_RET(tagged ? fi_trecv(ep, buf, maxl, NULL, FI_ADDR_UNSPEC, 200 + i, 0, &c)
                         : fi_recv(ep, buf, maxl, NULL, FI_ADDR_UNSPEC, &c),
                  0);
        ssize_t r = fi_cq_sreadfrom(cq, &e, 1, &src, NULL, (int)T);
        CHECK(r == 1 && e.len == l && src == pa && verify(buf, l, seed + 1000) < 0 &&
                  e.data == seed + 1000 && (!tagged || e.tag == 200 + i),
              "client: size %zu tagged %d: r %zd len %zu", l, tagged, r, e.len);
      }
    }
  }
  /* Last: a peek on the server for a message the client sent. */
  if (server) {
    struct iovec iov = {buf, 64};
    struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = pa,
                              .tag = 999, .context = &c};
    ssize_t r = -FI_EAGAIN;
    for (double end = now_ms() + T; now_ms() < end && r != 1;) {
      CHECK_RET(fi_trecvmsg(ep, &m, FI_PEEK | FI_CLAIM), 0);
      r = fi_cq_sread(cq, &e, 1, NULL, (int)T);
      if (r == -FI_EAVAIL) {
        struct fi_cq_err_entry err;
        CHECK(fi_cq_readerr(cq, &err, 0) == 1 && err.err == FI_ENOMSG, "enomsg");
        sleep_ms(10);
      }
    }
    CHECK(r == 1 && e.len == 6 && e.data == 77, "peek over the network");
    CHECK_RET(fi_trecvmsg(ep, &m, FI_CLAIM), 0);
    CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && !strcmp(buf, "claim"),
          "claim over the network");
    CHECK_RET(fi_tinject(ep, "bye", 4, pa, 1000), 0);
  } else {
    CHECK_RET(fi_tinjectdata(ep, "claim", 6, 77, pa, 999), 0);
    CHECK_RET(fi_trecv(ep, buf, 8, NULL, pa, 1000, 0, &c), 0);
    CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && !strcmp(buf, "bye"), "bye");
  }
  /* Let the last injected message leave before closing. */
  sleep_ms(200);
  t_close_one(&one);
  fi_freeinfo(info);
  free(buf);
  DONE();
}
