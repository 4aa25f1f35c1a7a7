/* ofi_api.c - the data path of the omx provider: three endpoints of one
 * process exchange tagged and untagged messages (sizes, unexpected messages,
 * tag/ignore matching, directed receives, CQ data, truncation, fi_cancel,
 * FI_PEEK/FI_CLAIM/FI_DISCARD, blocking reads, inject, iovecs, sources). */
#include "common.h"

#include <pthread.h>

#define T 5000.0 /* ms to wait for a completion */

static struct tctx t;

/* Send `len` bytes from ep s to ep r (tagged or not), receive posted before
 * (or after, when `unexp`), data checked with every completion field. */
static void one_transfer(int s, int r, size_t len, int tagged, int unexp,
                         uint32_t seed) {
  char *sb = xmalloc(len), *rb = xmalloc(len + 16);
  fill(sb, len, seed);
  memset(rb, 0, len + 16);
  struct fi_context sc, rc;
  uint64_t tag = 0x1234500 + seed;
  if (!unexp) {
    CHECK_RET(tagged ? fi_trecv(t.ep[r], rb, len, NULL, FI_ADDR_UNSPEC, tag, 0, &rc)
                     : fi_recv(t.ep[r], rb, len, NULL, FI_ADDR_UNSPEC, &rc),
              0);
  }
  CHECK_RET(tagged ? fi_tsend(t.ep[s], sb, len, NULL, t.addr[r], tag, &sc)
                   : fi_send(t.ep[s], sb, len, NULL, t.addr[r], &sc),
            0);
  struct fi_cq_tagged_entry e;
  if (unexp) {
    /* Let it arrive first, then post. */
    double end = now_ms() + 50;
    while (now_ms() < end)
      (void)fi_cq_read(t.cq[r], &e, 0);
    CHECK_RET(tagged ? fi_trecv(t.ep[r], rb, len, NULL, FI_ADDR_UNSPEC, tag, 0, &rc)
                     : fi_recv(t.ep[r], rb, len, NULL, FI_ADDR_UNSPEC, &rc),
              0);
  }
  fi_addr_t src = 0;
  ssize_t ret = t_wait(t.cq[r], &e, &src, T);
  CHECK(ret == 1, "size %zu: receive completion %zd", len, ret);
  if (ret == 1) {
    CHECK(e.op_context == &rc, "size %zu: receive context", len);
    CHECK(e.len == len, "size %zu: received len %zu", len, e.len);
    CHECK(e.flags == (FI_RECV | (tagged ? FI_TAGGED : FI_MSG)),
          "size %zu: flags %#llx", len, (unsigned long long)e.flags);
    if (tagged)
      CHECK(e.tag == tag, "size %zu: tag %#llx", len, (unsigned long long)e.tag);
    CHECK(e.buf == rb, "size %zu: buf", len);
    CHECK(src == t.addr[s], "size %zu: source %llu, want %llu", len,
          (unsigned long long)src, (unsigned long long)t.addr[s]);
    long bad = verify(rb, len, seed);
    CHECK(bad < 0, "size %zu: data differs at %ld", len, bad);
    CHECK(rb[len] == 0, "size %zu: wrote past the message", len);
  }
  ret = t_wait(t.cq[s], &e, NULL, T);
  CHECK(ret == 1, "size %zu: send completion %zd", len, ret);
  if (ret == 1) {
    CHECK(e.op_context == &sc, "size %zu: send context", len);
    CHECK(e.flags == (FI_SEND | (tagged ? FI_TAGGED : FI_MSG)),
          "size %zu: send flags %#llx", len, (unsigned long long)e.flags);
  }
  free(sb);
  free(rb);
}

static void test_sizes(void) {
  static const size_t sizes[] = {0, 1, 7, 8, 9, 64, 4095, 4096, 4097, 32767,
                                 32768, 32769, 65536, 1 << 20, 8 << 20};
  uint32_t seed = 1;
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    one_transfer(0, 1, sizes[i], 1, 0, seed++);
    one_transfer(1, 0, sizes[i], 0, 0, seed++);
    one_transfer(0, 1, sizes[i], 1, 1, seed++); /* unexpected */
    one_transfer(2, 1, sizes[i], 0, 1, seed++);
  }
}

/* Messages from one sender with the same tag are received in order;
 * untagged and tagged messages never match each other. */
