/* intranode_kill.c - a process of the host dies (SIGKILL) while it exchanges
 * messages with another one; the survivor's requests that involve it must end
 * with a clear non-success status within KILL_BOUND_S (30 s) - never hang -,
 * new sends to it must end the same way, and a fresh process must be able to
 * open the dead one's endpoint index and talk to the survivor again (both
 * directions, every size class). Four scenarios, each with its own endpoint
 * indexes (survivor S, victim V, replacement R on V's index):
 *
 *  sender_killed    V sends S a message of 4 MiB + 1 (M1), a big one (M2,
 *                   64 MiB by default), two more of 4 MiB + 1 and one of 100 B.
 *                   S posted the receives of M1 and M2 in advance; V kills
 *                   itself as soon as M1's send completed, so M2 is (usually)
 *                   mid-transfer and the others sit announced in S's
 *                   unexpected queue.
 *  receiver_killed  the reverse: V posted receives for S's M1 (4 MiB + 1) and
 *                   M2 (big) and kills itself once M1 is in; S's sends of M2
 *                   (mid-transfer), of 4 MiB + 1 (never matched) and of 100 B
 *                   are pending or done.
 *  stream_killed    V streams messages of mixed sizes (0 B to 68 KiB) to S,
 *                   16 sends in flight; the parent kills it at a random moment
 *                   (100 to 400 ms into the stream); S checks that everything
 *                   it received is intact and in order.
 *  closed_reopened  no death: V exchanges two streams of 200 messages and
 *                   1000 round trips of 8 B with S, closes its endpoint
 *                   cleanly and exits; R opens the same index at once (no
 *                   sends to the closed endpoint in between).
 *
 * Accepted outcomes for S's requests involving V, once V is dead (the parent
 * tells S when it reaped V):
 *  - M2's receive (sender_killed, posted in advance, matched when V announced
 *    it): SUCCESS with every byte right (it finished first) or any status
 *    other than SUCCESS/PENDING (typically MX_STATUS_ENDPOINT_CLOSED,
 *    MX_STATUS_ENDPOINT_UNREACHABLE, MX_STATUS_ABORTED) within KILL_BOUND_S
 *    of the death; still pending then = hung = failure;
 *  - a receive posted after the death for a message of V that mx_iprobe saw
 *    in the unexpected queue: a rendezvous (4 MiB + 1) must end with a
 *    non-success status (its data cannot be read any more), an eager one
 *    (100 B, already in S's memory) with SUCCESS and its data or non-success;
 *    the runtime may also drop a dead process's unexpected messages (the
 *    receive then matches nothing and mx_cancel succeeds 2 s later: accepted
 *    and reported "never matched");
 *  - stream receives pending at the death: SUCCESS (intact, in order),
 *    non-success, or never matched (mx_cancel succeeds);
 *  - S's sends to V pending at the death: SUCCESS (it finished first) or
 *    non-success; a rendezvous V never matched must end non-success; new
 *    sends to the dead V (posted after the death): 4 MiB + 1 must end
 *    non-success, 100 B either way. All within the bound.
 * Then R opens V's endpoint index and speaks first: S receives R's hello and
 * answers it through status.source before connecting to R itself (as a
 * server does); then both exchange every size class both ways plus a stream
 * of 200 messages each way.
 *
 * Host state left behind by the dead process: once R has opened V's endpoint
 * and exchanged messages with S, the parent lists the state directories
 * ($OMX_STATE_DIR, or /dev/shm when it is unset: every file up to three levels
 * down, e.g. omx-<mac>/ep2.info, omx-<mac>/shm-0/ep2; plus the entries of
 * /dev/shm whose name starts with "omx" or contains V's pid) and fails, unless
 * they disappear within 10 s, on:
 *  (a) an entry whose name contains V's pid as a number (per-process files),
 *  (b) a file (not *.lock: endpoint and board locks are flock files, kept and
 *      reused by design) that appeared while V was alive (absent when only S
 *      had its endpoint open), still has the same inode and was not modified
 *      since R started (nobody took it over: a leftover of V),
 *  (c) an ep<V's index>.info that still names V's pid.
 * Environment: INTRANODE_MAX_SIZE caps the big message (default 64 MiB, at
 * least 8 MiB), INTRANODE_TIMEOUT_S (75) bounds each scenario, KILL_BOUND_S
 * (30) the survivor's wait for each request, INTRANODE_TRACE=1 lists the
 * state files seen while the victim lived, INTRANODE_KILL_LEAK=1 checks the
 * checker (the victim leaves files behind: the test must fail),
 * INTRANODE_KILL_ONLY=name[,name] runs only these scenarios. */
