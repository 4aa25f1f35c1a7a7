/* ofi_addr.c - addressing as OFI applications use it, in one process: nodes
 * that are IP addresses (v4, v6, of lo and of the host's interface), host
 * names and omx board names; services that are port numbers (FI_SOURCE binds
 * the port, two ports give two endpoints, a taken port is refused, a client
 * naming a port reaches that port's endpoint and no other); fi_av_insertsvc
 * and fi_av_insertsym with IP addresses and ports.
 *
 * Environment: OFX_TEST_IP, an address of the host's interface (optional).
 * Host names of omx boards: tests ports_lo and ports_2h (ofi_ports.c).
 */
#include "common.h"

#include <mx_extensions.h>

#define T 20000.0

struct name {
  uint64_t nic;
  uint32_t eid, key;
};

static struct fi_info *info_for(const char *node, const char *service,
                                uint64_t flags, int *ret) {
  struct fi_info *h = t_hints(FI_TAGGED | FI_MSG), *info = NULL;
  h->domain_attr->av_type = FI_AV_TABLE;
  *ret = fi_getinfo(FI_VERSION(1, 17), node, service, flags, h, &info);
  fi_freeinfo(h);
  return info;
}

/* A node/service as a destination: its 16-byte name, or a zero name. */
static struct name dest_of(const char *node, const char *service) {
  int ret;
  struct name n = {0, 0, 0};
  struct fi_info *info = info_for(node, service, 0, &ret);
  CHECK(ret == 0 && info && info->dest_addr && info->dest_addrlen == 16,
        "fi_getinfo(%s, %s): %d", node, service, ret);
  if (info && info->dest_addr)
    memcpy(&n, info->dest_addr, sizeof n);
  fi_freeinfo(info);
  return n;
}

struct server {
  struct fi_info *info;
  struct fid_fabric *fab;
  struct fid_domain *dom;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  struct name name;
};

/* An endpoint bound with FI_SOURCE to node/service; fi_enable's result. */
static int bind_to(struct server *s, const char *node, const char *service) {
  int ret;
  memset(s, 0, sizeof *s);
  s->info = info_for(node, service, FI_SOURCE, &ret);
  REQUIRE(ret == 0 && s->info, "fi_getinfo(%s, %s, FI_SOURCE): %d", node ? node : "NULL",
          service, ret);
  CHECK(s->info->src_addr && s->info->src_addrlen == 16, "src_addr");
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_TAGGED};
  REQUIRE(fi_fabric(s->info->fabric_attr, &s->fab, NULL) == 0 &&
              fi_domain(s->fab, s->info, &s->dom, NULL) == 0 &&
              fi_av_open(s->dom, &aa, &s->av, NULL) == 0 &&
              fi_cq_open(s->dom, &ca, &s->cq, NULL) == 0 &&
              fi_endpoint(s->dom, s->info, &s->ep, NULL) == 0 &&
              fi_ep_bind(s->ep, &s->av->fid, 0) == 0 &&
              fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV) == 0,
          "open");
  ret = fi_enable(s->ep);
  if (ret == 0) {
    size_t len = sizeof s->name;
    CHECK_RET(fi_getname(&s->ep->fid, &s->name, &len), 0);
  }
  return ret;
}

static void unbind(struct server *s) {
  CHECK_RET(fi_close(&s->ep->fid), 0);
  CHECK_RET(fi_close(&s->cq->fid), 0);
  CHECK_RET(fi_close(&s->av->fid), 0);
  CHECK_RET(fi_close(&s->dom->fid), 0);
  CHECK_RET(fi_close(&s->fab->fid), 0);
  fi_freeinfo(s->info);
}

/* from sends one tagged word to `to` through AV address a; to receives it. */
static void exchange(struct server *from, fi_addr_t a, struct server *to, uint64_t v) {
  uint64_t got = 0;
  struct fi_context rc, sc;
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_trecv(to->ep, &got, 8, NULL, FI_ADDR_UNSPEC, 5, 0, &rc), 0);
  CHECK_RET(fi_tsend(from->ep, &v, 8, NULL, a, 5, &sc), 0);
  CHECK(fi_cq_sread(from->cq, &e, 1, NULL, (int)T) == 1 && e.op_context == &sc,
        "send completion");
  CHECK(fi_cq_sread(to->cq, &e, 1, NULL, (int)T) == 1 && got == v,
        "received %#llx, want %#llx", (unsigned long long)got, (unsigned long long)v);
}

static int same(struct name a, struct name b) {
  return a.nic == b.nic && a.eid == b.eid && a.key == b.key;
}