static void test_order_and_kinds(void) {
  enum { N = 8 };
  uint32_t v[N], got[N];
  struct fi_context c[N];
  for (int i = 0; i < N; i++) {
    v[i] = 100 + i;
    CHECK_RET(fi_tinject(t.ep[0], &v[i], sizeof v[i], t.addr[1], 7), 0);
  }
  uint32_t m = 555, mg = 0, tg = 0;
  CHECK_RET(fi_inject(t.ep[0], &m, sizeof m, t.addr[1]), 0);
  struct fi_context cm, ct;
  /* A tagged receive for tag 0 must not take the untagged message. */
  CHECK_RET(fi_trecv(t.ep[1], &tg, sizeof tg, NULL, FI_ADDR_UNSPEC, 0, 0, &ct), 0);
  CHECK_RET(fi_recv(t.ep[1], &mg, sizeof mg, NULL, FI_ADDR_UNSPEC, &cm), 0);
  for (int i = 0; i < N; i++)
    CHECK_RET(fi_trecv(t.ep[1], &got[i], sizeof got[i], NULL, FI_ADDR_UNSPEC, 7,
                       0, &c[i]),
              0);
  int seen = 0;
  struct fi_cq_tagged_entry e;
  while (seen < N + 1 && t_wait(t.cq[1], &e, NULL, T) == 1) {
    seen++;
    CHECK(e.op_context != &ct, "tagged receive of tag 0 matched something");
  }
  CHECK(seen == N + 1, "completions %d", seen);
  CHECK(mg == 555, "untagged message %u", mg);
  for (int i = 0; i < N; i++)
    CHECK(got[i] == v[i], "order: receive %d got %u", i, got[i]);
  /* The pending tagged receive is still there: satisfy it. */
  uint32_t z = 99;
  CHECK_RET(fi_tinject(t.ep[0], &z, sizeof z, t.addr[1], 0), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.op_context == &ct && tg == 99,
        "tag 0 receive");
}

static void test_tag_ignore(void) {
  uint64_t tags[] = {0x10, 0x11, 0x20, 0x7fffffffffffULL};
  for (int i = 0; i < 4; i++)
    CHECK_RET(fi_tinject(t.ep[0], &tags[i], 8, t.addr[1], tags[i]), 0);
  uint64_t b = 0;
  struct fi_context c;
  struct fi_cq_tagged_entry e;
  /* Exact tag 0x20 first, though older messages wait. */
  CHECK_RET(fi_trecv(t.ep[1], &b, 8, NULL, FI_ADDR_UNSPEC, 0x20, 0, &c), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && b == 0x20 && e.tag == 0x20,
        "exact tag: got %#llx", (unsigned long long)b);
  /* 0x10 with bit 0 ignored: 0x10 then 0x11. */
  for (uint64_t want = 0x10; want <= 0x11; want++) {
    CHECK_RET(fi_trecv(t.ep[1], &b, 8, NULL, FI_ADDR_UNSPEC, 0x10, 1, &c), 0);
    CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && b == want && e.tag == want,
          "ignore bit 0: got %#llx want %#llx", (unsigned long long)b,
          (unsigned long long)want);
  }
  /* Everything ignored: the largest tag. */
  CHECK_RET(fi_trecv(t.ep[1], &b, 8, NULL, FI_ADDR_UNSPEC, 0, ~0ULL, &c), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.tag == 0x7fffffffffffULL,
        "wildcard tag: %#llx", (unsigned long long)e.tag);
  /* Reserved tag bits: refused. */
  CHECK_RET(fi_tsend(t.ep[0], &b, 8, NULL, t.addr[1], 1ULL << 63, &c), -FI_EINVAL);
  CHECK_RET(fi_tinject(t.ep[0], &b, 8, t.addr[1], 1ULL << 50), -FI_EINVAL);
  CHECK_RET(fi_trecv(t.ep[1], &b, 8, NULL, FI_ADDR_UNSPEC, 1ULL << 50, 0, &c),
            -FI_EINVAL);
}