#include "intranode.h"

#define TAG 0x6b00000000000000ull
#define READY_BIT (1ull << 55)
#define SMALL 100u
#define MID ((4u << 20) + 1)
#define NSTREAM_SIZES 9
#define WINDOW 16
#define MAXFILES 4096
#define STREAM_MASK 0xffffffffff000000ull /* the sequence number is ignored */

enum { SENDER_KILLED, RECEIVER_KILLED, STREAM_KILLED, CLOSED, NSCEN };
static const char *scen_name[] = {"sender_killed", "receiver_killed", "stream_killed",
                                  "closed_reopened"};

static int scen;
static uint32_t big;
static double bound_ms;
static uint32_t s_eid, v_eid;

static mx_endpoint_t ep;
static uint64_t nic;

/* ---- outcome helpers (children) ---- */

enum { DONE_OK, DONE_FAILED, UNMATCHED, HUNG };
static const char *outcome_name[] = {"success", "failure", "never matched (cancelled)", "HUNG"};

/* Waits until `until` (now_ms clock) for a request involving the dead peer.
 * cancellable: a receive still pending after GRACE_MS is cancelled if it can
 * be (it matched nothing: reported as such); otherwise it has until `until`. */
#define GRACE_MS 2000
static int settle(mx_request_t *r, double until, int cancellable, mx_status_t *st) {
  uint32_t result = 0;
  double grace = now_ms() + GRACE_MS;
  int tried = !cancellable;
  memset(st, 0, sizeof *st);
  for (;;) {
    double stop = tried ? until : (grace < until ? grace : until);
    double left = stop - now_ms();
    if (left < 1)
      left = 1;
    mx_return_t rc = mx_wait(ep, r, (uint32_t)left, st, &result);
    if (rc != MX_SUCCESS)
      fprintf(stderr, "[%s] mx_wait: %s\n", in_me, mx_strerror(rc));
    if (result)
      return st->code == MX_STATUS_SUCCESS ? DONE_OK : DONE_FAILED;
    if (!tried && now_ms() >= stop) {
      tried = 1;
      if (mx_cancel(ep, r, &result) == MX_SUCCESS && result == 1)
        return UNMATCHED;
    }
    if (now_ms() >= until)
      return HUNG;
  }
}

/* Reports one outcome; `allowed` is a bit mask of accepted outcomes. */
static void judge(const char *what, int out, const mx_status_t *st, double t_death, int allowed) {
  double after = (now_ms() - t_death) / 1e3;
  printf("[%s] %s: %s%s%s after %.2f s\n", in_me, what, outcome_name[out],
         out == DONE_FAILED ? ", status " : "", out == DONE_FAILED ? mx_strstatus(st->code) : "",
         after);
  CHECK(out != DONE_FAILED || st->code != MX_STATUS_PENDING, "[%s] %s: completed as PENDING",
        in_me, what);
  CHECK(allowed & (1 << out), "[%s] %s: %s%s%s is not an accepted outcome%s", in_me, what,
        outcome_name[out], out <= DONE_FAILED ? ", status " : "",
        out <= DONE_FAILED ? mx_strstatus(st->code) : "",
        out == HUNG ? " (still pending at the bound, KILL_BOUND_S)" : "");
}

#define OK_ (1 << DONE_OK)
#define FAILED_ (1 << DONE_FAILED)
#define UNMATCHED_ (1 << UNMATCHED)

static mx_request_t post_recv(void *buf, uint32_t len, uint64_t m) {
  mx_segment_t seg = {buf, len};
  return in_irecv(ep, &seg, 1, m, MX_MATCH_MASK_NONE, NULL);
}

static mx_request_t post_send(mx_endpoint_addr_t to, void *buf, uint32_t len, uint64_t m) {
  mx_segment_t seg = {buf, len};
  return in_isend(ep, to, &seg, 1, m, NULL, 0);
}

static void wait_parent(char want) {
  char c = in_hear(2 * IN_WAIT_MS + (int)bound_ms);
  C_REQUIRE(c == want, "[%s] expected '%c' from the parent, got '%c'", in_me, want, c ? c : '0');
}

/* With INTRANODE_KILL_LEAK=1 (a check of the checker: the test must then
 * fail), the victim leaves two files in $OMX_STATE_DIR while it lives: one
 * named after its pid (rule a), one not (rule b). */
static void leak(void) {
  const char *dir = getenv("OMX_STATE_DIR");
  if (getenv("INTRANODE_KILL_LEAK") && dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/leak-%d", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (f)
      fclose(f);
    snprintf(path, sizeof path, "%s/leak-%s", dir, scen_name[scen]);
    f = fopen(path, "w");
    if (f)
      fclose(f);
  }
}

