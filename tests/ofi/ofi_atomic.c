/* ofi_atomic.c - FI_ATOMIC in one process, endpoint 1 the target, endpoints
 * 0 and 2 initiators: every operation on every type as fi_atomic,
 * fi_fetch_atomic and fi_compare_atomic (2-element vectors, results and old
 * values checked, guards around the target untouched), the *valid calls and
 * fi_query_atomic, inject, counters; refusals with nothing written (wrong key,
 * past the end, straddling the end, permission missing); and two threads on
 * two endpoints adding 1 to one counter: the exact total, each old value
 * seen once. */
#include "common.h"

#include <pthread.h>
#include <rdma/fi_atomic.h>
#include <stdbool.h>

#define T 20000.0
#define GUARD 64
#define PER_THREAD 400

static struct fi_info *info;
static struct fid_fabric *fab;
static struct fid_domain *dom;
static struct fid_av *av;
static struct fid_cq *cq[3];
static struct fid_ep *ep[3];
static struct fid_cntr *wr, *rd;
static fi_addr_t peer[3]; /* the target, from each initiator */

static const size_t tsize[] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8};

static void put(enum fi_datatype dt, void *p, double v) {
  switch (dt) {
  case FI_INT8: *(int8_t *)p = (int8_t)v; break;
  case FI_UINT8: *(uint8_t *)p = (uint8_t)v; break;
  case FI_INT16: *(int16_t *)p = (int16_t)v; break;
  case FI_UINT16: *(uint16_t *)p = (uint16_t)v; break;
  case FI_INT32: *(int32_t *)p = (int32_t)v; break;
  case FI_UINT32: *(uint32_t *)p = (uint32_t)v; break;
  case FI_INT64: *(int64_t *)p = (int64_t)v; break;
  case FI_UINT64: *(uint64_t *)p = (uint64_t)v; break;
  case FI_FLOAT: *(float *)p = (float)v; break;
  default: *(double *)p = v; break;
  }
}

static double get(enum fi_datatype dt, const void *p) {
  switch (dt) {
  case FI_INT8: return *(const int8_t *)p;
  case FI_UINT8: return *(const uint8_t *)p;
  case FI_INT16: return *(const int16_t *)p;
  case FI_UINT16: return *(const uint16_t *)p;
  case FI_INT32: return *(const int32_t *)p;
  case FI_UINT32: return *(const uint32_t *)p;
  case FI_INT64: return (double)*(const int64_t *)p;
  case FI_UINT64: return (double)*(const uint64_t *)p;
  case FI_FLOAT: return *(const float *)p;
  default: return *(const double *)p;
  }
}

/* Two elements: (target, operand, compare) = (6, 3, 6) and (5, 9, 4); the
 * new target values per fi_op, worked out by hand. */
static const double init[2] = {6, 5}, operand[2] = {3, 9}, cmpv[2] = {6, 4};
static const double want[FI_MSWAP + 1][2] = {
    [FI_MIN] = {3, 5},     [FI_MAX] = {6, 9},      [FI_SUM] = {9, 14},
    [FI_PROD] = {18, 45},  [FI_LOR] = {1, 1},      [FI_LAND] = {1, 1},
    [FI_BOR] = {7, 13},    [FI_BAND] = {2, 1},     [FI_LXOR] = {0, 0},
    [FI_BXOR] = {5, 12},   [FI_ATOMIC_READ] = {6, 5}, [FI_ATOMIC_WRITE] = {3, 9},
    [FI_CSWAP] = {3, 5},   [FI_CSWAP_NE] = {6, 9}, [FI_CSWAP_LE] = {3, 9},
    [FI_CSWAP_LT] = {6, 9}, [FI_CSWAP_GE] = {3, 5}, [FI_CSWAP_GT] = {6, 5},
    [FI_MSWAP] = {2, 1},
};

static ssize_t done(int i, struct fi_cq_tagged_entry *e, struct fi_cq_err_entry *ee) {
  ssize_t r = fi_cq_sread(cq[i], e, 1, NULL, (int)T);
  if (r == -FI_EAVAIL) {
    memset(ee, 0, sizeof *ee);
    r = fi_cq_readerr(cq[i], ee, 0) == 1 ? -FI_EAVAIL : -FI_EOTHER;
  }
  return r;
}