/* FI_DIRECTED_RECV: a receive for ep 2 skips the older message of ep 0. */
static void test_directed(void) {
  uint32_t a = 1, b = 2, g1 = 0, g2 = 0;
  CHECK_RET(fi_tinject(t.ep[0], &a, 4, t.addr[1], 3), 0);
  CHECK_RET(fi_tinject(t.ep[2], &b, 4, t.addr[1], 3), 0);
  struct fi_context c1, c2;
  struct fi_cq_tagged_entry e;
  fi_addr_t src;
  usleep(20000);
  CHECK_RET(fi_trecv(t.ep[1], &g2, 4, NULL, t.addr[2], 3, 0, &c2), 0);
  CHECK(t_wait(t.cq[1], &e, &src, T) == 1 && g2 == 2 && src == t.addr[2],
        "directed receive got %u from %llu", g2, (unsigned long long)src);
  CHECK_RET(fi_trecv(t.ep[1], &g1, 4, NULL, FI_ADDR_UNSPEC, 3, 0, &c1), 0);
  CHECK(t_wait(t.cq[1], &e, &src, T) == 1 && g1 == 1 && src == t.addr[0],
        "any-source receive got %u from %llu", g1, (unsigned long long)src);
  /* Directed at an address that is not in the AV: refused. */
  CHECK_RET(fi_trecv(t.ep[1], &g1, 4, NULL, 77, 3, 0, &c1), -FI_EINVAL);
  /* Untagged directed receive. */
  CHECK_RET(fi_inject(t.ep[0], &a, 4, t.addr[1]), 0);
  CHECK_RET(fi_inject(t.ep[2], &b, 4, t.addr[1]), 0);
  usleep(20000);
  g1 = 0;
  CHECK_RET(fi_recv(t.ep[1], &g1, 4, NULL, t.addr[2], &c1), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && g1 == 2, "untagged directed %u", g1);
  CHECK_RET(fi_recv(t.ep[1], &g1, 4, NULL, t.addr[0], &c1), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && g1 == 1, "untagged directed %u", g1);
}

static void test_cq_data(void) {
  char buf[32] = "hello", rb[32];
  struct fi_context sc, rc;
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 9, 0, &rc), 0);
  CHECK_RET(fi_tsenddata(t.ep[0], buf, 6, NULL, 0xdeadbeef, t.addr[1], 9, &sc), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1, "tsenddata receive");
  CHECK(e.flags == (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA) && e.data == 0xdeadbeef &&
            e.len == 6 && !strcmp(rb, "hello"),
        "tsenddata: flags %#llx data %#llx len %zu", (unsigned long long)e.flags,
        (unsigned long long)e.data, e.len);
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &sc, "send completion");
  /* Untagged with data, and injected with data. */
  CHECK_RET(fi_recv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, &rc), 0);
  CHECK_RET(fi_senddata(t.ep[0], buf, 6, NULL, 42, t.addr[1], &sc), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && (e.flags & FI_REMOTE_CQ_DATA) &&
            e.data == 42 && (e.flags & FI_MSG),
        "senddata");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1, "senddata send completion");
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 9, 0, &rc), 0);
  CHECK_RET(fi_tinjectdata(t.ep[0], buf, 6, 7, t.addr[1], 9), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.data == 7, "tinjectdata");
  CHECK_RET(fi_recv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, &rc), 0);
  CHECK_RET(fi_injectdata(t.ep[0], "world", 6, 8, t.addr[1]), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.data == 8 && (e.flags & FI_MSG) &&
            (e.flags & FI_REMOTE_CQ_DATA) && e.len == 6 && !strcmp(rb, "world"),
        "injectdata: flags %#llx data %#llx", (unsigned long long)e.flags,
        (unsigned long long)e.data);
  /* A plain send has no CQ data. */
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 9, 0, &rc), 0);
  CHECK_RET(fi_tinject(t.ep[0], buf, 6, t.addr[1], 9), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && !(e.flags & FI_REMOTE_CQ_DATA),
        "no FI_REMOTE_CQ_DATA without data");
  /* fi_tsendmsg with FI_REMOTE_CQ_DATA. */
  struct iovec iov = {buf, 6};
  struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = 1, .addr = t.addr[1],
                            .tag = 9, .context = &sc, .data = 0x5555};
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 9, 0, &rc), 0);
  CHECK_RET(fi_tsendmsg(t.ep[0], &m, FI_REMOTE_CQ_DATA | FI_COMPLETION), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.data == 0x5555, "tsendmsg data");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1, "tsendmsg completion");
}

