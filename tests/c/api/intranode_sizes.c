/* intranode_sizes.c - two processes of one host (endpoints 1 and 2 of board 0)
 * exchange messages of every size class, both directions, each size once with
 * the receive posted first (the receiver posts, then sends a 0-byte "ready")
 * and once arriving unexpected (the receiver sees it with mx_probe before it
 * posts): every size 0..16, every power of two from 32 B to the maximum, the
 * neighbours (+-1) of every power of two from 1 KiB to 128 KiB (the 4 KiB
 * shared-memory and 32 KiB network rendezvous thresholds among them) and a
 * few odd sizes, at varying (unaligned) buffer offsets. Every byte is checked
 * against a pattern, as are guard bytes after each receive buffer and the
 * status (code, lengths, match, source). Then vectored messages (several
 * mx_segment_t of uneven lengths, zero-length ones included, laid out
 * differently on both sides, with guard gaps) and truncated receives.
 *
 * With the intra-node runtime these messages go through shared memory (eager
 * rings up to OMX_SHARED_RNDV_THRESHOLD, the one-copy rendezvous above);
 * OMX_DISABLE_SHARED=1 forces the network path, OMX_SHARED_CMA=0 the two-copy
 * fallback. Environment: INTRANODE_MAX_SIZE (bytes, default 64 MiB) caps the
 * sizes (the vectored message is min(max, 8 MiB) + 5 bytes);
 * INTRANODE_TIMEOUT_S (60) bounds the whole test. */
#include "intranode.h"

#define GUARD 64
#define GUARD_BYTE 0xee
#define READY_BIT (1ull << 55)
#define TAG 0x5100000000000000ull

static const uint32_t eids[2] = {1, 2};
static uint32_t max_size;
static uint32_t sizes[128];
static int nsizes;

static void add_size(uint32_t s) {
  if (s > max_size)
    return;
  for (int i = 0; i < nsizes; i++)
    if (sizes[i] == s)
      return;
  sizes[nsizes++] = s;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static void make_sizes(void) {
  for (uint32_t s = 0; s <= 16; s++)
    add_size(s);
  for (uint32_t s = 32; s && s <= max_size; s *= 2)
    add_size(s);
  for (uint32_t s = 1024; s <= 131072; s *= 2) {
    add_size(s - 1);
    add_size(s + 1);
  }
  static const uint32_t odd[] = {100, 1000, 4000, 8960, 9000, 100000, 1000003, (3u << 20) + 7};
  for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
    add_size(odd[i]);
  add_size(max_size);
  qsort(sizes, (size_t)nsizes, sizeof sizes[0], cmp_u32);
}

static mx_endpoint_t ep;
static mx_endpoint_addr_t peer;
static uint64_t nic;
static int me;
static unsigned char *sbuf, *rbuf;

static int guard_ok(const unsigned char *p) {
  for (int i = 0; i < GUARD; i++)
    if (p[i] != GUARD_BYTE)
      return 0;
  return 1;
}

/* 0-byte message from the receiver: "my receive for m is posted". */
static void ready_send(uint64_t m) {
  mx_segment_t seg = {NULL, 0};
  mx_status_t st;
  mx_request_t r = in_isend(ep, peer, &seg, 1, m | READY_BIT, NULL, 0);
  CHECK(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
        "[%s] ready %#" PRIx64 " not sent", in_me, m);
}

static void ready_wait(uint64_t m) {
  mx_segment_t seg = {NULL, 0};
  mx_status_t st;
  mx_request_t r = in_irecv(ep, &seg, 1, m | READY_BIT, MX_MATCH_MASK_NONE, NULL);
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
            "[%s] no ready %#" PRIx64 " from the peer", in_me, m);
}

/* Waits for m to be there, unexpected (mx_probe), and checks its length. */
static void probe(uint64_t m, uint32_t len) {
  mx_status_t st;
  uint32_t result = 0;
  memset(&st, 0, sizeof st);
  CHECK_OK(mx_probe(ep, IN_WAIT_MS, m, MX_MATCH_MASK_NONE, &st, &result));
  C_REQUIRE(result == 1, "[%s] message %#" PRIx64 " (%u bytes) never arrived", in_me, m, len);
  CHECK(st.msg_length == len && st.match_info == m,
        "[%s] probe of %#" PRIx64 ": %u bytes, match %#" PRIx64 ", expected %u", in_me, m,
        st.msg_length, st.match_info, len);
}

