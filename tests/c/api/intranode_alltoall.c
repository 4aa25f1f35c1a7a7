/* intranode_alltoall.c - eight processes of one host (endpoints 1..8 of board
 * 0), each sending to every other one several messages of each size (0 B,
 * 8 B, 4 KiB + 1, 32 KiB + 1, 1 MiB; three of each), all at once: the first
 * round's receives are posted before anyone sends, the others after the sends
 * (arriving unexpected, or racing with the arrival). Every message is checked
 * (status, source, length, data). Then a wildcard round: each process posts
 * receives that ignore the source bits of the match info, every other process
 * sends it one message of 4 KiB + 1 and one of 16 B, and the sources seen
 * (status.source) must be each peer exactly once per size, with its data.
 * INTRANODE_MAX_SIZE (default 64 MiB) caps the sizes; INTRANODE_TIMEOUT_S
 * (60) bounds the test. */
#include "intranode.h"

#define NPROC 8
#define REPS 3
#define NSIZES 5
#define GUARD 8
#define GUARD_BYTE 0xee
#define TAG 0xa200000000000000ull
#define WILD 0xa300000000000000ull
#define SRC_SHIFT 24

static uint32_t sizes[NSIZES] = {0, 8, 4097, 32769, 1u << 20};
static size_t slot; /* bytes per (peer, size, rep) receive slot */

static mx_endpoint_t ep;
static mx_endpoint_addr_t to[NPROC];
static uint64_t nic;
static int me;

static uint32_t eid(int rank) { return (uint32_t)rank + 1; }

static uint32_t seed_of(int src, int si, int rep) {
  return (uint32_t)(src * 1000 + si * 10 + rep + 1);
}

static uint64_t match_of(int src, int si, int rep) {
  return TAG | (uint64_t)src << SRC_SHIFT | (uint64_t)si << 8 | (uint64_t)rep;
}

static size_t rslot(int src, int si, int rep) {
  return ((size_t)(src * NSIZES + si) * REPS + (size_t)rep) * slot;
}