/* The victim dies at once (the parent listed the state already). */
static void die_now(void) {
  fflush(stdout);
  fflush(stderr);
  raise(SIGKILL);
}

/* After the death: new sends to the dead endpoint end within the bound. */
static void send_to_dead(mx_endpoint_addr_t dead, unsigned char *buf, double t_death) {
  mx_status_t st;
  double t0 = now_ms();
  mx_request_t a = post_send(dead, buf, SMALL, TAG | 0xd1);
  mx_request_t b = post_send(dead, buf, MID, TAG | 0xd2);
  int oa = settle(&a, t0 + bound_ms, 0, &st);
  judge("new 100 B send to the dead endpoint", oa, &st, t_death, OK_ | FAILED_);
  int ob = settle(&b, t0 + bound_ms, 0, &st);
  judge("new 4 MiB+1 send to the dead endpoint", ob, &st, t_death, FAILED_);
}

/* ---- the survivor ---- */

static unsigned char *sb, *rb;

static uint64_t stream_match(uint32_t seq) { return TAG | 0x10000000ull | seq; }

static uint32_t stream_len(uint32_t seq) {
  static const uint32_t l[NSTREAM_SIZES] = {8, 100, 4000, 4096, 4097, 20000, 32769, 70000, 0};
  return l[(seq * 7u + seq / 9u) % NSTREAM_SIZES];
}

/* Receives a stream of n messages (n = 0: until the parent says the sender is
 * dead) from the peer, WINDOW receives posted at a time, in order. Returns
 * the number of messages received intact. */
static uint32_t stream_recv(uint32_t n, uint32_t seed0, int until_death, double *t_death,
                             uint32_t src) {
  mx_request_t req[WINDOW];
  uint32_t posted = 0, done = 0, ok = 0;
  int dead = 0, failures = 0;
  size_t slot = 70000 + 64;
  for (;;) {
    while (!dead && posted < done + WINDOW && (until_death || posted < n)) {
      mx_segment_t seg = {rb + (posted % WINDOW) * slot, 70000};
      req[posted % WINDOW] = in_irecv(ep, &seg, 1, stream_match(0), STREAM_MASK, NULL);
      posted++;
    }
    if (done == posted) {
      if (dead) {
        /* every receive posted at the death had matched and ended */
        printf("[%s] stream: %u messages received intact, %d failed, the sender died after "
               "all posted receives matched (message %u)\n",
               in_me, ok, failures, done);
        return ok;
      }
      break;
    }
    mx_status_t st;
    uint32_t seq = done;
    mx_request_t *r = &req[seq % WINDOW];
    if (!dead) {
      uint32_t result = 0;
      mx_wait(ep, r, until_death ? 20 : IN_WAIT_MS, &st, &result);
      if (!result) {
        if (until_death && in_hear(0) == 'D') {
          dead = 1;
          *t_death = now_ms();
          continue;
        }
        C_REQUIRE(until_death, "[%s] stream message %u never arrived", in_me, seq);
        continue;
      }
    } else {
      /* the sender is dead: what is still posted must end, or have matched
       * nothing (then it can be cancelled at once) */
      uint32_t res = 0;
      int out = UNMATCHED;
      if (mx_cancel(ep, r, &res) != MX_SUCCESS || !res)
        out = settle(r, *t_death + bound_ms, 1, &st);
      if (out == UNMATCHED || out == HUNG) {
        if (out == HUNG)
          judge("stream receive pending at the death", out, &st, *t_death, OK_ | FAILED_);
        /* the remaining receives cannot have matched either: cancel them */
        for (uint32_t k = seq + 1; k < posted; k++) {
          uint32_t res = 0;
          mx_request_t *q = &req[k % WINDOW];
          mx_status_t st2;
          if (mx_cancel(ep, q, &res) != MX_SUCCESS || !res) {
            int o = settle(q, *t_death + bound_ms, 1, &st2);
            judge("stream receive pending at the death", o, &st2, *t_death,
                  OK_ | FAILED_ | UNMATCHED_);
          }
        }
        printf("[%s] stream: %u messages received intact, %d failed, the sender died at "
               "about message %u\n",
               in_me, ok, failures, seq);
        return ok;
      }
      if (out == DONE_FAILED) {
        failures++;
        done++;
        CHECK(st.code != MX_STATUS_PENDING, "[%s] stream receive ended PENDING", in_me);
        continue;
      }
    }
    done++;
    if (st.code != MX_STATUS_SUCCESS) {
      CHECK(dead || until_death, "[%s] stream message %u: %s", in_me, seq, mx_strstatus(st.code));
      failures++;
      continue;
    }
    uint32_t len = stream_len(seq);
    CHECK(st.match_info == stream_match(seq) && st.msg_length == len,
          "[%s] stream receive %u got match %#" PRIx64 " (%u bytes), expected %#" PRIx64
          " (%u bytes): out of order",
          in_me, seq, st.match_info, st.msg_length, stream_match(seq), len);
    CHECK(verify(rb + (seq % WINDOW) * slot, st.xfer_length, seed0 + seq) < 0,
          "[%s] stream message %u (%u bytes): data", in_me, seq, len);
    CHECK_SOURCE(st, nic, src);
    ok++;
    if (!until_death && done == n)
      break;
  }
  if (until_death)
    CHECK(0, "[%s] stream ended without the death notice", in_me);
  return ok;
}