/* One message of len bytes from sender to the other; mode 0: receive posted
 * first, 1: unexpected. Both processes call it. */
static void one(uint32_t len, int sender, int mode, uint64_t m, uint32_t seed, uint32_t soff,
                uint32_t roff) {
  mx_status_t st;
  mx_segment_t seg;
  TRACE("%u bytes from %s, %s", len, sender ? "B" : "A", mode ? "unexpected" : "posted");
  if (me == sender) {
    fill(sbuf + soff, len, seed);
    if (mode == 0)
      ready_wait(m);
    seg.segment_ptr = sbuf + soff;
    seg.segment_length = len;
    mx_request_t r = in_isend(ep, peer, &seg, 1, m, CTX(m), 0);
    C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] send of %u bytes (%#" PRIx64
              ", %s) never completed", in_me, len, m, mode ? "unexpected" : "posted");
    CHECK(st.code == MX_STATUS_SUCCESS && st.match_info == m && st.context == CTX(m),
          "[%s] send of %u bytes: status %s, match %#" PRIx64, in_me, len,
          mx_strstatus(st.code), st.match_info);
    return;
  }
  memset(rbuf, GUARD_BYTE, (size_t)roff + len + GUARD);
  seg.segment_ptr = rbuf + roff;
  seg.segment_length = len;
  mx_request_t r = NULL;
  if (mode == 0) {
    r = in_irecv(ep, &seg, 1, m, MX_MATCH_MASK_NONE, CTX(m + 1));
    ready_send(m);
  } else {
    probe(m, len);
    r = in_irecv(ep, &seg, 1, m, MX_MATCH_MASK_NONE, CTX(m + 1));
  }
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] %u bytes (%#" PRIx64
            ", %s) not received within %d ms", in_me, len, m, mode ? "unexpected" : "posted",
            IN_WAIT_MS);
  CHECK_STATUS(st, MX_STATUS_SUCCESS, m, len, len, CTX(m + 1));
  CHECK_SOURCE(st, nic, eids[sender]);
  long bad = verify(rbuf + roff, len, seed);
  CHECK(bad < 0, "[%s] %u bytes (%s, from %s): data differ at byte %ld", in_me, len,
        mode ? "unexpected" : "posted", sender ? "B" : "A", bad);
  CHECK(guard_ok(rbuf + roff + len), "[%s] %u bytes: written past the receive buffer", in_me, len);
  unsigned char *p = rbuf;
  for (uint32_t i = 0; i < roff; i++)
    CHECK(p[i] == GUARD_BYTE, "[%s] %u bytes: written before the receive buffer", in_me, len);
}

/* ---- vectors ---- */

#define MAXSEG 8

/* Lays out n segments of the given lengths in buf with GUARD-byte gaps. */
static void lay(mx_segment_t *seg, const uint32_t *lens, int n, unsigned char *buf) {
  size_t off = 3;
  for (int i = 0; i < n; i++) {
    seg[i].segment_ptr = buf + off;
    seg[i].segment_length = lens[i];
    off += lens[i] + GUARD;
  }
}

static size_t laid_bytes(const uint32_t *lens, int n) {
  size_t t = 3;
  for (int i = 0; i < n; i++)
    t += lens[i] + GUARD;
  return t;
}

static void seg_fill(mx_segment_t *seg, int n, uint32_t seed) {
  uint32_t pos = 0;
  for (int i = 0; i < n; i++)
    for (uint32_t j = 0; j < seg[i].segment_length; j++)
      ((unsigned char *)seg[i].segment_ptr)[j] = pat(seed, pos++);
}

/* Index of the first wrong byte of the message, -2 for a damaged gap, or -1. */
static long seg_check(mx_segment_t *seg, int n, uint32_t seed, uint32_t upto) {
  uint32_t pos = 0;
  for (int i = 0; i < n; i++) {
    const unsigned char *p = seg[i].segment_ptr;
    for (uint32_t j = 0; j < seg[i].segment_length; j++, pos++) {
      unsigned char want = pos < upto ? pat(seed, pos) : GUARD_BYTE;
      if (p[j] != want)
        return (long)pos;
    }
    if (!guard_ok(p + seg[i].segment_length))
      return -2;
  }
  return -1;
}

