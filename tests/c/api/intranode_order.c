/* intranode_order.c - two processes of one host (endpoints 1 and 2 of board 0):
 * MX matching order between processes. The sender posts a long mixed sequence
 * of sizes crossing the 4 KiB shared-memory and 32 KiB network rendezvous
 * thresholds (eager and rendezvous interleaved, more rendezvous sends in
 * flight than the engine runs at once) back to back; the receiver matches
 * them with a mask that ignores the sequence number carried in the low bits
 * of the match info, so each receive must take the oldest message: order,
 * lengths, match info and contents are checked. Four phases, in both
 * directions: every receive posted first; the first ones (up to the 64th
 * rendezvous) unexpected, the others posted while they come in; half
 * posted then half posted while the messages arrive; and all messages with
 * exactly the same match info (order shown by lengths and data only).
 * Then mx_issend semantics: a synchronous send (0 B to 1 MiB) stays pending
 * while the message sits unexpected at the receiver (seen there by mx_probe)
 * and completes once a receive matches it.
 * INTRANODE_MAX_SIZE (default 64 MiB) caps the sizes; INTRANODE_TIMEOUT_S
 * (60) bounds the test. */
#include "intranode.h"

#define GUARD 16
#define GUARD_BYTE 0xee
#define NMSG 300
#define TAG 0x0d00000000000000ull
#define SEQ_MASK 0xffffffff00000000ull
#define READY_BIT (1ull << 55)

static const uint32_t eids[2] = {1, 2};
static uint32_t max_size;
static uint32_t seq_len[NMSG];
/* The unexpected phase waits for this message before posting receives: the
 * last one with at most 64 rendezvous-sized (over 4 KiB) messages up to it.
 * (Waiting for the very last one would rely on the sender announcing every
 * rendezvous at once, which MX does not promise: senders may hold rendezvous
 * beyond a resource limit until earlier ones are matched.) */
static int unexp_probe;
static size_t seq_off[NMSG + 1];

static mx_endpoint_t ep;
static mx_endpoint_addr_t peer;
static uint64_t nic;
static int me;
static unsigned char *sbuf, *rbuf;

/* The sequence: mostly sizes around the thresholds, a few big ones. */
static int n_over(uint32_t t) {
  int n = 0;
  for (int i = 0; i < NMSG; i++)
    n += seq_len[i] > t;
  return n;
}

static void make_sequence(void) {
  static const uint32_t small[] = {0,    1,     8,     64,    1000,  4095,  4096,   4097,
                                   4100, 8000,  8960,  9000,  16384, 32767, 32768,  32769,
                                   40000, 65536, 100000, 3,   4094,  12288, 131072, 2};
  static const uint32_t big[] = {1u << 20, (3u << 20) + 1, 8u << 20};
  uint32_t x = 12345;
  size_t off = 0;
  int nbig = 0;
  for (int i = 0; i < NMSG; i++) {
    x = x * 1103515245u + 12345u;
    uint32_t len;
    if (i % 50 == 17) /* 6 big ones, spread out */
      len = big[nbig++ % 3];
    else
      len = small[(x >> 12) % (sizeof small / sizeof small[0])];
    if (len > max_size)
      len = max_size;
    seq_len[i] = len;
    seq_off[i] = off;
    off += len + GUARD;
  }
  seq_off[NMSG] = off;
  int n = 0;
  for (int i = 0; i < NMSG; i++) {
    n += seq_len[i] > 4096;
    if (n > 64)
      break;
    unexp_probe = i;
  }
}

static void ready_send(uint64_t m) {
  mx_segment_t seg = {NULL, 0};
  mx_status_t st;
  mx_request_t r = in_isend(ep, peer, &seg, 1, m | READY_BIT, NULL, 0);
  CHECK(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
        "[%s] ready not sent", in_me);
}

static void ready_wait(uint64_t m) {
  mx_segment_t seg = {NULL, 0};
  mx_status_t st;
  mx_request_t r = in_irecv(ep, &seg, 1, m | READY_BIT, MX_MATCH_MASK_NONE, NULL);
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] no ready from the peer", in_me);
}

enum { POSTED, UNEXPECTED, HALF, SAME_MATCH, NPHASES };
static const char *phase_name[] = {"posted", "unexpected", "half posted", "same match"};

static mx_request_t post(int i, uint64_t base, uint64_t mask) {
  mx_segment_t seg = {rbuf + seq_off[i], seq_len[i]};
  return in_irecv(ep, &seg, 1, base, mask, CTX(i + 1));
}

