/* ofi_ports.c - a server bound to a port and clients naming it the way
 * fabtests do (node = IP address or host name, service = port), in other
 * processes of the same host or of another host.
 *
 *   ofi_ports server PORT DIR [CLIENTS]  binds PORT (FI_SOURCE), writes
 *                                        DIR/PORT.ready, answers CLIENTS (1)
 *   ofi_ports client PORT DIR NODE       waits for DIR/PORT.ready, resolves
 *                                        NODE:PORT with fi_getinfo
 *
 * The client sends its name and the port it meant; the server inserts the
 * name, checks the port is its own and answers 4 KiB of data derived from
 * the port, which the client checks: so a client that reached another
 * port's server fails on both sides.
 */
#include "common.h"

#define T 20000.0
#define REPLY 4096

struct hello {
  char name[16];
  uint32_t port;
};

int main(int argc, char **argv) {
  REQUIRE(argc >= 4 && (!strcmp(argv[1], "server") || !strcmp(argv[1], "client")),
          "usage: ofi_ports server PORT DIR [CLIENTS] | client PORT DIR NODE");
  int server = !strcmp(argv[1], "server");
  const char *port = argv[2], *dir = argv[3];
  REQUIRE(server || argc == 5, "client needs NODE");
  int clients = server && argc == 5 ? atoi(argv[4]) : 1;
  char ready[512];
  snprintf(ready, sizeof ready, "%s/%s.ready", dir, port);
  if (!server) {
    int ok = 0;
    for (double end = now_ms() + T; !ok && now_ms() < end; sleep_ms(10))
      ok = access(ready, F_OK) == 0;
    REQUIRE(ok, "no server on port %s", port);
  }
  struct fi_info *h = t_hints(FI_TAGGED | FI_MSG), *info = NULL;
  int ret = server ? fi_getinfo(FI_VERSION(1, 17), NULL, port, FI_SOURCE, h, &info)
                   : fi_getinfo(FI_VERSION(1, 17), argv[4], port, 0, h, &info);
  fi_freeinfo(h);
  REQUIRE(ret == 0 && info, "fi_getinfo(%s, %s): %d (%s)", server ? "NULL" : argv[4],
          port, ret, fi_strerror(-ret));
  REQUIRE(server ? info->src_addr != NULL : info->dest_addr != NULL, "address");
  struct tone one;
  t_open_one(&one, info, FI_AV_TABLE);
  struct fid_av *av = one.av;
  struct fid_cq *cq = one.cq;
  struct fid_ep *ep = one.ep;
  REQUIRE((ret = fi_enable(ep)) == 0, "fi_enable: %d (%s)", ret, fi_strerror(-ret));
  struct hello hi;
  size_t len = sizeof hi.name;
  REQUIRE(fi_getname(&ep->fid, hi.name, &len) == 0, "getname");
  hi.port = (uint32_t)atoi(port);
  char *buf = xmalloc(REPLY);
  struct fi_context c;
  struct fi_cq_tagged_entry e;
  if (server) {
    FILE *f = fopen(ready, "w");
    REQUIRE(f && fclose(f) == 0, "write %s", ready);
    for (int i = 0; i < clients; i++) {
      struct hello from;
      CHECK_RET(fi_trecv(ep, &from, sizeof from, NULL, FI_ADDR_UNSPEC, 1, 0, &c), 0);
      CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && e.len == sizeof from,
            "hello %d", i);
      CHECK(from.port == hi.port, "a client meant port %u, this is %u", from.port,
            hi.port);
      fi_addr_t pa;
      CHECK_RET(fi_av_insert(av, from.name, 1, &pa, 0, NULL), 1);
      fill(buf, REPLY, hi.port);
      /* Complete once matched: the client has it before this process exits. */
      struct iovec iov = {buf, REPLY};
      struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = pa,
                                .tag = 2, .context = &c};
      CHECK_RET(fi_tsendmsg(ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
      CHECK(fi_cq_sread(cq, &e, 1, NULL, (int)T) == 1 && e.op_context == &c, "reply");
    }
  } else {
    fi_addr_t pa;
    REQUIRE(fi_av_insert(av, info->dest_addr, 1, &pa, 0, NULL) == 1, "av_insert");
    struct fi_context rc;
    memset(buf, 0, REPLY);
    CHECK_RET(fi_trecv(ep, buf, REPLY, NULL, FI_ADDR_UNSPEC, 2, 0, &rc), 0);
    CHECK_RET(fi_tsend(ep, &hi, sizeof hi, NULL, pa, 1, &c), 0);
    size_t got_len = 0;
    for (int sent = 0, got = 0; !(sent && got);) {
      ssize_t r = fi_cq_sread(cq, &e, 1, NULL, (int)T);
      REQUIRE(r == 1, "completion: %zd", r);
      sent |= e.op_context == &c;
      if (e.op_context == &rc) {
        got = 1;
        got_len = e.len;
      }
    }
    CHECK(got_len == REPLY, "reply length %zu", got_len);
    CHECK(verify(buf, REPLY, hi.port) < 0, "reply data of port %u", hi.port);
  }
  t_close_one(&one);
  fi_freeinfo(info);
  free(buf);
  DONE();
}