static void test_truncation(void) {
  static const size_t sizes[][2] = {{100, 40}, {1 << 20, 300000}, {10, 0}};
  for (int i = 0; i < 3; i++) {
    size_t sl = sizes[i][0], rl = sizes[i][1];
    char *sb = xmalloc(sl), *rb = xmalloc(rl + 1);
    fill(sb, sl, 77);
    struct fi_context sc, rc;
    CHECK_RET(fi_trecv(t.ep[1], rb, rl, NULL, FI_ADDR_UNSPEC, 11, 0, &rc), 0);
    CHECK_RET(fi_tsend(t.ep[0], sb, sl, NULL, t.addr[1], 11, &sc), 0);
    struct fi_cq_err_entry err;
    ssize_t r = t_wait_err(t.cq[1], &err, T);
    CHECK(r == 1, "truncation %zu->%zu: readerr %zd", sl, rl, r);
    if (r == 1) {
      CHECK(err.err == FI_ETRUNC, "err %d", err.err);
      CHECK(err.op_context == &rc, "context");
      CHECK(err.len == rl && err.olen == sl - rl, "len %zu olen %zu", err.len,
            err.olen);
      CHECK(err.tag == 11 && (err.flags & FI_RECV), "tag/flags");
      CHECK(verify(rb, rl, 77) < 0, "truncated data");
      /* the provider's error code reads as MX's status text */
      char text[128] = "";
      const char *str = fi_cq_strerror(t.cq[1], err.prov_errno, err.err_data, text, sizeof text);
      CHECK(str == text && strstr(text, "runcat") != NULL, "fi_cq_strerror(%d): '%s'",
            err.prov_errno, text);
      CHECK(fi_cq_strerror(t.cq[1], err.prov_errno, NULL, NULL, 0) != NULL,
            "fi_cq_strerror without a buffer");
    }
    struct fi_cq_tagged_entry e;
    CHECK(t_wait(t.cq[0], &e, NULL, T) == 1, "sender completes");
    free(sb);
    free(rb);
  }
}

static void test_cancel(void) {
  char b[8];
  struct fi_context c, other;
  CHECK_RET(fi_trecv(t.ep[1], b, 8, NULL, FI_ADDR_UNSPEC, 0x999, 0, &c), 0);
  CHECK_RET(fi_cancel(&t.ep[1]->fid, &other), -FI_ENOENT);
  CHECK_RET(fi_cancel(&t.ep[1]->fid, &c), 0);
  struct fi_cq_err_entry err;
  CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ECANCELED &&
            err.op_context == &c,
        "cancelled receive: err %d", err.err);
  CHECK_RET(fi_cancel(&t.ep[1]->fid, &c), -FI_ENOENT);
  /* Nothing is left: a message with that tag stays unexpected. */
  CHECK_RET(fi_tinject(t.ep[0], b, 8, t.addr[1], 0x999), 0);
  struct fi_cq_tagged_entry e;
  CHECK(t_wait(t.cq[1], &e, NULL, 100) == -FI_EAGAIN, "no completion");
  CHECK_RET(fi_trecv(t.ep[1], b, 8, NULL, FI_ADDR_UNSPEC, 0x999, 0, &c), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1, "received after cancel");
}

static ssize_t peek(int ep, uint64_t tag, uint64_t flags, void *buf, size_t len,
                    struct fi_context *c) {
  struct iovec iov = {buf, len};
  struct fi_msg_tagged m = {.msg_iov = &iov, .iov_count = buf ? 1 : 0,
                            .addr = FI_ADDR_UNSPEC, .tag = tag, .context = c};
  return fi_trecvmsg(t.ep[ep], &m, flags);
}

/* Peeks (with flags) until the message is there: 1 and its completion, or
 * -FI_EAGAIN after T. FI_ENOMSG answers in between are consumed. */
static ssize_t peek_until(int ep, uint64_t tag, uint64_t flags,
                          struct fi_context *c, struct fi_cq_tagged_entry *e) {
  for (double end = now_ms() + T; now_ms() < end;) {
    if (peek(ep, tag, flags | FI_PEEK, NULL, 0, c))
      return -FI_EINVAL;
    ssize_t r = t_wait(t.cq[ep], e, NULL, T);
    if (r == 1)
      return 1;
    struct fi_cq_err_entry err;
    if (r != -FI_EAVAIL || t_wait_err(t.cq[ep], &err, T) != 1 || err.err != FI_ENOMSG)
      return -FI_EIO;
    usleep(1000);
  }
  return -FI_EAGAIN;
}