/* One phase of NMSG messages from `sender`. */
static void phase(int ph, int sender) {
  uint64_t base = TAG | (uint64_t)(ph * 2 + sender) << 40;
  int same = ph == SAME_MATCH;
  uint64_t mask = same ? MX_MATCH_MASK_NONE : SEQ_MASK;
  mx_request_t *req = xmalloc(NMSG * sizeof *req);
  mx_status_t st;
  uint32_t seed0 = 50000u * (uint32_t)(ph * 2 + sender + 1);
  TRACE("phase %s, sender %s", phase_name[ph], sender ? "B" : "A");

  if (me == sender) {
    for (int i = 0; i < NMSG; i++)
      fill(sbuf + seq_off[i], seq_len[i], seed0 + (uint32_t)i);
    if (ph != UNEXPECTED)
      ready_wait(base);
    for (int i = 0; i < NMSG; i++) {
      mx_segment_t seg = {sbuf + seq_off[i], seq_len[i]};
      req[i] = in_isend(ep, peer, &seg, 1, same ? base : base | (uint64_t)i, NULL, 0);
    }
    for (int i = 0; i < NMSG; i++) {
      C_REQUIRE(req[i] && in_wait(ep, &req[i], IN_WAIT_MS, &st),
                "[%s] %s: send %d (%u bytes) never completed", in_me, phase_name[ph], i,
                seq_len[i]);
      CHECK(st.code == MX_STATUS_SUCCESS, "[%s] %s: send %d: %s", in_me, phase_name[ph], i,
            mx_strstatus(st.code));
    }
    free(req);
    return;
  }

  memset(rbuf, GUARD_BYTE, seq_off[NMSG]);
  int posted = 0;
  if (ph == POSTED || ph == HALF || ph == SAME_MATCH) {
    int upto = ph == POSTED ? NMSG : NMSG / 2;
    for (; posted < upto; posted++)
      req[posted] = post(posted, base, mask);
    ready_send(base);
  } else {
    /* the first messages unexpected: wait until message unexp_probe is there */
    uint32_t result = 0;
    CHECK_OK(mx_probe(ep, IN_WAIT_MS, base | (uint64_t)unexp_probe, MX_MATCH_MASK_NONE, &st,
                      &result));
    C_REQUIRE(result == 1, "[%s] %s: message %d never arrived", in_me, phase_name[ph],
              unexp_probe);
  }
  for (; posted < NMSG; posted++)
    req[posted] = post(posted, base, mask);
  int bad_order = 0;
  for (int i = 0; i < NMSG; i++) {
    uint32_t len = seq_len[i];
    C_REQUIRE(req[i] && in_wait(ep, &req[i], IN_WAIT_MS, &st),
              "[%s] %s: receive %d (%u bytes) never completed", in_me, phase_name[ph], i, len);
    uint64_t want = same ? base : base | (uint64_t)i;
    if (st.match_info != want || st.msg_length != len || st.code != MX_STATUS_SUCCESS) {
      if (bad_order++ < 5)
        CHECK(0,
              "[%s] %s: receive %d got match %#" PRIx64 " (%u bytes, %s), expected %#" PRIx64
              " (%u bytes)",
              in_me, phase_name[ph], i, st.match_info, st.msg_length, mx_strstatus(st.code), want,
              len);
      continue;
    }
    CHECK(st.xfer_length == len && st.context == CTX(i + 1), "[%s] %s: receive %d status", in_me,
          phase_name[ph], i);
    CHECK_SOURCE(st, nic, eids[sender]);
    long bad = verify(rbuf + seq_off[i], len, seed0 + (uint32_t)i);
    CHECK(bad < 0, "[%s] %s: message %d (%u bytes): data differ at %ld (out of order?)", in_me,
          phase_name[ph], i, len, bad);
    for (int g = 0; g < GUARD; g++)
      if (rbuf[seq_off[i] + len + (size_t)g] != GUARD_BYTE) {
        CHECK(0, "[%s] %s: message %d written past its buffer", in_me, phase_name[ph], i);
        break;
      }
  }
  CHECK(bad_order == 0, "[%s] %s: %d of %d messages out of order or wrong", in_me, phase_name[ph],
        bad_order, NMSG);
  free(req);
}

