/* ofi_multi.c - FI_MULTI_RECV and FI_DELIVERY_COMPLETE, one process, two
 * endpoints: messages land one after another in a multi-receive buffer
 * (expected and unexpected, eager and rendezvous, with CQ data), each with
 * its own completion pointing into the buffer, the last one before the room
 * falls under FI_OPT_MIN_MULTI_RECV flagged FI_MULTI_RECV (released); a
 * second buffer takes over; truncation, cancel, bad uses; a delivery-complete
 * send (op flag set with FI_SETOPSFLAG) completes only once received.
 */
#include "common.h"

#include <stdbool.h>

#define T 20000.0

static struct tctx t;

static void send_sized(size_t len, uint32_t seed) {
  char *b = xmalloc(len);
  fill(b, len, seed);
  struct fi_context c;
  CHECK_RET(fi_senddata(t.ep[0], b, len, NULL, seed, t.addr[1], &c), 0);
  struct fi_cq_tagged_entry e;
  CHECK(fi_cq_sread(t.cq[0], &e, 1, NULL, (int)T) == 1 && e.op_context == &c,
        "send %zu completion", len);
  free(b);
}

/* The next receive completion: a message of len bytes at buf + off with the
 * pattern of seed, FI_MULTI_RECV set or not as `released`. */
static void expect_msg(char *buf, size_t off, size_t len, uint32_t seed, bool released,
                       void *ctx) {
  struct fi_cq_tagged_entry e;
  ssize_t r = fi_cq_sread(t.cq[1], &e, 1, NULL, (int)T);
  CHECK(r == 1, "multi-recv completion for %zu: %zd", len, r);
  if (r != 1)
    return;
  CHECK(e.op_context == ctx && e.buf == buf + off && e.len == len &&
            (e.flags & FI_RECV) && (e.flags & FI_MSG) &&
            (e.flags & FI_REMOTE_CQ_DATA) && e.data == seed,
        "message %u: buf +%td (want +%zu) len %zu (want %zu) flags %#llx", seed,
        (char *)e.buf - buf, off, e.len, len, (unsigned long long)e.flags);
  CHECK(!!(e.flags & FI_MULTI_RECV) == released, "message %u: FI_MULTI_RECV %d", seed,
        !!(e.flags & FI_MULTI_RECV));
  CHECK(verify(buf + off, len, seed) < 0, "message %u data", seed);
}

static void test_options(void) {
  size_t v = 0, vl = sizeof v;
  CHECK_RET(fi_getopt(&t.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl), 0);
  CHECK(v == 64 && vl == sizeof v, "default min_multi_recv %zu", v);
  v = 100;
  CHECK_RET(fi_setopt(&t.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, sizeof v), 0);
  v = 0;
  CHECK_RET(fi_getopt(&t.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl), 0);
  CHECK(v == 100, "min_multi_recv set to %zu", v);
  CHECK_RET(fi_setopt(&t.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, 2),
            -FI_EINVAL);
  vl = 2;
  CHECK_RET(fi_getopt(&t.ep[1]->fid, FI_OPT_ENDPOINT, FI_OPT_MIN_MULTI_RECV, &v, &vl),
            -FI_EINVAL);
}