/* Sends a stream of n messages (n = 0: forever, until killed). */
static void stream_send(mx_endpoint_addr_t to, uint32_t n, uint32_t seed0, int tell_after) {
  mx_request_t req[WINDOW];
  uint32_t posted = 0, done = 0;
  unsigned char *buf = xmalloc(WINDOW * 70000);
  for (;;) {
    while (posted < done + WINDOW && (n == 0 || posted < n)) {
      unsigned char *p = buf + (posted % WINDOW) * 70000;
      fill(p, stream_len(posted), seed0 + posted);
      req[posted % WINDOW] = post_send(to, p, stream_len(posted), stream_match(posted));
      posted++;
    }
    if (done == posted)
      break;
    mx_status_t st;
    C_REQUIRE(in_wait(ep, &req[done % WINDOW], IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
              "[%s] stream send %u: %s", in_me, done, mx_strstatus(st.code));
    done++;
    if (tell_after && done == (uint32_t)tell_after) {
      leak();
      in_tell('X');
    } /* streaming: the parent may kill us now */
  }
  free(buf);
}

/* 1000 round trips of 8 bytes (wraps the rings around a few times). */
static void pingpong(mx_endpoint_addr_t to, int first) {
  unsigned char b[8];
  mx_status_t st;
  for (uint32_t i = 0; i < 2000; i++) {
    uint64_t m = TAG | 0x40000000ull | i;
    if ((int)(i & 1) == first) {
      mx_request_t r = post_recv(b, 8, m);
      C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS &&
                    st.xfer_length == 8 && verify(b, 8, i) < 0,
                "[%s] ping-pong message %u", in_me, i);
    } else {
      fill(b, 8, i);
      mx_request_t r = post_send(to, b, 8, m);
      C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
                "[%s] ping-pong send %u", in_me, i);
    }
  }
}

/* Talking again with the replacement, both ways (S and R both call it). */
static void exchange(mx_endpoint_addr_t to, int first_sender, int i_am_s) {
  static const uint32_t lens[] = {0, SMALL, 4096, 4097, 32769, MID};
  for (int dir = 0; dir < 2; dir++) {
    int sending = (dir == first_sender) == i_am_s;
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
      uint64_t m = TAG | 0x20000000ull | (uint64_t)dir << 8 | i;
      uint32_t seed = 3000u + (uint32_t)(dir * 16) + (uint32_t)i;
      mx_status_t st;
      if (sending) {
        fill(sb, lens[i], seed);
        mx_request_t r = post_send(to, sb, lens[i], m);
        C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
                  "[%s] after the death: send of %u bytes: %s", in_me, lens[i],
                  mx_strstatus(st.code));
      } else {
        memset(rb, 0, lens[i]);
        mx_request_t r = post_recv(rb, lens[i], m);
        C_REQUIRE(r && in_wait(ep, &r, IN_WAIT_MS, &st),
                  "[%s] after the death: %u bytes from the %s never arrived", in_me, lens[i],
                  i_am_s ? "replacement" : "survivor");
        CHECK_STATUS(st, MX_STATUS_SUCCESS, m, lens[i], lens[i], NULL);
        CHECK_SOURCE(st, nic, i_am_s ? v_eid : s_eid);
        CHECK(verify(rb, lens[i], seed) < 0, "[%s] after the death: %u bytes: data", in_me,
              lens[i]);
      }
    }
  }
  /* and a stream of 200 mixed messages each way */
  if (i_am_s) {
    stream_recv(200, 5000, 0, NULL, v_eid);
    stream_send(to, 200, 6000, 0);
  } else {
    stream_send(to, 200, 5000, 0);
    stream_recv(200, 6000, 0, NULL, s_eid);
  }
}

