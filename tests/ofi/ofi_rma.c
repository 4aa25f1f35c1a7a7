/* ofi_rma.c - FI_RMA in one process, endpoint 0 the initiator, endpoint 1
 * the target: fi_write/writev/writemsg/inject_write and fi_read/readv/readmsg
 * of 8 B to 1 MiB into registered memory (keys from the provider, or the
 * application's), data and completions checked, counters; and every refusal
 * a clear error with nothing written: a wrong key, a range past the region,
 * a write into read-only memory, a closed registration, impossible keys;
 * remote CQ data (fi_writedata, fi_inject_writedata, fi_writemsg) reported by
 * the target's CQ and never seen by its untagged receives.
 *
 * OFX_TEST_KEYS=prov: mr_mode FI_MR_PROV_KEY; otherwise the application's keys.
 */
#include "common.h"

#include <rdma/fi_rma.h>
#include <stdbool.h>

#define T 20000.0
#define TLEN (1u << 20)
#define GUARD 4096

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;
static struct fid_cq *cq[2];
static struct fid_ep *ep[2];
static struct fid_cntr *wr, *rd;
static fi_addr_t peer; /* the target, from the initiator */
static bool prov;

static struct fid_mr *reg(void *buf, size_t len, uint64_t access, uint64_t want, int *ret) {
  struct fid_mr *mr = NULL;
  *ret = fi_mr_reg(dom, buf, len, access, 0, want, 0, &mr, NULL);
  return mr;
}

/* One completion of the initiator: 1 and e, or the error entry in ee. */
static ssize_t done(struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *ee) {
  ssize_t r = fi_cq_sread(cq[0], e, 1, NULL, (int)T);
  if (r == -FI_EAVAIL) {
    memset(ee, 0, sizeof *ee);
    r = fi_cq_readerr(cq[0], ee, 0) == 1 ? -FI_EAVAIL : -FI_EOTHER;
  }
  return r;
}

static void expect_ok(void *ctx, uint64_t kind, const char *what) {
  struct fi_cq_tagged_entry e;
  struct fi_cq_err_entry ee;
  ssize_t r = done(&e, &ee);
  CHECK(r == 1 && e.op_context == ctx && e.flags == (FI_RMA | kind), "%s: %zd (err %d) flags %#llx",
        what, r, r == -FI_EAVAIL ? ee.err : 0, (unsigned long long)e.flags);
}

static void expect_denied(void *ctx, const char *what) {
  struct fi_cq_tagged_entry e;
  struct fi_cq_err_entry ee;
  ssize_t r = done(&e, &ee);
  CHECK(r == -FI_EAVAIL && ee.err == FI_EACCES && ee.op_context == ctx,
        "%s refused with FI_EACCES: %zd err %d", what, r, r == -FI_EAVAIL ? ee.err : 0);
}

static void expect_ok_send(void *ctx) {
  struct fi_cq_tagged_entry e;
  struct fi_cq_err_entry ee;
  CHECK(done(&e, &ee) == 1 && e.op_context == ctx && (e.flags & FI_SEND), "send");
}