/* A vectored message: the sender's layout slens[ns], the receiver's rlens[nr]. */
static void vec(const uint32_t *slens, int ns, const uint32_t *rlens, int nr, int sender, int mode,
                uint64_t m, uint32_t seed) {
  mx_segment_t seg[MAXSEG];
  mx_status_t st;
  uint32_t stotal = 0, rtotal = 0;
  for (int i = 0; i < ns; i++)
    stotal += slens[i];
  for (int i = 0; i < nr; i++)
    rtotal += rlens[i];
  TRACE("vector of %u bytes from %s, %s", stotal, sender ? "B" : "A", mode ? "unexpected" : "posted");
  if (me == sender) {
    lay(seg, slens, ns, sbuf);
    seg_fill(seg, ns, seed);
    if (mode == 0)
      ready_wait(m);
    mx_request_t r = in_isend(ep, peer, seg, (uint32_t)ns, m, NULL, 0);
    C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] vectored send of %u bytes never completed",
              in_me, stotal);
    CHECK(st.code == MX_STATUS_SUCCESS, "[%s] vectored send of %u bytes: %s", in_me, stotal,
          mx_strstatus(st.code));
    return;
  }
  memset(rbuf, GUARD_BYTE, laid_bytes(rlens, nr));
  lay(seg, rlens, nr, rbuf);
  mx_request_t r = NULL;
  if (mode == 0) {
    r = in_irecv(ep, seg, (uint32_t)nr, m, MX_MATCH_MASK_NONE, NULL);
    ready_send(m);
  } else {
    probe(m, stotal);
    r = in_irecv(ep, seg, (uint32_t)nr, m, MX_MATCH_MASK_NONE, NULL);
  }
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] vectored %u bytes not received", in_me,
            stotal);
  CHECK_STATUS(st, MX_STATUS_SUCCESS, m, stotal, stotal, NULL);
  CHECK(rtotal == stotal, "test bug: vector totals differ");
  long bad = seg_check(seg, nr, seed, stotal);
  CHECK(bad == -1, "[%s] vectored %u bytes (%d -> %d segments, %s): %s at %ld", in_me, stotal, ns,
        nr, mode ? "unexpected" : "posted", bad == -2 ? "gap overwritten" : "data differ", bad);
}

/* ---- truncation ---- */

static void trunc_one(uint32_t len, uint32_t rlen, int sender, uint64_t m, uint32_t seed) {
  mx_status_t st;
  mx_segment_t seg;
  TRACE("%u bytes into %u from %s", len, rlen, sender ? "B" : "A");
  if (me == sender) {
    fill(sbuf, len, seed);
    ready_wait(m);
    seg.segment_ptr = sbuf;
    seg.segment_length = len;
    mx_request_t r = in_isend(ep, peer, &seg, 1, m, NULL, 0);
    C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] truncated send of %u bytes never completed",
              in_me, len);
    /* eager sends complete before the receive: success; rendezvous: truncated */
    CHECK(st.code == MX_STATUS_SUCCESS || st.code == MX_STATUS_TRUNCATED,
          "[%s] send of %u bytes into %u: %s", in_me, len, rlen, mx_strstatus(st.code));
    return;
  }
  memset(rbuf, GUARD_BYTE, (size_t)len + GUARD);
  seg.segment_ptr = rbuf;
  seg.segment_length = rlen;
  mx_request_t r = in_irecv(ep, &seg, 1, m, MX_MATCH_MASK_NONE, NULL);
  ready_send(m);
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] truncated %u bytes not received", in_me,
            len);
  CHECK_STATUS(st, MX_STATUS_TRUNCATED, m, len, rlen, NULL);
  CHECK(verify(rbuf, rlen, seed) < 0, "[%s] %u bytes truncated to %u: data", in_me, len, rlen);
  CHECK(guard_ok(rbuf + rlen), "[%s] %u bytes truncated to %u: written past the buffer", in_me, len,
        rlen);
}