static void survivor(int rank, void *arg) {
  (void)rank;
  (void)arg;
  mx_status_t st;
  double t_death = 0;
  in_init();
  ep = in_open(s_eid);
  nic = t_nic();
  sb = xmalloc((size_t)big + 4096);
  rb = xmalloc((size_t)big + 4096);
  unsigned char *rb2 = xmalloc(MID + 4096);
  in_tell('O');
  wait_parent('g'); /* the victim is started */
  in_barrier();     /* both open */
  mx_endpoint_addr_t v = in_connect(ep, v_eid);

  if (scen == SENDER_KILLED) {
    /* M1 (4 MiB + 1) then M2 (big): V dies once M1 is done, M2 in transfer */
    mx_request_t r1 = post_recv(rb2, MID, TAG | 1);
    mx_request_t r2 = post_recv(rb, big, TAG | 2);
    in_barrier(); /* receives posted */
    C_REQUIRE(r1 && in_wait(ep, &r1, IN_WAIT_MS, &st), "[%s] first message never arrived", in_me);
    CHECK_STATUS(st, MX_STATUS_SUCCESS, TAG | 1, MID, MID, NULL);
    CHECK(verify(rb2, MID, 1) < 0, "[%s] first message: data", in_me);
    wait_parent('D');
    t_death = now_ms();
    int o = settle(&r2, t_death + bound_ms, 0, &st);
    judge("big receive in transfer at the death", o, &st, t_death, OK_ | FAILED_);
    if (o == DONE_OK)
      CHECK(st.xfer_length == big && verify(rb, big, 2) < 0,
            "[%s] big message completed with wrong data", in_me);
    /* messages of the dead sender in the unexpected queue */
    static const uint64_t um[3] = {TAG | 3, TAG | 4, TAG | 5};
    static const uint32_t ul[3] = {MID, MID, SMALL};
    for (int i = 0; i < 3; i++) {
      uint32_t result = 0;
      char what[96];
      CHECK_OK(mx_iprobe(ep, um[i], MX_MATCH_MASK_NONE, &st, &result));
      snprintf(what, sizeof what, "receive posted after the death for an unexpected %s",
               ul[i] == SMALL ? "100 B" : "4 MiB+1");
      if (!result) {
        printf("[%s] %s: not in the unexpected queue (dropped)\n", in_me, what);
        continue;
      }
      memset(rb, 0, ul[i]);
      mx_request_t r = post_recv(rb, ul[i], um[i]);
      o = settle(&r, now_ms() + bound_ms, 1, &st);
      judge(what, o, &st, t_death, (ul[i] == SMALL ? OK_ : 0) | FAILED_ | UNMATCHED_);
      if (o == DONE_OK)
        CHECK(verify(rb, ul[i], (uint32_t)(3 + i)) < 0, "[%s] %s: data", in_me, what);
    }
  } else if (scen == RECEIVER_KILLED) {
    /* V posted receives for M1 (4 MiB + 1) and M2 (big), dies once M1 is in */
    fill(rb2, MID, 1);
    fill(sb, big, 2);
    unsigned char *mid = xmalloc(MID);
    fill(mid, MID, 3);
    in_barrier(); /* the victim posted its receives */
    mx_request_t s1 = post_send(v, rb2, MID, TAG | 1);
    mx_request_t s2 = post_send(v, sb, big, TAG | 2);
    mx_request_t s3 = post_send(v, mid, MID, TAG | 3);
    mx_request_t s4 = post_send(v, mid, SMALL, TAG | 4);
    C_REQUIRE(s1 && in_wait(ep, &s1, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
              "[%s] first send: %s", in_me, mx_strstatus(st.code));
    wait_parent('D');
    t_death = now_ms();
    int o = settle(&s2, t_death + bound_ms, 0, &st);
    judge("big send in transfer at the death", o, &st, t_death, OK_ | FAILED_);
    o = settle(&s3, t_death + bound_ms, 0, &st);
    judge("4 MiB+1 send never matched by the dead receiver", o, &st, t_death, FAILED_);
    o = settle(&s4, t_death + bound_ms, 0, &st);
    judge("100 B send to the dead receiver", o, &st, t_death, OK_ | FAILED_);
    free(mid);
  } else if (scen == STREAM_KILLED) {
    in_barrier(); /* stream starts */
    stream_recv(0, 1000, 1, &t_death, v_eid);
  } else {
    /* V talks with S, closes its endpoint cleanly and exits */
    stream_recv(200, 7000, 0, NULL, v_eid);
    stream_send(v, 200, 7100, 0);
    pingpong(v, 0);
    in_barrier(); /* both streams done */
    wait_parent('D');
    t_death = now_ms();
  }
  if (scen != CLOSED) {
    send_to_dead(v, sb, t_death);
    in_tell('R'); /* a replacement takes the dead one's endpoint index */
  } /* (closed_reopened: the parent starts it as soon as V exited) */
  in_barrier(); /* the replacement is open */
  /* R speaks first (S has not connected to it yet): S answers through
   * status.source, like a server; then S connects and both exchange */
  memset(rb, 0, SMALL);
  mx_request_t h = post_recv(rb, SMALL, TAG | 0x30000000ull);
  C_REQUIRE(h && in_wait(ep, &h, IN_WAIT_MS, &st), "[%s] no hello from the replacement", in_me);
  CHECK_STATUS(st, MX_STATUS_SUCCESS, TAG | 0x30000000ull, SMALL, SMALL, NULL);
  CHECK_SOURCE(st, nic, v_eid);
  CHECK(verify(rb, SMALL, 77) < 0, "[%s] hello from the replacement: data", in_me);
  fill(sb, SMALL, 78);
  h = post_send(st.source, sb, SMALL, TAG | 0x30000001ull);
  C_REQUIRE(h && in_wait(ep, &h, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
            "[%s] answer to the replacement's hello: %s", in_me, mx_strstatus(st.code));
  mx_endpoint_addr_t r = in_connect(ep, v_eid);
  exchange(r, 1, 1);
  in_barrier(); /* both done (the parent listed the state in between) */
  free(sb);
  free(rb);
  free(rb2);
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
}

/* ---- the victim ---- */

static void victim(int rank, void *arg) {
  (void)rank;
  (void)arg;
  mx_status_t st;
  in_init();
  ep = in_open(v_eid);
  nic = t_nic();
  in_barrier(); /* both open */
  mx_endpoint_addr_t s = in_connect(ep, s_eid);
  if (scen == SENDER_KILLED) {
    unsigned char *b1 = xmalloc(MID), *b2 = xmalloc(big), *b3 = xmalloc(MID), *b4 = xmalloc(MID);
    unsigned char small[SMALL];
    fill(b1, MID, 1);
    fill(b2, big, 2);
    fill(b3, MID, 3);
    fill(b4, MID, 4);
    fill(small, SMALL, 5);
    in_barrier(); /* the survivor's receives are posted */
    mx_request_t s1 = post_send(s, b1, MID, TAG | 1);
    post_send(s, b2, big, TAG | 2);
    post_send(s, b3, MID, TAG | 3);
    post_send(s, b4, MID, TAG | 4);
    post_send(s, small, SMALL, TAG | 5);
    leak();
    in_tell('X'); /* the parent lists the state while we live */
    wait_parent('a');
    C_REQUIRE(s1 && in_wait(ep, &s1, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
              "[%s] first send: %s", in_me, mx_strstatus(st.code));
    die_now();
  } else if (scen == RECEIVER_KILLED) {
    unsigned char *b1 = xmalloc(MID), *b2 = xmalloc(big);
    mx_request_t r1 = post_recv(b1, MID, TAG | 1);
    post_recv(b2, big, TAG | 2);
    in_barrier(); /* receives posted */
    leak();
    in_tell('X');
    wait_parent('a');
    C_REQUIRE(r1 && in_wait(ep, &r1, IN_WAIT_MS, &st) && st.code == MX_STATUS_SUCCESS,
              "[%s] first receive: %s", in_me, mx_strstatus(st.code));
    die_now();
  } else if (scen == STREAM_KILLED) {
    in_barrier(); /* stream starts */
    stream_send(s, 0, 1000, 50);
  } else {
    sb = xmalloc(MID);
    rb = xmalloc(WINDOW * (70000 + 64));
    stream_send(s, 200, 7000, 0);
    stream_recv(200, 7100, 0, NULL, s_eid);
    pingpong(s, 1);
    leak();
    in_tell('X');
    wait_parent('a');
    in_barrier(); /* both streams done */
    CHECK_OK(mx_close_endpoint(ep));
    mx_finalize();
    in_child_done(); /* exits 0 when every check passed */
  }
  CHECK(0, "[%s] still alive", in_me);
}

/* ---- the replacement ---- */

static void replacement(int rank, void *arg) {
  (void)rank;
  (void)arg;
  in_init();
  ep = in_open(v_eid);
  nic = t_nic();
  sb = xmalloc(MID + 4096);
  rb = xmalloc(WINDOW * (70000 + 64) + MID);
  in_barrier(); /* open */
  mx_endpoint_addr_t s = in_connect(ep, s_eid);
  mx_status_t st;
  unsigned char hello[SMALL];
  fill(hello, SMALL, 77);
  mx_request_t a = post_recv(rb, SMALL, TAG | 0x30000001ull);
  mx_segment_t hs = {hello, SMALL};
  mx_request_t h = in_isend(ep, s, &hs, 1, TAG | 0x30000000ull, NULL, 1); /* issend */
  C_REQUIRE(h && in_wait(ep, &h, IN_WAIT_MS, &st),
            "[%s] the hello to the survivor (mx_issend) never completed", in_me);
  CHECK(st.code == MX_STATUS_SUCCESS, "[%s] hello to the survivor: %s", in_me,
        mx_strstatus(st.code));
  C_REQUIRE(a && in_wait(ep, &a, IN_WAIT_MS, &st),
            "[%s] the survivor never answered the hello (through status.source)", in_me);
  CHECK_STATUS(st, MX_STATUS_SUCCESS, TAG | 0x30000001ull, SMALL, SMALL, NULL);
  CHECK(verify(rb, SMALL, 78) < 0, "[%s] answer to the hello: data", in_me);
  exchange(s, 1, 0);
  in_tell('C'); /* the parent lists the state directories */
  wait_parent('k');
  in_barrier(); /* both done */
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
}

/* ---- the parent: state directories ---- */

struct fent {
  char path[512];
  ino_t ino;
  struct timespec mtime;
};

static struct fent snap0[MAXFILES], snap1[MAXFILES], cur[MAXFILES];
static int n0, n1, ncur;

static void scan_dir(const char *dir, int depth, int top_filter, struct fent *out, int *n) {
  DIR *d = opendir(dir);
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d)) && *n < MAXFILES) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
      continue;
    if (top_filter && strncmp(e->d_name, "omx", 3) != 0)
      continue;
    struct fent *f = &out[*n];
    struct stat sbuf;
    snprintf(f->path, sizeof f->path, "%s/%s", dir, e->d_name);
    if (lstat(f->path, &sbuf) != 0)
      continue;
    if (S_ISDIR(sbuf.st_mode)) {
      char sub[512];
      snprintf(sub, sizeof sub, "%s", f->path); /* out[*n] is reused below */
      if (depth > 0)
        scan_dir(sub, depth - 1, 0, out, n);
      continue;
    }
    f->ino = sbuf.st_ino;
    f->mtime = sbuf.st_mtim;
    (*n)++;
  }
  closedir(d);
}