/* mx_issend of len bytes from sender: pending while unexpected at the receiver. */
static void issend_case(uint32_t len, int sender, uint64_t m, uint32_t seed) {
  mx_status_t st;
  mx_segment_t seg;
  uint32_t result = 0;
  mx_request_t r = NULL;
  TRACE("issend of %u bytes from %s", len, sender ? "B" : "A");
  if (me == sender) {
    fill(sbuf, len, seed);
    seg.segment_ptr = sbuf;
    seg.segment_length = len;
    r = in_isend(ep, peer, &seg, 1, m, CTX(7), 1);
    in_barrier(); /* 1: sent */
    in_barrier(); /* 2: the receiver has seen it (probe) */
    sleep_ms(100);
    CHECK_OK(mx_test(ep, &r, &st, &result));
    CHECK(result == 0, "[%s] issend of %u bytes completed while unexpected at the receiver", in_me,
          len);
    in_barrier(); /* 3: the receiver posts its receive */
    C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st),
              "[%s] issend of %u bytes never completed after the match", in_me, len);
    CHECK(st.code == MX_STATUS_SUCCESS && st.context == CTX(7) && st.match_info == m,
          "[%s] issend of %u bytes: %s", in_me, len, mx_strstatus(st.code));
    return;
  }
  in_barrier(); /* 1 */
  CHECK_OK(mx_probe(ep, IN_WAIT_MS, m, MX_MATCH_MASK_NONE, &st, &result));
  C_REQUIRE(result == 1 && st.msg_length == len, "[%s] issend of %u bytes not seen by mx_probe",
            in_me, len);
  in_barrier(); /* 2 */
  in_barrier(); /* 3 */
  memset(rbuf, GUARD_BYTE, (size_t)len + GUARD);
  seg.segment_ptr = rbuf;
  seg.segment_length = len;
  r = in_irecv(ep, &seg, 1, m, MX_MATCH_MASK_NONE, NULL);
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] issend of %u bytes not received", in_me,
            len);
  CHECK_STATUS(st, MX_STATUS_SUCCESS, m, len, len, NULL);
  CHECK(verify(rbuf, len, seed) < 0, "[%s] issend of %u bytes: data", in_me, len);
}

/* mx_issend to a receive already posted completes. */
static void issend_posted(uint32_t len, int sender, uint64_t m, uint32_t seed) {
  mx_status_t st;
  mx_segment_t seg;
  if (me == sender) {
    fill(sbuf, len, seed);
    seg.segment_ptr = sbuf;
    seg.segment_length = len;
    ready_wait(m);
    mx_request_t r = in_isend(ep, peer, &seg, 1, m, NULL, 1);
    C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
              "[%s] issend of %u bytes to a posted receive", in_me, len);
    return;
  }
  seg.segment_ptr = rbuf;
  seg.segment_length = len;
  mx_request_t r = in_irecv(ep, &seg, 1, m, MX_MATCH_MASK_NONE, NULL);
  ready_send(m);
  C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st), "[%s] posted receive of an issend", in_me);
  CHECK_STATUS(st, MX_STATUS_SUCCESS, m, len, len, NULL);
  CHECK(verify(rbuf, len, seed) < 0, "[%s] issend of %u bytes (posted): data", in_me, len);
}

static void role(int rank, void *arg) {
  (void)arg;
  me = rank;
  in_init();
  ep = in_open(eids[me]);
  nic = t_nic();
  in_barrier();
  peer = in_connect(ep, eids[1 - me]);
  sbuf = xmalloc(seq_off[NMSG] + (2u << 20));
  rbuf = xmalloc(seq_off[NMSG] + (2u << 20));
  double t0 = now_ms();
  for (int ph = 0; ph < NPHASES; ph++)
    for (int sender = 0; sender < 2; sender++) {
      phase(ph, sender);
      in_barrier();
    }
  double t1 = now_ms();
  static const uint32_t lens[] = {0, 8, 4096, 4097, 32769, 1u << 20};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
    for (int sender = 0; sender < 2; sender++) {
      uint32_t len = lens[i] > max_size ? max_size : lens[i];
      uint64_t m = TAG | 0xff0000000000ull | i << 4 | (uint64_t)sender;
      issend_case(len, sender, m, 900u + (uint32_t)i * 2 + (uint32_t)sender);
      issend_posted(len, sender, m | 0x8, 950u + (uint32_t)i * 2 + (uint32_t)sender);
    }
  printf("[%s] %d phases x 2 directions x %d messages (%zu bytes, %d over 4 KiB, %d over 32 KiB) "
         "in %.0f ms, issend in %.0f ms\n",
         in_me, NPHASES, NMSG, seq_off[NMSG], n_over(4096), n_over(32768), t1 - t0,
         now_ms() - t1);
  in_barrier();
  free(sbuf);
  free(rbuf);
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
}

int main(void) {
  in_prog = "intranode_order.c";
  double mx = in_env_num("INTRANODE_MAX_SIZE", 64 << 20);
  max_size = mx < 1 ? 1 : mx > (double)(256u << 20) ? (256u << 20) : (uint32_t)mx;
  make_sequence();
  double deadline = in_deadline(), t0 = now_ms();
  in_spawn("A", role, 0, NULL);
  in_spawn("B", role, 1, NULL);
  in_serve(deadline, NULL, NULL);
  printf("intranode_order: %.1f s\n", (now_ms() - t0) / 1e3);
  DONE();
}