static void setup(void) {
  struct fi_info *h = t_hints(FI_ATOMIC | FI_MSG);
  h->domain_attr->mr_mode = FI_MR_PROV_KEY;
  int ret = fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info);
  fi_freeinfo(h);
  REQUIRE(ret == 0 && info, "fi_getinfo FI_ATOMIC: %d", ret);
  CHECK((info->caps & (FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)) ==
            (FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE),
        "atomic caps %#llx", (unsigned long long)info->caps);
  CHECK(info->tx_attr->caps & FI_ATOMIC, "tx caps");
  struct fi_av_attr aa = {.type = FI_AV_TABLE};
  struct fi_cntr_attr ca = {.events = FI_CNTR_EVENTS_COMP, .wait_obj = FI_WAIT_UNSPEC};
  REQUIRE(fi_fabric(info->fabric_attr, &fab, NULL) == 0 &&
              fi_domain(fab, info, &dom, NULL) == 0 &&
              fi_av_open(dom, &aa, &av, NULL) == 0 &&
              fi_cntr_open(dom, &ca, &wr, NULL) == 0 && fi_cntr_open(dom, &ca, &rd, NULL) == 0,
          "open");
  for (int i = 0; i < 3; i++) {
    struct fi_cq_attr qa = {.format = FI_CQ_FORMAT_TAGGED};
    REQUIRE(fi_cq_open(dom, &qa, &cq[i], NULL) == 0 &&
                fi_endpoint(dom, info, &ep[i], NULL) == 0 &&
                fi_ep_bind(ep[i], &av->fid, 0) == 0 &&
                fi_ep_bind(ep[i], &cq[i]->fid, FI_TRANSMIT | FI_RECV) == 0,
            "endpoint %d", i);
  }
  REQUIRE(fi_ep_bind(ep[0], &wr->fid, FI_WRITE) == 0 && fi_ep_bind(ep[0], &rd->fid, FI_READ) == 0,
          "bind counters");
  for (int i = 0; i < 3; i++)
    REQUIRE(fi_enable(ep[i]) == 0, "enable %d", i);
  char name[16];
  size_t len = sizeof name;
  REQUIRE(fi_getname(&ep[1]->fid, name, &len) == 0 &&
              fi_av_insert(av, name, 1, &peer[0], 0, NULL) == 1,
          "target address");
  peer[2] = peer[0];
}

enum kind { PLAIN, FETCH, COMPARE };

/* Posts one atomic of `kind` from endpoint 0. */
static ssize_t post(enum kind k, const void *buf, size_t n, const void *cmp, void *res,
                    uint64_t addr, uint64_t key, enum fi_datatype dt, enum fi_op op,
                    void *ctx) {
  switch (k) {
  case PLAIN: return fi_atomic(ep[0], buf, n, NULL, peer[0], addr, key, dt, op, ctx);
  case FETCH:
    return fi_fetch_atomic(ep[0], buf, n, NULL, res, NULL, peer[0], addr, key, dt, op, ctx);
  default:
    return fi_compare_atomic(ep[0], buf, n, NULL, cmp, NULL, res, NULL, peer[0], addr, key,
                             dt, op, ctx);
  }
}

static bool guards_intact(const unsigned char *mem, size_t len) {
  for (size_t i = 0; i < GUARD; i++)
    if (mem[i] != 0xa5 || mem[GUARD + len + i] != 0xa5)
      return false;
  return true;
}