static void test_peek(void) {
  struct fi_context c, c2;
  struct fi_cq_tagged_entry e;
  struct fi_cq_err_entry err;
  char rb[64];
  /* Nothing there: FI_ENOMSG. */
  CHECK_RET(peek(1, 0x77, FI_PEEK, NULL, 0, &c), 0);
  CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ENOMSG &&
            err.op_context == &c,
        "peek without message: err %d", err.err);
  /* Peek reports length, tag and CQ data; the message stays. */
  CHECK_RET(fi_tinjectdata(t.ep[0], "peekaboo", 9, 31, t.addr[1], 0x77), 0);
  ssize_t r = peek_until(1, 0x77, 0, &c, &e);
  CHECK(r == 1 && e.len == 9 && e.tag == 0x77 && e.data == 31 &&
            (e.flags & FI_REMOTE_CQ_DATA) && e.op_context == &c,
        "peek: r %zd len %zu tag %#llx data %llu", r, e.len,
        (unsigned long long)e.tag, (unsigned long long)e.data);
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 0x77, 0, &c2), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && !strcmp(rb, "peekaboo") &&
            e.data == 31 && e.op_context == &c2,
        "receive after peek");
  /* PEEK|CLAIM, then a CLAIM receive with the same context. */
  CHECK_RET(fi_tinject(t.ep[0], "first", 6, t.addr[1], 0x78), 0);
  CHECK_RET(fi_tinject(t.ep[0], "second", 7, t.addr[1], 0x78), 0);
  CHECK(peek_until(1, 0x78, FI_CLAIM, &c, &e) == 1 && e.len == 6, "peek claim");
  /* An ordinary receive now gets the second message, not the claimed one. */
  memset(rb, 0, sizeof rb);
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 0x78, 0, &c2), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && !strcmp(rb, "second"),
        "unclaimed message: %s", rb);
  memset(rb, 0, sizeof rb);
  CHECK_RET(peek(1, 0x78, FI_CLAIM, rb, sizeof rb, &c), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && !strcmp(rb, "first") &&
            e.op_context == &c && e.len == 6,
        "claimed message: %s", rb);
  /* A claim with no claimed message: refused. */
  CHECK_RET(peek(1, 0x78, FI_CLAIM, rb, sizeof rb, &c), -FI_EINVAL);
  /* PEEK|CLAIM then CLAIM|DISCARD. */
  CHECK_RET(fi_tinject(t.ep[0], "drop", 5, t.addr[1], 0x79), 0);
  CHECK(peek_until(1, 0x79, FI_CLAIM, &c, &e) == 1 && e.len == 5, "peek claim 2");
  CHECK_RET(peek(1, 0x79, FI_CLAIM | FI_DISCARD, NULL, 0, &c), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == 0, "claim discard");
  /* PEEK|DISCARD drops it at once. */
  CHECK_RET(fi_tinject(t.ep[0], "gone", 5, t.addr[1], 0x7a), 0);
  CHECK(peek_until(1, 0x7a, FI_DISCARD, &c, &e) == 1 && e.len == 5, "peek discard");
  CHECK_RET(peek(1, 0x7a, FI_PEEK, NULL, 0, &c), 0);
  CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ENOMSG, "discarded");
  /* fi_tagged(3), FI_DISCARD: "If this flag is set, the input buffer(s) and
   * length parameters are ignored": any iov given with it is not looked at. */
  struct fi_msg_tagged dm = {.msg_iov = NULL, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                             .tag = 0x7b, .context = &c};
  CHECK_RET(fi_tinject(t.ep[0], "ign", 4, t.addr[1], 0x7b), 0);
  CHECK(peek_until(1, 0x7b, FI_CLAIM, &c, &e) == 1 && e.len == 4, "peek claim 3");
  CHECK_RET(fi_trecvmsg(t.ep[1], &dm, FI_CLAIM | FI_DISCARD), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.op_context == &c,
        "claim discard without buffers");
  struct iovec junk[2] = {{NULL, 100}, {NULL, 100}};
  dm.msg_iov = junk;
  dm.iov_count = 2;
  dm.tag = 0x7c;
  CHECK_RET(fi_tinject(t.ep[0], "ign2", 5, t.addr[1], 0x7c), 0);
  CHECK(peek_until(1, 0x7c, 0, &c, &e) == 1 && e.len == 5, "peek 0x7c");
  CHECK_RET(fi_trecvmsg(t.ep[1], &dm, FI_PEEK | FI_DISCARD), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == 5 && e.op_context == &c,
        "peek discard with ignored buffers");
  CHECK_RET(peek(1, 0x7c, FI_PEEK, NULL, 0, &c), 0);
  CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ENOMSG, "discarded 0x7c");
  /* Order survives a peek: A (tag 1), B (tag 2); peek B; a wildcard
   * receive gets A first, then B. Large B (rendezvous) too. */
  size_t bl = 1 << 20;
  char *big = xmalloc(bl), *bigr = xmalloc(bl);
  fill(big, bl, 5);
  struct fi_context sc;
  CHECK_RET(fi_tinject(t.ep[0], "A", 2, t.addr[1], 1), 0);
  CHECK_RET(fi_tsend(t.ep[0], big, bl, NULL, t.addr[1], 2, &sc), 0);
  usleep(50000);
  r = peek_until(1, 2, 0, &c, &e);
  CHECK(r == 1 && e.len == bl && e.tag == 2, "peek big: len %zu", e.len);
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 0, ~0ULL, &c2), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.tag == 1 && !strcmp(rb, "A"),
        "oldest first after peek: tag %llu", (unsigned long long)e.tag);
  CHECK_RET(fi_trecv(t.ep[1], bigr, bl, NULL, FI_ADDR_UNSPEC, 0, ~0ULL, &c2), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.tag == 2 && e.len == bl &&
            verify(bigr, bl, 5) < 0,
        "big message after peek");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &sc, "big send done");
  free(big);
  free(bigr);
}