static void role(int rank, void *arg) {
  (void)arg;
  me = rank;
  in_init();
  ep = in_open(eid(me));
  nic = t_nic();
  in_barrier(); /* every endpoint open */
  for (int p = 0; p < NPROC; p++)
    if (p != me)
      to[p] = in_connect(ep, eid(p));

  unsigned char *sbuf[NSIZES][REPS];
  for (int si = 0; si < NSIZES; si++)
    for (int rep = 0; rep < REPS; rep++) {
      sbuf[si][rep] = xmalloc(sizes[si]);
      fill(sbuf[si][rep], sizes[si], seed_of(me, si, rep));
    }
  size_t rbytes = rslot(NPROC, 0, 0);
  unsigned char *rbuf = xmalloc(rbytes);
  memset(rbuf, GUARD_BYTE, rbytes);
  static mx_request_t rreq[NPROC][NSIZES][REPS], sreq[NPROC][NSIZES][REPS];

  /* round 0: receives posted first */
  for (int src = 0; src < NPROC; src++)
    for (int si = 0; si < NSIZES && src != me; si++) {
      mx_segment_t seg = {rbuf + rslot(src, si, 0), sizes[si]};
      rreq[src][si][0] = in_irecv(ep, &seg, 1, match_of(src, si, 0), MX_MATCH_MASK_NONE,
                                  CTX(match_of(src, si, 0)));
    }
  in_barrier(); /* every round-0 receive posted */
  TRACE("sending");
  double t0 = now_ms();
  for (int k = 1; k < NPROC; k++) {
    int dst = (me + k) % NPROC; /* everyone starts with a different peer */
    for (int rep = 0; rep < REPS; rep++)
      for (int si = 0; si < NSIZES; si++) {
        mx_segment_t seg = {sbuf[si][rep], sizes[si]};
        sreq[dst][si][rep] = in_isend(ep, to[dst], &seg, 1, match_of(me, si, rep), NULL, 0);
      }
  }
  /* the other rounds: posted now, after the sends */
  for (int rep = 1; rep < REPS; rep++)
    for (int src = 0; src < NPROC; src++)
      for (int si = 0; si < NSIZES && src != me; si++) {
        mx_segment_t seg = {rbuf + rslot(src, si, rep), sizes[si]};
        rreq[src][si][rep] = in_irecv(ep, &seg, 1, match_of(src, si, rep), MX_MATCH_MASK_NONE,
                                      CTX(match_of(src, si, rep)));
      }
  TRACE("receiving");
  int nmsg = 0;
  size_t nbytes = 0;
  for (int src = 0; src < NPROC; src++)
    for (int si = 0; si < NSIZES && src != me; si++)
      for (int rep = 0; rep < REPS; rep++) {
        mx_status_t st;
        uint32_t len = sizes[si];
        uint64_t m = match_of(src, si, rep);
        C_REQUIRE(rreq[src][si][rep] && in_wait(ep, &rreq[src][si][rep], IN_WAIT_MS, &st),
                  "[%s] message %d/%u bytes/rep %d from endpoint %u never arrived", in_me, src,
                  len, rep, eid(src));
        CHECK_STATUS(st, MX_STATUS_SUCCESS, m, len, len, CTX(m));
        CHECK_SOURCE(st, nic, eid(src));
        unsigned char *p = rbuf + rslot(src, si, rep);
        long bad = verify(p, len, seed_of(src, si, rep));
        CHECK(bad < 0, "[%s] %u bytes (rep %d) from endpoint %u: data differ at %ld", in_me, len,
              rep, eid(src), bad);
        for (int g = 0; g < GUARD; g++)
          if (p[len + (size_t)g] != GUARD_BYTE) {
            CHECK(0, "[%s] %u bytes from endpoint %u: written past the buffer", in_me, len,
                  eid(src));
            break;
          }
        nmsg++;
        nbytes += len;
      }
  for (int dst = 0; dst < NPROC; dst++)
    for (int si = 0; si < NSIZES && dst != me; si++)
      for (int rep = 0; rep < REPS; rep++) {
        mx_status_t st;
        C_REQUIRE(sreq[dst][si][rep] && in_wait(ep, &sreq[dst][si][rep], IN_WAIT_MS, &st),
                  "[%s] send of %u bytes to endpoint %u never completed", in_me, sizes[si],
                  eid(dst));
        CHECK(st.code == MX_STATUS_SUCCESS, "[%s] send of %u bytes to endpoint %u: %s", in_me,
              sizes[si], eid(dst), mx_strstatus(st.code));
      }
  double t1 = now_ms();
  in_barrier(); /* every message of the first part received */

  /* wildcard round: the source bits of the match are ignored */
  static const uint32_t wl[2] = {4097, 16};
  mx_request_t wr[2][NPROC], ws[2][NPROC];
  unsigned char *wbuf = xmalloc(2 * NPROC * (4097 + GUARD));
  memset(wbuf, GUARD_BYTE, 2 * NPROC * (4097 + GUARD));
  for (int w = 0; w < 2; w++)
    for (int k = 0; k < NPROC - 1; k++) {
      mx_segment_t seg = {wbuf + (size_t)(w * NPROC + k) * (4097 + GUARD), wl[w]};
      wr[w][k] = in_irecv(ep, &seg, 1, WILD | (uint64_t)w, ~(0xffull << SRC_SHIFT), NULL);
    }
  in_barrier(); /* wildcard receives posted */
  TRACE("wildcard round");
  for (int k = 1; k < NPROC; k++) {
    int dst = (me + k) % NPROC;
    for (int w = 0; w < 2; w++) {
      mx_segment_t seg = {sbuf[2][w], wl[w]}; /* 4097 bytes, pattern (me, 2, w) */
      ws[w][dst] = in_isend(ep, to[dst], &seg, 1, WILD | (uint64_t)me << SRC_SHIFT | (uint64_t)w,
                            NULL, 0);
    }
  }
  for (int w = 0; w < 2; w++) {
    int seen[NPROC] = {0};
    for (int k = 0; k < NPROC - 1; k++) {
      mx_status_t st;
      C_REQUIRE(wr[w][k] && in_wait(ep, &wr[w][k], IN_WAIT_MS, &st),
                "[%s] wildcard receive %d of %u bytes never completed", in_me, k, wl[w]);
      long src = t_addr_eid(st.source, NULL) - 1;
      CHECK(st.code == MX_STATUS_SUCCESS && st.msg_length == wl[w] && src >= 0 && src < NPROC &&
                src != me && st.match_info == (WILD | (uint64_t)src << SRC_SHIFT | (uint64_t)w),
            "[%s] wildcard receive %d: %s, %u bytes, source %ld, match %#" PRIx64, in_me, k,
            mx_strstatus(st.code), st.msg_length, src + 1, st.match_info);
      if (src < 0 || src >= NPROC)
        continue;
      seen[src]++;
      unsigned char *p = wbuf + (size_t)(w * NPROC + k) * (4097 + GUARD);
      CHECK(verify(p, wl[w], seed_of((int)src, 2, w)) < 0,
            "[%s] wildcard %u bytes from endpoint %ld: data", in_me, wl[w], src + 1);
    }
    for (int p = 0; p < NPROC; p++)
      CHECK(seen[p] == (p != me), "[%s] wildcard %u bytes: %d messages from endpoint %u", in_me,
            wl[w], seen[p], eid(p));
  }
  for (int k = 1; k < NPROC; k++)
    for (int w = 0; w < 2; w++) {
      mx_status_t st;
      int dst = (me + k) % NPROC;
      C_REQUIRE(ws[w][dst] && in_wait(ep, &ws[w][dst], IN_WAIT_MS, &st) &&
                    st.code == MX_STATUS_SUCCESS,
                "[%s] wildcard send to endpoint %u", in_me, eid(dst));
    }
  printf("[%s] %d messages (%zu bytes) received in %.0f ms; wildcard round in %.0f ms\n", in_me,
         nmsg, nbytes, t1 - t0, now_ms() - t1);
  in_barrier(); /* everyone done before anyone closes */
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
}

int main(void) {
  in_prog = "intranode_alltoall.c";
  double mx = in_env_num("INTRANODE_MAX_SIZE", 64 << 20);
  for (int i = 0; i < NSIZES; i++)
    if (sizes[i] > mx)
      sizes[i] = mx < 0 ? 0 : (uint32_t)mx;
  slot = sizes[NSIZES - 1] + GUARD;
  double deadline = in_deadline(), t0 = now_ms();
  for (int r = 0; r < NPROC; r++) {
    char name[8];
    snprintf(name, sizeof name, "P%d", r);
    in_spawn(name, role, r, NULL);
  }
  in_serve(deadline, NULL, NULL);
  printf("intranode_alltoall: %.1f s\n", (now_ms() - t0) / 1e3);
  DONE();
}