int main(void) {
  /* Two ports, two endpoints; FI_SOURCE with an IP node binds on this host. */
  struct server a, b, c;
  REQUIRE(bind_to(&a, "127.0.0.1", "9228") == 0, "bind 127.0.0.1:9228");
  CHECK(a.name.eid == 9228 % 31 && a.name.key == (OMX_PORT_KEY_BASE | 9228),
        "port 9228: endpoint %u key %#x", a.name.eid, a.name.key);
  REQUIRE(bind_to(&b, NULL, "9229") == 0, "bind :9229");
  /* The port mapping the runtime publishes (MX errors return: the provider
   * initialized MX that way). */
  uint32_t eid = 0, key = 0;
  CHECK(omx_port_endpoint(9228, &eid, &key) == MX_SUCCESS && eid == 9228 % 31 &&
            key == (OMX_PORT_KEY_BASE | 9228),
        "omx_port_endpoint(9228): %u %#x", eid, key);
  CHECK(omx_port_endpoint(65536, &eid, &key) == MX_BAD_PARAM_VAL, "port 65536");
  CHECK(b.name.eid != a.name.eid && b.name.key == (OMX_PORT_KEY_BASE | 9229),
        "port 9229: endpoint %u", b.name.eid);
  /* The same port again, and a port sharing its endpoint: in use. */
  CHECK_RET(bind_to(&c, "127.0.0.1", "9228"), -FI_EADDRINUSE);
  unbind(&c);
  CHECK_RET(bind_to(&c, NULL, "9259"), -FI_EADDRINUSE);
  unbind(&c);

  /* Every way of naming this host and port 9228 gives a's name. */
  const char *nodes[] = {"127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.5",
                         getenv("OFX_TEST_IP")};
  for (size_t i = 0; i < sizeof nodes / sizeof *nodes; i++) {
    if (!nodes[i])
      continue;
    struct name n = dest_of(nodes[i], "9228");
    CHECK(same(n, a.name), "%s:9228 gives endpoint %u key %#x nic %#llx", nodes[i],
          n.eid, n.key, (unsigned long long)n.nic);
  }
  struct name nb = dest_of("127.0.0.1", "9229");
  CHECK(same(nb, b.name), "127.0.0.1:9229");

  /* Traffic: b reaches a through a's fi_getinfo destination, and the other
   * way through fi_av_insertsvc. */
  struct name na = dest_of("127.0.0.1", "9228");
  fi_addr_t to_a, to_b;
  CHECK_RET(fi_av_insert(b.av, &na, 1, &to_a, 0, NULL), 1);
  exchange(&b, to_a, &a, 0x9228);
  CHECK_RET(fi_av_insertsvc(a.av, "127.0.0.1", "9229", &to_b, 0, NULL), 1);
  exchange(&a, to_b, &b, 0x9229);

  /* A port nobody bound whose endpoint is a's: refused by the key, not
   * delivered to a. */
  fi_addr_t wrong;
  CHECK_RET(fi_av_insertsvc(b.av, "127.0.0.1", "9290", &wrong, 0, NULL), 1);
  uint64_t v = 1;
  struct fi_context sc;
  ssize_t r = fi_tsend(b.ep, &v, 8, NULL, wrong, 5, &sc);
  CHECK(r == -FI_EACCES, "send to an unbound port sharing a's endpoint: %zd", r);

  /* fi_av_insertsym: 2 addresses x 2 ports, all of them this host. */
  fi_addr_t sym[4];
  CHECK_RET(fi_av_insertsym(b.av, "127.0.0.1", 2, "9228", 2, sym, 0, NULL), 4);
  struct name back;
  size_t blen = sizeof back;
  CHECK(fi_av_lookup(b.av, sym[0], &back, &blen) == 0 && same(back, a.name), "sym[0]");
  blen = sizeof back;
  CHECK(fi_av_lookup(b.av, sym[1], &back, &blen) == 0 && same(back, b.name), "sym[1]");
  blen = sizeof back;
  CHECK(fi_av_lookup(b.av, sym[2], &back, &blen) == 0 && same(back, a.name), "sym[2]");
  exchange(&b, sym[2], &a, 0x5e5e);
  /* A host name without a numeric suffix cannot make a range. */
  CHECK_RET(fi_av_insertsym(b.av, "localhost", 2, "9228", 1, sym, 0, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insertsym(b.av, "127.0.0.1", 1, "65535", 2, sym, 0, NULL), -FI_EINVAL);
  CHECK_RET(fi_av_insertsym(b.av, "127.0.0.1", 0, "9228", 1, sym, 0, NULL), -FI_EINVAL);

  /* Bad services and nodes. */
  int ret;
  struct fi_info *info;
  const char *bad_services[] = {"65536", "-1", "9228x", "http"};
  for (size_t i = 0; i < sizeof bad_services / sizeof *bad_services; i++) {
    info = info_for("127.0.0.1", bad_services[i], 0, &ret);
    CHECK(ret == -FI_ENODATA && !info, "service %s: %d", bad_services[i], ret);
    CHECK_RET(fi_av_insertsvc(b.av, "127.0.0.1", bad_services[i], &wrong, 0, NULL),
              -FI_EINVAL);
  }
  /* A node of this host without a service: where to open (a source). */
  info = info_for("127.0.0.1", NULL, 0, &ret);
  CHECK(ret == 0 && info && info->src_addr && !info->dest_addr, "127.0.0.1 alone: %d", ret);
  fi_freeinfo(info);
  /* An address nobody on an omx interface answers for (bounded wait). */
  info = info_for("192.0.2.1", "9228", 0, &ret);
  CHECK(ret == -FI_ENODATA && !info, "192.0.2.1: %d", ret);
  /* An address of another host cannot be a source. */
  info = info_for("192.0.2.1", "9228", FI_SOURCE, &ret);
  CHECK(ret == -FI_ENODATA && !info, "FI_SOURCE 192.0.2.1: %d", ret);

  unbind(&a);
  unbind(&b);
  /* The port is free again once its endpoint closed. */
  REQUIRE(bind_to(&c, "127.0.0.1", "9228") == 0, "rebind 9228");
  unbind(&c);
  DONE();
}