/* State files: $OMX_STATE_DIR (3 levels) or /dev/shm/omx* (3 levels), plus
 * /dev/shm entries named omx* when OMX_STATE_DIR is elsewhere. */
static void scan(struct fent *out, int *n) {
  const char *st = getenv("OMX_STATE_DIR");
  *n = 0;
  if (st && *st) {
    scan_dir(st, 3, 0, out, n);
    if (strcmp(st, "/dev/shm") != 0)
      scan_dir("/dev/shm", 0, 1, out, n);
  } else {
    scan_dir("/dev/shm", 3, 1, out, n);
  }
}

static const struct fent *find(const struct fent *set, int n, const char *path) {
  for (int i = 0; i < n; i++)
    if (strcmp(set[i].path, path) == 0)
      return &set[i];
  return NULL;
}

/* Whether the decimal `pid` appears in s as a whole number. */
static int has_pid(const char *s, pid_t pid) {
  char num[24];
  int l = snprintf(num, sizeof num, "%d", (int)pid);
  for (const char *p = s; (p = strstr(p, num)); p++) {
    int before = p > s && p[-1] >= '0' && p[-1] <= '9';
    int after = p[l] >= '0' && p[l] <= '9';
    if (!before && !after)
      return 1;
  }
  return 0;
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

static int older(struct timespec a, double b_ms_real) {
  double a_ms = (double)a.tv_sec * 1e3 + (double)a.tv_nsec / 1e6;
  return a_ms < b_ms_real;
}

static double real_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Stale entries of the dead process now: prints them when `report`. */
static int stale(pid_t dead, double r_started_real, int report) {
  int bad = 0;
  char info[32];
  snprintf(info, sizeof info, "/ep%u.info", v_eid);
  scan(cur, &ncur);
  for (int i = 0; i < ncur; i++) {
    const struct fent *f = &cur[i];
    const char *why = NULL;
    const char *base = strrchr(f->path, '/');
    base = base ? base + 1 : f->path;
    if (has_pid(base, dead))
      why = "(a) named after the dead pid";
    if (!why && !ends_with(f->path, ".lock")) {
      const struct fent *was = find(snap1, n1, f->path), *before = find(snap0, n0, f->path);
      if (was && was->ino == f->ino && !(before && before->ino == f->ino) &&
          older(f->mtime, r_started_real))
        why = "(b) appeared while the dead process lived, untouched since";
    }
    if (!why && ends_with(f->path, info)) {
      FILE *fp = fopen(f->path, "r");
      long pid = 0;
      if (fp) {
        if (fscanf(fp, "%ld", &pid) != 1)
          pid = 0;
        fclose(fp);
      }
      if (pid == (long)dead)
        why = "(c) still names the dead pid";
    }
    if (why) {
      bad++;
      if (report)
        CHECK(0, "%s: state left by the dead process (pid %d): %s %s", scen_name[scen], (int)dead,
              f->path, why);
    }
  }
  return bad;
}

/* ---- the parent: scenario driver ---- */

static int kid_s = -1, kid_v = -1, kid_r = -1;
static int death_told;
static double kill_at, r_started_real;
static pid_t v_pid;

/* Lists the state until nothing stale is left (up to 10 s), then reports. */
static void check_state(void) {
  double end = now_ms() + 10000;
  int n;
  while ((n = stale(v_pid, r_started_real, 0)) > 0 && now_ms() < end)
    sleep_ms(100);
  if (n > 0)
    stale(v_pid, r_started_real, 1);
  else
    CHECK(1, "state");
  printf("%s: state directories checked (%d files listed, %d when only the survivor was open, "
         "%d while the victim lived), %d stale\n",
         scen_name[scen], ncur, n0, n1, n);
}

static void hook(int child, char c) {
  if (child == kid_s && c == 'O') {
    scan(snap0, &n0);
    kid_v = in_spawn("V", victim, 1, NULL);
    v_pid = in_kids[kid_v].pid;
    in_kids[kid_v].expect_kill = scen != CLOSED;
    in_send_to(kid_s, 'g');
  } else if (child == kid_v && c == 'X') {
    scan(snap1, &n1);
    for (int i = 0; i < n1; i++)
      if (!ends_with(snap1[i].path, ".lock"))
        TRACE("while the victim lives: %s", snap1[i].path);
    if (scen == STREAM_KILLED)
      kill_at = now_ms() + 100 + (double)(getpid() % 300);
    else
      in_send_to(kid_v, 'a');
  } else if (child == kid_s && c == 'R') {
    r_started_real = real_ms();
    kid_r = in_spawn("R", replacement, 2, NULL);
  } else if (child == kid_r && c == 'C') {
    check_state();
    in_send_to(kid_r, 'k');
  } else {
    CHECK(0, "unexpected message '%c' from child %s", c, in_kids[child].name);
  }
}

/* Drives the steps that are not answers to a child's message. */
static int step(void) {
  if (kill_at > 0 && now_ms() >= kill_at && kid_v >= 0 && in_kids[kid_v].alive) {
    kill(in_kids[kid_v].pid, SIGKILL);
    kill_at = 0;
  }
  if (!death_told && kid_v >= 0 && !in_kids[kid_v].alive) {
    death_told = 1;
    if (scen == CLOSED) { /* reopened at once */
      r_started_real = real_ms();
      kid_r = in_spawn("R", replacement, 2, NULL);
    }
    in_send_to(kid_s, 'D');
  }
  for (int i = 0; i < in_nkids; i++)
    if (in_kids[i].alive)
      return 0;
  return 1;
}

int main(void) {
  in_prog = "intranode_kill.c";
  double mx = in_env_num("INTRANODE_MAX_SIZE", 64 << 20);
  big = mx < (double)(8u << 20) ? (8u << 20) : mx > (double)(256u << 20) ? (256u << 20) : (uint32_t)mx;
  bound_ms = in_env_num("KILL_BOUND_S", 30) * 1e3;
  const char *only = getenv("INTRANODE_KILL_ONLY");
  for (scen = 0; scen < NSCEN; scen++) {
    if (only && *only && !strstr(only, scen_name[scen]))
      continue;
    double t0 = now_ms();
    s_eid = 1 + (uint32_t)scen * 2;
    v_eid = s_eid + 1;
    in_reset();
    kid_s = kid_v = kid_r = -1;
    death_told = 0;
    kill_at = 0;
    int before = t_failures;
    kid_s = in_spawn("S", survivor, 0, NULL);
    in_serve(now_ms() + in_env_num("INTRANODE_TIMEOUT_S", 75) * 1e3, hook, step);
    printf("%s: %s in %.1f s\n", scen_name[scen], t_failures == before ? "ok" : "FAILED",
           (now_ms() - t0) / 1e3);
    fflush(stdout);
  }
  DONE();
}