static void setup(void) {
  struct fi_info *h = t_hints(FI_RMA | FI_MSG);
  h->domain_attr->mr_mode = prov ? (FI_MR_PROV_KEY | FI_MR_VIRT_ADDR) : 0;
  int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
  fi_freeinfo(h);
  REQUIRE(ret == 0 && info, "fi_getinfo FI_RMA: %d", ret);
  CHECK((info->caps & (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) ==
            (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE),
        "RMA caps %#llx", (unsigned long long)info->caps);
  CHECK(info->domain_attr->mr_mode == (prov ? FI_MR_PROV_KEY : 0), "mr_mode %#x",
        info->domain_attr->mr_mode);
  CHECK(info->tx_attr->rma_iov_limit == 1, "rma_iov_limit");
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
  REQUIRE(fi_fabric(info->fabric_attr, &fab, NULL) == 0 &&
              fi_domain(fab, info, &dom, NULL) == 0 &&
              fi_av_open(dom, &aa, &av, NULL) == 0 &&
              fi_cntr_open(dom, &ca, &wr, NULL) == 0 && fi_cntr_open(dom, &ca, &rd, NULL) == 0,
          "open");
}

static void enable(void) {
  for (int i = 0; i < 2; i++) {
    struct fi_cq_attr qa = {.format = FI_CQ_FORMAT_TAGGED};
    REQUIRE(fi_cq_open(dom, &qa, &cq[i], NULL) == 0 &&
                fi_endpoint(dom, info, &ep[i], NULL) == 0 &&
                fi_ep_bind(ep[i], &av->fid, 0) == 0 &&
                fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV) == 0,
            "endpoint %d", i);
  }
  REQUIRE(fi_ep_bind(ep[0], &wr->fid, FI_WRITE) == 0 && fi_ep_bind(ep[0], &rd->fid, FI_READ) == 0,
          "bind counters");
  CHECK_RET(fi_ep_bind(ep[0], &wr->fid, FI_REMOTE_WRITE), -FI_EINVAL);
  for (int i = 0; i < 2; i++)
    REQUIRE(fi_enable(ep[i]) == 0, "enable %d", i);
  char name[16];
  size_t len = sizeof name;
  REQUIRE(fi_getname(&ep[1]->fid, name, &len) == 0 &&
              fi_av_insert(av, name, 1, &peer, 0, NULL) == 1,
          "target address");
}