static void test_multi(void) {
  enum { LEN = 1024 };
  char *buf = xmalloc(LEN), *buf2 = xmalloc(LEN);
  struct iovec iov = {buf, LEN};
  struct fi_context c1, c2;
  struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                     .context = &c1};
  /* One message waits unexpected before the buffer is posted. */
  send_sized(100, 1);
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), 0);
  expect_msg(buf, 0, 100, 1, false, &c1);
  send_sized(200, 2);
  expect_msg(buf, 100, 200, 2, false, &c1);
  send_sized(0, 3); /* an empty message takes no room */
  expect_msg(buf, 300, 0, 3, false, &c1);
  send_sized(550, 4); /* 850 used, 174 left: still >= 100 */
  expect_msg(buf, 300, 550, 4, false, &c1);
  send_sized(80, 5); /* 94 left: released with this message */
  expect_msg(buf, 850, 80, 5, true, &c1);
  /* The next buffer takes the next messages. */
  iov.iov_base = buf2;
  m.context = &c2;
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), 0);
  send_sized(10, 6);
  expect_msg(buf2, 0, 10, 6, false, &c2);
  /* A message larger than the room: truncated to it, and the buffer is full. */
  send_sized(2000, 7);
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_cq_sread(t.cq[1], &e, 1, NULL, (int)T), -FI_EAVAIL);
  struct fi_cq_err_entry ee = {0};
  CHECK(fi_cq_readerr(t.cq[1], &ee, 0) == 1 && ee.err == FI_ETRUNC &&
            ee.op_context == &c2 && ee.len == LEN - 10 && ee.olen == 2000 - (LEN - 10) &&
            ee.buf == buf2 + 10 && (ee.flags & FI_MULTI_RECV),
        "truncated into the room: len %zu olen %zu flags %#llx", ee.len, ee.olen,
        (unsigned long long)ee.flags);
  CHECK(verify(buf2 + 10, LEN - 10, 7) < 0, "truncated data");
  /* Cancel releases a buffer. */
  iov.iov_base = buf;
  m.context = &c1;
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), 0);
  CHECK_RET(fi_cancel(&t.ep[1]->fid, &c1), 0);
  CHECK(t_wait_err(t.cq[1], &ee, T) == 1 && ee.err == FI_ECANCELED &&
            ee.op_context == &c1 && (ee.flags & FI_MULTI_RECV),
        "cancelled multi-recv buffer");
  /* A buffer below the minimum is released at once. */
  iov.iov_len = 50;
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), 0);
  CHECK(fi_cq_sread(t.cq[1], &e, 1, NULL, (int)T) == 1 && e.op_context == &c1 &&
            e.len == 0 && (e.flags & FI_MULTI_RECV),
        "small buffer released");
  /* Not for tagged receives, one buffer only. */
  iov.iov_len = LEN;
  struct fi_msg_tagged tm = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                             .context = &c1};
  CHECK_RET(fi_trecvmsg(t.ep[1], &tm, FI_MULTI_RECV), -FI_EOPNOTSUPP);
  struct iovec two[2] = {{buf, 10}, {buf2, 10}};
  m.msg_iov = two;
  m.iov_count = 2;
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), -FI_EINVAL);
  free(buf);
  free(buf2);
}

/* Rendezvous-sized messages into a large multi-receive buffer. */
static void test_multi_large(void) {
  size_t len = 4 << 20, one = 1 << 20;
  char *buf = xmalloc(len);
  struct iovec iov = {buf, len};
  struct fi_context c;
  struct fi_msg m = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
                     .context = &c};
  CHECK_RET(fi_recvmsg(t.ep[1], &m, FI_MULTI_RECV), 0);
  for (uint32_t i = 0; i < 4; i++) {
    send_sized(one, 10 + i);
    expect_msg(buf, i * one, one, 10 + i, i == 3, &c);
  }
  free(buf);
}

/* FI_DELIVERY_COMPLETE as the endpoint's default: a send completes once the
 * receiver has it, not before a receive is posted. */
static void test_delivery_default(void) {
  uint64_t f = FI_TRANSMIT | FI_DELIVERY_COMPLETE;
  CHECK_RET(fi_control(&t.ep[0]->fid, FI_SETOPSFLAG, &f), 0);
  uint64_t v = 0xdc, g = 0;
  struct fi_context sc, rc;
  struct fi_cq_tagged_entry e;
  CHECK_RET(fi_tsend(t.ep[0], &v, 8, NULL, t.addr[1], 77, &sc), 0);
  CHECK_RET(fi_cq_sread(t.cq[0], &e, 1, NULL, 200), -FI_EAGAIN);
  CHECK_RET(fi_trecv(t.ep[1], &g, 8, NULL, FI_ADDR_UNSPEC, 77, 0, &rc), 0);
  CHECK(fi_cq_sread(t.cq[1], &e, 1, NULL, (int)T) == 1 && g == 0xdc, "received");
  CHECK(fi_cq_sread(t.cq[0], &e, 1, NULL, (int)T) == 1 && e.op_context == &sc,
        "delivery-complete send completed after the receive");
  f = FI_TRANSMIT;
  CHECK_RET(fi_control(&t.ep[0]->fid, FI_SETOPSFLAG, &f), 0);
}

int main(void) {
  struct fi_info *h = t_hints(FI_MSG | FI_TAGGED | FI_MULTI_RECV), *info = NULL;
  h->rx_attr->op_flags = FI_MULTI_RECV;
  CHECK_RET(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, h, &info), 0);
  CHECK(info && (info->caps & FI_MULTI_RECV) && (info->rx_attr->caps & FI_MULTI_RECV),
        "FI_MULTI_RECV offered");
  fi_freeinfo(info);
  fi_freeinfo(h);
  t_setup(&t, 2, FI_MSG | FI_TAGGED | FI_MULTI_RECV | FI_REMOTE_CQ_DATA, FI_AV_TABLE,
          FI_CQ_FORMAT_TAGGED, 0);
  test_options();
  test_multi();
  test_multi_large();
  test_delivery_default();
  t_teardown(&t);
  DONE();
}