struct sread_arg {
  struct fid_cq *cq;
  ssize_t ret;
  volatile int returned;
};

static void *sread_forever(void *p) {
  struct sread_arg *a = p;
  struct fi_cq_tagged_entry e;
  a->ret = fi_cq_sread(a->cq, &e, 1, NULL, -1);
  a->returned = 1;
  return NULL;
}

/* fi_cq_signal ends a wait without a timeout on an empty CQ (-FI_EAGAIN). A
 * signal is not lost if it comes before the thread waits, but nothing tells
 * when the thread is waiting, so it is repeated until the thread returns. */
static void test_cq_signal(void) {
  struct sread_arg a = {.cq = t.cq[1]};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, sread_forever, &a) == 0, "thread");
  double end = now_ms() + 10000 * time_factor();
  while (!a.returned && now_ms() < end) {
    CHECK_RET(fi_cq_signal(t.cq[1]), 0);
    struct timespec ts = {0, 5000000L};
    nanosleep(&ts, NULL);
  }
  REQUIRE(a.returned, "fi_cq_signal did not end fi_cq_sread(-1)");
  pthread_join(th, NULL);
  CHECK(a.ret == -FI_EAGAIN, "signalled sread: %zd", a.ret);
}

static void test_sread(void) {
  struct fi_cq_tagged_entry e;
  double t0 = now_ms();
  ssize_t r = fi_cq_sread(t.cq[1], &e, 1, NULL, 300);
  double dt = now_ms() - t0;
  CHECK(r == -FI_EAGAIN, "sread on empty CQ: %zd", r);
  CHECK(dt >= 280 && dt < 2000, "sread timeout took %.0f ms", dt);
  /* CPU time while blocked stays small: the wait sleeps in MX. */
  struct timespec c0, c1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
  r = fi_cq_sread(t.cq[1], &e, 1, NULL, 300);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
  double cpu = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6;
  CHECK(cpu < 150, "blocked sread used %.0f ms of CPU", cpu);
  /* A message wakes it. */
  uint32_t v = 5, g = 0;
  struct fi_context c;
  CHECK_RET(fi_trecv(t.ep[1], &g, 4, NULL, FI_ADDR_UNSPEC, 4, 0, &c), 0);
  CHECK_RET(fi_tinject(t.ep[0], &v, 4, t.addr[1], 4), 0);
  fi_addr_t src = 0;
  r = fi_cq_sreadfrom(t.cq[1], &e, 1, &src, NULL, 5000);
  CHECK(r == 1 && g == 5 && src == t.addr[0], "sreadfrom: %zd", r);
  /* An error completion: sread reports -FI_EAVAIL. */
  CHECK_RET(fi_trecv(t.ep[1], &g, 4, NULL, FI_ADDR_UNSPEC, 4, 0, &c), 0);
  CHECK_RET(fi_cancel(&t.ep[1]->fid, &c), 0);
  CHECK_RET(fi_cq_sread(t.cq[1], &e, 1, NULL, 1000), -FI_EAVAIL);
  struct fi_cq_err_entry err;
  CHECK_RET(fi_cq_readerr(t.cq[1], &err, 0), 1);
  CHECK_RET(fi_cq_readerr(t.cq[1], &err, 0), -FI_EAGAIN);
}