int main(void) {
  const char *keys = getenv("OFX_TEST_KEYS");
  prov = keys && !strcmp(keys, "prov");
  setup();
  /* The target's memory: a region with guards on both sides. One region is
   * registered before the endpoints exist, the others after. */
  char *mem = xmalloc(TLEN + 2 * GUARD), *tgt = mem + GUARD;
  char *ro = xmalloc(4096), *local = xmalloc(TLEN), *back = xmalloc(TLEN);
  memset(mem, 0x5a, TLEN + 2 * GUARD);
  fill(ro, 4096, 9);
  int ret;
  struct fid_mr *mr = reg(tgt, TLEN, FI_REMOTE_READ | FI_REMOTE_WRITE, 0x1234, &ret);
  REQUIRE(ret == 0 && mr, "fi_mr_reg remote: %d", ret);
  uint64_t key = fi_mr_key(mr);
  CHECK(prov ? key != 0x1234 && key < (1ULL << 32) : key == 0x1234, "key %#llx",
        (unsigned long long)key);
  enable();
  struct fid_mr *rmr = reg(ro, 4096, FI_REMOTE_READ, 0x77, &ret);
  REQUIRE(ret == 0 && rmr, "fi_mr_reg read-only: %d", ret);
  uint64_t rkey = fi_mr_key(rmr);
  if (!prov) {
    struct fid_mr *dup = reg(ro, 64, FI_REMOTE_READ, 0x77, &ret);
    CHECK(ret == -FI_ENOKEY && !dup, "a key in use: %d", ret);
    dup = reg(ro, 64, FI_REMOTE_READ, 1ULL << 32, &ret);
    CHECK(ret == -FI_ENOKEY && !dup, "a key of 2^32: %d", ret);
  }

  /* Writes of every size, then reads of them back. */
  static const size_t sizes[] = {8, 4096, 65536, TLEN};
  struct fi_context c;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t len = sizes[i], off = len == TLEN ? 0 : 1000 * (i + 1);
    fill(local, len, (uint32_t)i);
    CHECK_RET(fi_write(ep[0], local, len, NULL, peer, off, key, &c), 0);
    expect_ok(&c, FI_WRITE, "write");
    CHECK(verify(tgt + off, len, (uint32_t)i) < 0, "written %zu at %zu", len, off);
    memset(back, 0, len);
    CHECK_RET(fi_read(ep[0], back, len, NULL, peer, off, key, &c), 0);
    expect_ok(&c, FI_READ, "read");
    CHECK(verify(back, len, (uint32_t)i) < 0, "read back %zu", len);
  }
  CHECK(fi_cntr_read(wr) == 4 && fi_cntr_read(rd) == 4, "counters: %llu writes %llu reads",
        (unsigned long long)fi_cntr_read(wr), (unsigned long long)fi_cntr_read(rd));
  /* v and msg forms, and an injected write (no completion; the data lands). */
  struct iovec iov = {local, 256};
  fill(local, 256, 40);
  CHECK_RET(fi_writev(ep[0], &iov, NULL, 1, peer, 256, key, &c), 0);
  expect_ok(&c, FI_WRITE, "writev");
  struct fi_rma_iov riov = {.addr = 512, .len = 256, .key = key};
  struct fi_msg_rma m = {.msg_iov = &iov, .iov_count = 1, .addr = peer, .rma_iov = &riov,
                         .rma_iov_count = 1, .context = &c};
  CHECK_RET(fi_writemsg(ep[0], &m, FI_COMPLETION), 0);
  expect_ok(&c, FI_WRITE, "writemsg");
  CHECK(verify(tgt + 256, 256, 40) < 0 && verify(tgt + 512, 256, 40) < 0, "v/msg data");
  iov.iov_base = back;
  riov.addr = 256;
  CHECK_RET(fi_readmsg(ep[0], &m, FI_COMPLETION), 0);
  expect_ok(&c, FI_READ, "readmsg");
  CHECK(verify(back, 256, 40) < 0, "readmsg data");
  CHECK_RET(fi_readv(ep[0], &iov, NULL, 1, peer, 512, key, &c), 0);
  expect_ok(&c, FI_READ, "readv");
  fill(local, 64, 41);
  CHECK_RET(fi_inject_write(ep[0], local, 64, peer, 2048, key), 0);
  memset(local, 0, 64); /* the caller's buffer is free at once */
  bool landed = false;
  for (double end = now_ms() + T; !landed && now_ms() < end;) {
    CHECK_RET(fi_read(ep[0], back, 64, NULL, peer, 2048, key, &c), 0);
    expect_ok(&c, FI_READ, "read after inject");
    landed = verify(back, 64, 41) < 0;
  }
  CHECK(landed, "injected write landed");
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_cq_read(cq[0], &e, 1), -FI_EAGAIN);
  /* The read-only region: read yes, write no. */
  CHECK_RET(fi_read(ep[0], back, 4096, NULL, peer, 0, rkey, &c), 0);
  expect_ok(&c, FI_READ, "read of read-only memory");
  CHECK(verify(back, 4096, 9) < 0, "read-only data");
  CHECK_RET(fi_write(ep[0], local, 8, NULL, peer, 0, rkey, &c), 0);
  expect_denied(&c, "write into read-only memory");
  CHECK(verify(ro, 4096, 9) < 0, "read-only memory untouched");

  /* Remote CQ data: the target's CQ reports each write with its data, and
   * untagged receives never see the notifications. */
  uint64_t word = 0;
  struct fi_context rc;
  CHECK_RET(fi_recv(ep[1], &word, 8, NULL, FI_ADDR_UNSPEC, &rc), 0);
  fill(local, 300, 50);
  CHECK_RET(fi_writedata(ep[0], local, 300, NULL, 0xabcd, peer, 4096, key, &c), 0);
  expect_ok(&c, FI_WRITE, "writedata");
  CHECK(fi_cq_sread(cq[1], &e, 1, NULL, (int)T) == 1 &&
            e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) && e.data == 0xabcd &&
            e.len == 300 && e.op_context == NULL,
        "target completion of writedata: flags %#llx data %#llx len %zu",
        (unsigned long long)e.flags, (unsigned long long)e.data, e.len);
  CHECK(verify(tgt + 4096, 300, 50) < 0, "writedata data in place");
  fill(local, 32, 51);
  CHECK_RET(fi_inject_writedata(ep[0], local, 32, 0x51, peer, 8192, key), 0);
  /* The initiator never reads its CQ or counters: omx's progress sends the
   * notification once the write is in place, and the target's CQ reports it. */
  ssize_t got = fi_cq_sread(cq[1], &e, 1, NULL, (int)T);
  CHECK(got == 1 && e.flags == (FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA) &&
            e.data == 0x51 && e.len == 32 && verify(tgt + 8192, 32, 51) < 0,
        "inject_writedata reaches the target without an initiator read: %zd", got);
  CHECK_RET(fi_cq_read(cq[0], &e, 1), -FI_EAGAIN); /* an inject reports nothing */
  riov = (struct fi_rma_iov){.addr = 9000, .len = 256, .key = key};
  iov = (struct iovec){local, 256};
  m = (struct fi_msg_rma){.msg_iov = &iov, .iov_count = 1, .addr = peer, .rma_iov = &riov,
                          .rma_iov_count = 1, .context = &c, .data = 0x77};
  CHECK_RET(fi_writemsg(ep[0], &m, FI_REMOTE_CQ_DATA | FI_COMPLETION), 0);
  expect_ok(&c, FI_WRITE, "writemsg with CQ data");
  CHECK(fi_cq_sread(cq[1], &e, 1, NULL, (int)T) == 1 && e.data == 0x77 && e.len == 256,
        "writemsg CQ data at the target");
  /* The untagged receive is still waiting for a real message. */
  uint64_t msg = 0x3e3e;
  CHECK_RET(fi_send(ep[0], &msg, 8, NULL, peer, &c), 0);
  expect_ok_send(&c);
  CHECK(fi_cq_sread(cq[1], &e, 1, NULL, (int)T) == 1 && e.op_context == &rc && word == 0x3e3e,
        "the untagged receive got the message, not a notification");

  /* Refusals: nothing written. Snapshot the target and its guards. */
  char *snap = xmalloc(TLEN + 2 * GUARD);
  memcpy(snap, mem, TLEN + 2 * GUARD);
  memset(local, 0xee, 64);
  uint64_t bad = key ^ 0x5;
  CHECK_RET(fi_write(ep[0], local, 64, NULL, peer, 0, bad, &c), 0);
  expect_denied(&c, "write with a wrong key");
  CHECK_RET(fi_read(ep[0], back, 64, NULL, peer, 0, bad, &c), 0);
  expect_denied(&c, "read with a wrong key");
  CHECK_RET(fi_write(ep[0], local, 64, NULL, peer, TLEN - 32, key, &c), 0);
  expect_denied(&c, "write past the end");
  CHECK_RET(fi_write(ep[0], local, 8, NULL, peer, TLEN, key, &c), 0);
  expect_denied(&c, "write right after the end");
  CHECK_RET(fi_read(ep[0], back, 64, NULL, peer, TLEN - 8, key, &c), 0);
  expect_denied(&c, "read past the end");
  CHECK_RET(fi_write(ep[0], local, 8, NULL, peer, 0, 1ULL << 32, &c), -FI_EINVAL);
  CHECK_RET(fi_write(ep[0], local, 8, NULL, peer, 1ULL << 32, key, &c), -FI_EINVAL);
  CHECK_RET(fi_writedata(ep[0], local, 64, NULL, 9, peer, 0, bad, &c), 0);
  expect_denied(&c, "writedata with a wrong key");
  CHECK(!memcmp(snap, mem, TLEN + 2 * GUARD), "refused accesses wrote nothing");
  CHECK_RET(fi_cq_sread(cq[1], &e, 1, NULL, 100), -FI_EAGAIN); /* no notification */
  CHECK(fi_cntr_readerr(wr) == 5 && fi_cntr_readerr(rd) == 2, "error counters %llu %llu",
        (unsigned long long)fi_cntr_readerr(wr), (unsigned long long)fi_cntr_readerr(rd));
  /* A closed registration takes no more accesses. */
  CHECK_RET(fi_close(&mr->fid), 0);
  CHECK_RET(fi_write(ep[0], local, 64, NULL, peer, 0, key, &c), 0);
  expect_denied(&c, "write after fi_close of the region");
  CHECK(!memcmp(snap, mem, TLEN + 2 * GUARD), "closed region untouched");

  CHECK_RET(fi_close(&rmr->fid), 0);
  for (int i = 0; i < 2; i++) {
    CHECK_RET(fi_close(&ep[i]->fid), 0);
    CHECK_RET(fi_close(&cq[i]->fid), 0);
  }
  CHECK_RET(fi_close(&wr->fid), 0);
  CHECK_RET(fi_close(&rd->fid), 0);
  CHECK_RET(fi_close(&av->fid), 0);
  CHECK_RET(fi_close(&dom->fid), 0);
  CHECK_RET(fi_close(&fab->fid), 0);
  fi_freeinfo(info);
  free(mem);
  free(snap);
  free(ro);
  free(local);
  free(back);
  DONE();
}