static void every_op_and_type(unsigned char *mem, uint64_t key) {
  unsigned char *tgt = mem + GUARD;
  int runs = 0;
  for (int dt = FI_INT8; dt <= FI_DOUBLE; dt++) {
    size_t sz = tsize[dt];
    for (int op = FI_MIN; op <= FI_MSWAP; op++) {
      for (enum kind k = PLAIN; k <= COMPARE; k++) {
        size_t max = 0;
        int v = k == PLAIN   ? fi_atomicvalid(ep[0], dt, op, &max)
                : k == FETCH ? fi_fetch_atomicvalid(ep[0], dt, op, &max)
                             : fi_compare_atomicvalid(ep[0], dt, op, &max);
        bool bits = op == FI_BOR || op == FI_BAND || op == FI_BXOR || op == FI_MSWAP;
        bool cmp_op = op >= FI_CSWAP;
        bool should = (k == COMPARE) == cmp_op && !(k == PLAIN && op == FI_ATOMIC_READ) &&
                      !(bits && dt >= FI_FLOAT);
        CHECK((v == 0) == should, "valid dt %d op %d kind %d: %d", dt, op, k, v);
        if (v) {
          char b[8] = {0}, r[8];
          CHECK(post(k, b, 1, b, r, 0, key, dt, op, NULL) == -FI_EOPNOTSUPP,
                "invalid dt %d op %d kind %d posted", dt, op, k);
          continue;
        }
        CHECK(max == 48 / sz, "count of dt %d: %zu", dt, max);
        struct fi_atomic_attr attr;
        uint64_t qf = k == FETCH ? FI_FETCH_ATOMIC : k == COMPARE ? FI_COMPARE_ATOMIC : 0;
        CHECK(fi_query_atomic(dom, dt, op, &attr, qf) == 0 && attr.size == sz &&
                  attr.count == max,
              "query dt %d op %d", dt, op);
        unsigned char buf[16], cmp[16], res[16];
        memset(mem, 0xa5, 2 * GUARD + 64);
        memset(res, 0xee, sizeof res);
        for (int i = 0; i < 2; i++) {
          put(dt, tgt + 8 + i * sz, init[i]);
          put(dt, buf + i * sz, operand[i]);
          put(dt, cmp + i * sz, cmpv[i]);
        }
        struct fi_context c;
        /* At offset 8 of the region: offsets are the region's, not addresses. */
        ssize_t ret = post(k, buf, 2, cmp, res, 8, key, dt, op, &c);
        CHECK(ret == 0, "post dt %d op %d kind %d: %zd", dt, op, k, ret);
        if (ret)
          continue;
        struct fi_cq_tagged_entry e;
        struct fi_cq_err_entry ee;
        ssize_t r = done(0, &e, &ee);
        uint64_t flags = FI_ATOMIC | (k == PLAIN ? FI_WRITE : FI_READ);
        CHECK(r == 1 && e.op_context == &c && e.flags == flags,
              "completion dt %d op %d kind %d: %zd flags %#llx", dt, op, k, r,
              (unsigned long long)e.flags);
        for (int i = 0; i < 2; i++) {
          /* The region starts at tgt; the operation at offset 8. */
          double got = get(dt, tgt + 8 + i * sz);
          CHECK(got == want[op][i], "dt %d op %d kind %d element %d: %g, want %g", dt, op, k,
                i, got, want[op][i]);
          if (k != PLAIN)
            CHECK(get(dt, res + i * sz) == init[i], "old value dt %d op %d: %g", dt, op,
                  get(dt, res + i * sz));
        }
        runs++;
      }
    }
  }
  CHECK(runs > 250, "%d operations run", runs);
}

struct adder {
  int ep;
  uint64_t key;
  uint64_t seen[PER_THREAD];
};

static void *add_ones(void *arg) {
  struct adder *a = arg;
  uint64_t one = 1;
  for (int i = 0; i < PER_THREAD; i++) {
    struct fi_context c;
    ssize_t ret;
    do
      ret = fi_fetch_atomic(ep[a->ep], &one, 1, NULL, &a->seen[i], NULL, peer[a->ep], 0,
                            a->key, FI_UINT64, FI_SUM, &c);
    while (ret == -FI_EAGAIN);
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry ee;
    if (ret || done(a->ep, &e, &ee) != 1 || e.op_context != &c)
      return a; /* checked by the caller: a missing value */
  }
  return NULL;
}

static int cmp_u64(const void *x, const void *y) {
  uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
  return a < b ? -1 : a > b;
}