static void test_inject_and_iov(void) {
  /* Inject: the buffer is free at return, no send completion. */
  char b[4096], rb[4096];
  fill(b, sizeof b, 9);
  struct fi_context c;
  CHECK_RET(fi_tinject(t.ep[0], b, sizeof b, t.addr[1], 5), 0);
  memset(b, 0, sizeof b);
  CHECK_RET(fi_trecv(t.ep[1], rb, sizeof rb, NULL, FI_ADDR_UNSPEC, 5, 0, &c), 0);
  struct fi_cq_tagged_entry e;
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == sizeof rb &&
            verify(rb, sizeof rb, 9) < 0,
        "inject data");
  CHECK(t_wait(t.cq[0], &e, NULL, 50) == -FI_EAGAIN, "inject made a completion");
  char big[4097];
  CHECK_RET(fi_tinject(t.ep[0], big, sizeof big, t.addr[1], 5), -FI_EMSGSIZE);
  /* Small injects (copied by MX at post, no op kept): a burst arrives whole
   * and in order though each buffer is reused at once, with no send
   * completion and nothing left pending on the sender. */
  enum { NB = 3000 };
  uint32_t word[16];
  for (uint32_t i = 0; i < NB; i++) {
    for (int k = 0; k < 16; k++)
      word[k] = i * 16 + (uint32_t)k;
    CHECK_RET(fi_tinjectdata(t.ep[0], word, sizeof word, i, t.addr[1], 0x55), 0);
    memset(word, 0xee, sizeof word);
  }
  for (uint32_t i = 0; i < NB; i++) {
    uint32_t got[16];
    CHECK_RET(fi_trecv(t.ep[1], got, sizeof got, NULL, FI_ADDR_UNSPEC, 0x55, 0, &c), 0);
    CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == sizeof got &&
              (e.flags & FI_REMOTE_CQ_DATA) && e.data == i,
          "inject burst: completion %u (data %llu)", i, (unsigned long long)e.data);
    for (int k = 0; k < 16; k++)
      CHECK(got[k] == i * 16 + (uint32_t)k, "inject burst: message %u word %d", i, k);
  }
  CHECK(t_wait(t.cq[0], &e, NULL, 50) == -FI_EAGAIN, "inject burst made a completion");
  /* An inject to the endpoint itself, its receive posted first (MX copies
   * straight into it): the data is taken before the call returns. */
  uint32_t self_got[16] = {0};
  for (int k = 0; k < 16; k++)
    word[k] = 0xabc0 + (uint32_t)k;
  CHECK_RET(fi_trecv(t.ep[0], self_got, sizeof self_got, NULL, FI_ADDR_UNSPEC, 0x56, 0, &c), 0);
  CHECK_RET(fi_tinject(t.ep[0], word, sizeof word, t.addr[0], 0x56), 0);
  memset(word, 0, sizeof word);
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &c && e.len == sizeof self_got,
        "inject to self");
  for (int k = 0; k < 16; k++)
    CHECK(self_got[k] == 0xabc0 + (uint32_t)k, "inject to self: word %d", k);
  CHECK(t_wait(t.cq[0], &e, NULL, 50) == -FI_EAGAIN, "inject to self made a completion");
  /* sendv/recvv with unequal pieces. */
  enum { L = 100000 };
  char *s = xmalloc(L), *r = xmalloc(L);
  fill(s, L, 3);
  memset(r, 0, L);
  struct iovec siov[3] = {{s, 10}, {s + 10, 50000}, {s + 50010, L - 50010}};
  struct iovec riov[4] = {{r, 1}, {r + 1, 999}, {r + 1000, 60000}, {r + 61000, L - 61000}};
  struct fi_context sc, rc;
  CHECK_RET(fi_trecvv(t.ep[1], riov, NULL, 4, FI_ADDR_UNSPEC, 6, 0, &rc), 0);
  CHECK_RET(fi_tsendv(t.ep[0], siov, NULL, 3, t.addr[1], 6, &sc), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == L && verify(r, L, 3) < 0,
        "tsendv/trecvv");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1, "tsendv completion");
  memset(r, 0, L);
  CHECK_RET(fi_recvv(t.ep[1], riov, NULL, 4, FI_ADDR_UNSPEC, &rc), 0);
  CHECK_RET(fi_sendv(t.ep[0], siov, NULL, 3, t.addr[1], &sc), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == L && verify(r, L, 3) < 0,
        "sendv/recvv");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1, "sendv completion");
  /* fi_sendmsg/fi_recvmsg with iovecs; 255 pieces is the limit. */
  struct iovec many[256];
  for (int i = 0; i < 256; i++)
    many[i] = (struct iovec){r + i * 300, 300};
  struct fi_msg rm = {.msg_iov = many, .iov_count = 255, .addr = FI_ADDR_UNSPEC,
                      .context = &rc};
  struct fi_msg sm = {.msg_iov = siov, .iov_count = 3, .addr = t.addr[1],
                      .context = &sc};
  memset(r, 0, L);
  CHECK_RET(fi_recvmsg(t.ep[1], &rm, FI_COMPLETION), 0);
  CHECK_RET(fi_sendmsg(t.ep[0], &sm, FI_COMPLETION), 0);
  struct fi_cq_err_entry err;
  CHECK(t_wait_err(t.cq[1], &err, T) == 1 && err.err == FI_ETRUNC &&
            err.len == 255 * 300 && err.olen == L - 255 * 300 &&
            verify(r, 255 * 300, 3) < 0,
        "recvmsg over 255 pieces (truncated): err %d len %zu", err.err, err.len);
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1, "sendmsg completion");
  rm.iov_count = 256;
  CHECK_RET(fi_recvmsg(t.ep[1], &rm, 0), -FI_EINVAL);
  sm.msg_iov = many;
  sm.iov_count = 256;
  CHECK_RET(fi_sendmsg(t.ep[0], &sm, 0), -FI_EINVAL);
  /* FI_INJECT on fi_sendmsg. */
  sm.msg_iov = siov;
  sm.iov_count = 1;
  CHECK_RET(fi_recv(t.ep[1], r, L, NULL, FI_ADDR_UNSPEC, &rc), 0);
  /* FI_INJECT as a flag: the buffer is free at return, the send still completes
   * (only the fi_inject calls complete silently). */
  CHECK_RET(fi_sendmsg(t.ep[0], &sm, FI_INJECT), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1 && e.len == 10, "sendmsg inject");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &sc, "sendmsg inject completes");
  /* FI_DELIVERY_COMPLETE: completes once received. */
  CHECK_RET(fi_sendmsg(t.ep[0], &sm, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
  CHECK(t_wait(t.cq[0], &e, NULL, 100) == -FI_EAGAIN,
        "delivery-complete send done before any receive");
  CHECK_RET(fi_recv(t.ep[1], r, L, NULL, FI_ADDR_UNSPEC, &rc), 0);
  CHECK(t_wait(t.cq[1], &e, NULL, T) == 1, "delivery receive");
  CHECK(t_wait(t.cq[0], &e, NULL, T) == 1 && e.op_context == &sc, "delivery send");
  free(s);
  free(r);
}

static void test_cq_formats(void) {
  struct fi_cq_attr ca = {.format = FI_CQ_FORMAT_CONTEXT};
  struct fid_cq *cq;
  CHECK_RET(fi_cq_open(t.dom, &ca, &cq, NULL), 0);
  fi_close(&cq->fid);
  ca.format = FI_CQ_FORMAT_MSG;
  CHECK_RET(fi_cq_open(t.dom, &ca, &cq, NULL), 0);
  fi_close(&cq->fid);
  ca.format = FI_CQ_FORMAT_DATA;
  CHECK_RET(fi_cq_open(t.dom, &ca, &cq, NULL), 0);
  fi_close(&cq->fid);
  ca.format = (enum fi_cq_format)99;
  CHECK_RET(fi_cq_open(t.dom, &ca, &cq, NULL), -FI_ENOSYS);
  ca.format = FI_CQ_FORMAT_TAGGED;
  ca.wait_obj = FI_WAIT_MUTEX_COND;
  CHECK_RET(fi_cq_open(t.dom, &ca, &cq, NULL), -FI_ENOSYS);
}

int main(void) {
  t_setup(&t, 3, FI_TAGGED | FI_MSG | FI_DIRECTED_RECV | FI_SOURCE |
                     FI_REMOTE_CQ_DATA,
          FI_AV_TABLE, FI_CQ_FORMAT_TAGGED, 0);
  test_sizes();
  test_order_and_kinds();
  test_tag_ignore();
  test_directed();
  test_cq_data();
  test_cq_signal();
  test_truncation();
  test_cancel();
  test_peek();
  test_sread();
  test_inject_and_iov();
  test_cq_formats();
  t_teardown(&t);
  DONE();
}