static void role(int rank, void *arg) {
  (void)arg;
  me = rank;
  in_init();
  ep = in_open(eids[me]);
  nic = t_nic();
  in_barrier(); /* both endpoints open */
  peer = in_connect(ep, eids[1 - me]);
  sbuf = xmalloc((size_t)max_size + 4096);
  rbuf = xmalloc((size_t)max_size + 4096);
  double t0 = now_ms();

  for (int i = 0; i < nsizes; i++) {
    uint32_t len = sizes[i];
    for (int dir = 0; dir < 2; dir++)
      for (int mode = 0; mode < 2; mode++) {
        uint64_t m = TAG | (uint64_t)i << 8 | (uint64_t)dir << 1 | (uint64_t)mode;
        uint32_t k = (uint32_t)(i * 4 + dir * 2 + mode);
        one(len, dir, mode, m, 1000u + k, k % 7, (k * 3) % 8);
      }
  }
  double t1 = now_ms();

  /* vectored: a big message (several segments, uneven, zero-length ones) and
   * small ones on both sides of the 4 KiB threshold */
  uint32_t big = (max_size < (8u << 20) ? max_size : (8u << 20)) + 5;
  uint32_t s_big[5] = {1, 4095, 0, big / 2, 0};
  s_big[4] = big - 1 - 4095 - big / 2;
  uint32_t r_big[7] = {3, 4097, 32768, 0, big / 3, 100, 0};
  r_big[6] = big - 3 - 4097 - 32768 - big / 3 - 100;
  static const uint32_t s_small[3] = {2000, 0, 4000}, r_small[2] = {4096, 1904};
  static const uint32_t s_eager[3] = {1, 2998, 1000}, r_eager[4] = {500, 0, 3000, 499};
  for (int dir = 0; dir < 2; dir++)
    for (int mode = 0; mode < 2; mode++) {
      uint64_t m = TAG | 0x10000 | (uint64_t)dir << 1 | (uint64_t)mode;
      if (big >= 4096 + 32768 + 200)
        vec(s_big, 5, r_big, 7, dir, mode, m, 7000u + (uint32_t)(dir * 2 + mode));
      vec(s_small, 3, r_small, 2, dir, mode, m | 0x100, 7100u + (uint32_t)(dir * 2 + mode));
      vec(s_eager, 3, r_eager, 4, dir, mode, m | 0x200, 7200u + (uint32_t)(dir * 2 + mode));
    }

  /* truncated receives: eager, at the thresholds, rendezvous */
  static const uint32_t tr[][2] = {{100, 40},       {4096, 1},         {4097, 4096},
                                   {5000, 4000},    {32769, 32768},    {100000, 5000},
                                   {1u << 20, 4097}, {(1u << 20) + 3, (1u << 20) - 1}};
  for (size_t i = 0; i < sizeof tr / sizeof tr[0]; i++)
    for (int dir = 0; dir < 2; dir++)
      if (tr[i][0] <= max_size)
        trunc_one(tr[i][0], tr[i][1], dir, TAG | 0x20000 | i << 4 | (uint64_t)dir,
                  8000u + (uint32_t)(i * 2) + (uint32_t)dir);

  printf("[%s] %d sizes up to %u bytes x 2 directions x 2 modes in %.0f ms, vectors and "
         "truncation in %.0f ms\n",
         in_me, nsizes, max_size, t1 - t0, now_ms() - t1);
  in_barrier(); /* both done before either closes */
  free(sbuf);
  free(rbuf);
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
}

int main(void) {
  in_prog = "intranode_sizes.c";
  double mx = in_env_num("INTRANODE_MAX_SIZE", 64 << 20);
  max_size = mx < 1 ? 1 : mx > (double)(256u << 20) ? (256u << 20) : (uint32_t)mx;
  make_sizes();
  double deadline = in_deadline(), t0 = now_ms();
  in_spawn("A", role, 0, NULL);
  in_spawn("B", role, 1, NULL);
  in_serve(deadline, NULL, NULL);
  printf("intranode_sizes: %.1f s\n", (now_ms() - t0) / 1e3);
  DONE();
}