int main(void) {
  setup();
  size_t len = 64;
  unsigned char *mem = xmalloc(len + 2 * GUARD);
  memset(mem, 0xa5, len + 2 * GUARD);
  int ret;
  struct fid_mr *mr = NULL;
  ret = fi_mr_reg(dom, mem + GUARD, len, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0, 0, &mr, NULL);
  REQUIRE(ret == 0 && mr, "fi_mr_reg: %d", ret);
  uint64_t key = fi_mr_key(mr);
  every_op_and_type(mem, key);
  CHECK(guards_intact(mem, len), "guards after every operation");

  /* Refusals: FI_EACCES, nothing written. */
  uint64_t *ro = xmalloc(64), *wo = xmalloc(64);
  memset(ro, 0x11, 64);
  memset(wo, 0x22, 64);
  struct fid_mr *rmr = NULL, *wmr = NULL;
  REQUIRE(fi_mr_reg(dom, ro, 64, FI_REMOTE_READ, 0, 0, 0, &rmr, NULL) == 0 &&
              fi_mr_reg(dom, wo, 64, FI_REMOTE_WRITE, 0, 0, 0, &wmr, NULL) == 0,
          "read-only and write-only registrations");
  memset(mem, 0x5a, len + 2 * GUARD);
  uint64_t v[2] = {1, 1}, res[2];
  struct {
    uint64_t addr, key;
    enum kind k;
    enum fi_op op;
    size_t n;
    const char *what;
  } bad[] = {
      {0, key ^ 1, PLAIN, FI_SUM, 1, "wrong key"},
      {64, key, PLAIN, FI_SUM, 1, "right after the end"},
      {56, key, PLAIN, FI_SUM, 2, "straddling the end"},
      {0, fi_mr_key(rmr), PLAIN, FI_SUM, 1, "a write into read-only memory"},
      {0, fi_mr_key(wmr), FETCH, FI_SUM, 1, "a fetch from write-only memory"},
      {0, fi_mr_key(wmr), FETCH, FI_ATOMIC_READ, 1, "a read of write-only memory"},
      {0, fi_mr_key(rmr), COMPARE, FI_CSWAP, 1, "a swap in read-only memory"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    struct fi_context c;
    ret = (int)post(bad[i].k, v, bad[i].n, v, res, bad[i].addr, bad[i].key, FI_UINT64,
                    bad[i].op, &c);
    CHECK(ret == 0, "%s: posted %d", bad[i].what, ret);
    struct fi_cq_tagged_entry e;
    struct fi_cq_err_entry ee;
    ssize_t r = done(0, &e, &ee);
    CHECK(r == -FI_EAVAIL && ee.err == FI_EACCES && ee.op_context == &c,
          "%s refused with FI_EACCES: %zd err %d", bad[i].what, r,
          r == -FI_EAVAIL ? ee.err : 0);
  }
  int untouched = 1;
  for (size_t i = 0; i < len + 2 * GUARD; i++)
    untouched &= mem[i] == 0x5a;
  for (int i = 0; i < 8; i++)
    untouched &= ro[i] == 0x1111111111111111ULL && wo[i] == 0x2222222222222222ULL;
  CHECK(untouched, "refused atomics wrote nothing");
  /* Refused at the call. */
  CHECK_RET(fi_atomic(ep[0], v, 0, NULL, peer[0], 0, key, FI_UINT64, FI_SUM, NULL), -FI_EINVAL);
  CHECK_RET(fi_atomic(ep[0], v, 7, NULL, peer[0], 0, key, FI_UINT64, FI_SUM, NULL), -FI_EINVAL);
  CHECK_RET(fi_atomic(ep[0], v, 1, NULL, peer[0], 0, 1ULL << 32, FI_UINT64, FI_SUM, NULL),
            -FI_EINVAL);
  CHECK_RET(fi_atomic(ep[0], v, 1, NULL, peer[0], 0, key, FI_UINT64, FI_ATOMIC_READ, NULL),
            -FI_EOPNOTSUPP);
  CHECK_RET(fi_atomic(ep[0], v, 1, NULL, peer[0], 0, key, (enum fi_datatype)42, FI_SUM, NULL),
            -FI_EOPNOTSUPP);
  CHECK_RET(fi_atomic(ep[0], v, 1, NULL, peer[0], 0, key, FI_FLOAT, FI_BOR, NULL),
            -FI_EOPNOTSUPP);
  struct fi_atomic_attr attr;
  CHECK_RET(fi_query_atomic(dom, FI_DOUBLE, FI_CSWAP, &attr, 0), -FI_EOPNOTSUPP);
  CHECK_RET(fi_query_atomic(dom, FI_DOUBLE, FI_CSWAP, &attr, FI_COMPARE_ATOMIC), 0);

  /* Counters, inject, msg: a fresh counter at offset 0 of the region. */
  memset(mem, 0, len + 2 * GUARD);
  uint64_t w0 = fi_cntr_read(wr), r0 = fi_cntr_read(rd);
  uint64_t seven = 7;
  CHECK_RET(fi_inject_atomic(ep[0], &seven, 1, peer[0], 0, key, FI_UINT64, FI_SUM), 0);
  seven = 0; /* the buffer is free at once */
  struct fi_ioc ioc = {.addr = v, .count = 1};
  struct fi_rma_ioc rioc = {.addr = 0, .count = 1, .key = key};
  struct fi_context mc;
  struct fi_msg_atomic m = {.msg_iov = &ioc, .iov_count = 1, .addr = peer[0], .rma_iov = &rioc,
                            .rma_iov_count = 1, .datatype = FI_UINT64, .op = FI_SUM,
                            .context = &mc};
  CHECK_RET(fi_atomicmsg(ep[0], &m, FI_COMPLETION), 0);
  struct fi_cq_tagged_entry e;
  struct fi_cq_err_entry ee;
  CHECK(done(0, &e, &ee) == 1 && e.op_context == &mc, "atomicmsg completion");
  struct fi_ioc rv = {.addr = res, .count = 1};
  CHECK_RET(fi_fetch_atomicv(ep[0], &ioc, NULL, 1, &rv, NULL, 1, peer[0], 0, key, FI_UINT64,
                             FI_ATOMIC_READ, &mc),
            0);
  CHECK(done(0, &e, &ee) == 1 && res[0] == 8, "inject then msg then read: %llu",
        (unsigned long long)res[0]);
  CHECK(fi_cntr_read(wr) - w0 == 2 && fi_cntr_read(rd) - r0 == 1,
        "counters: %llu writes %llu reads", (unsigned long long)(fi_cntr_read(wr) - w0),
        (unsigned long long)(fi_cntr_read(rd) - r0));

  /* Two initiators, one counter. */
  uint64_t *counter = (uint64_t *)(mem + GUARD);
  *counter = 0;
  struct adder a[2] = {{.ep = 0, .key = key}, {.ep = 2, .key = key}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++)
    REQUIRE(pthread_create(&th[i], NULL, add_ones, &a[i]) == 0, "thread");
  for (int i = 0; i < 2; i++) {
    void *failed = NULL;
    pthread_join(th[i], &failed);
    CHECK(failed == NULL, "initiator %d completed every add", i);
  }
  CHECK(*counter == 2 * PER_THREAD, "counter %llu, want %d", (unsigned long long)*counter,
        2 * PER_THREAD);
  uint64_t all[2 * PER_THREAD];
  memcpy(all, a[0].seen, sizeof a[0].seen);
  memcpy(all + PER_THREAD, a[1].seen, sizeof a[1].seen);
  qsort(all, 2 * PER_THREAD, sizeof *all, cmp_u64);
  int distinct = 1;
  for (int i = 0; i < 2 * PER_THREAD; i++)
    distinct &= all[i] == (uint64_t)i;
  CHECK(distinct, "each old value 0..%d seen once", 2 * PER_THREAD - 1);

  fi_close(&rmr->fid);
  fi_close(&wmr->fid);
  fi_close(&mr->fid);
  for (int i = 0; i < 3; i++) {
    fi_close(&ep[i]->fid);
    fi_close(&cq[i]->fid);
  }
  fi_close(&wr->fid);
  fi_close(&rd->fid);
  fi_close(&av->fid);
  fi_close(&dom->fid);
  fi_close(&fab->fid);
  fi_freeinfo(info);
  DONE();
}
