/* segments.c - vectored sends and receives: up to 256 segments on both
 * sides with mixed (and zero) sizes, laid out differently on each side,
 * eager and rendezvous totals; 0 segments is an empty message; a receive
 * vector shorter than the message truncates; 257 segments is
 * MX_BAD_SEG_CNT. */
#include "common.h"

static uint64_t nic;

/* Lay `total` bytes over n segments of pseudo-random sizes (some zero),
 * carved from buf; returns the number of bytes placed (== total). */
static uint32_t layout(mx_segment_t *seg, int n, unsigned char *buf, uint32_t total,
                       uint32_t salt) {
  uint32_t left = total, off = 0;
  for (int i = 0; i < n; i++) {
    uint32_t x = (uint32_t)i * 2654435761u ^ salt;
    uint32_t want;
    if (i == n - 1)
      want = left;
    else if (x % 7 == 0)
      want = 0;
    else
      want = (x >> 8) % (2 * total / (uint32_t)n + 2);
    if (want > left)
      want = left;
    /* a 3-byte gap between segments: layout differs from a flat buffer */
    seg[i].segment_ptr = buf + off + 3u * (uint32_t)i;
    seg[i].segment_length = want;
    off += want;
    left -= want;
  }
  return off;
}

/* Scatter/gather the logical stream through a segment list. */
static void seg_fill(mx_segment_t *seg, int n, uint32_t seed) {
  uint32_t pos = 0;
  for (int i = 0; i < n; i++)
    for (uint32_t j = 0; j < seg[i].segment_length; j++)
      ((unsigned char *)seg[i].segment_ptr)[j] = pat(seed, pos++);
}

static long seg_verify(mx_segment_t *seg, int n, uint32_t seed, uint32_t upto) {
  uint32_t pos = 0;
  for (int i = 0; i < n; i++)
    for (uint32_t j = 0; j < seg[i].segment_length && pos < upto; j++, pos++)
      if (((unsigned char *)seg[i].segment_ptr)[j] != pat(seed, pos))
        return (long)pos;
  return -1;
}

static void vcase(mx_endpoint_t e0, mx_endpoint_addr_t to1, mx_endpoint_t e1, int ns, int nr,
                  uint32_t total, uint32_t rtotal, uint32_t seed) {
  static mx_segment_t ss[MX_MAX_SEGMENTS], rs[MX_MAX_SEGMENTS];
  unsigned char *sbuf = xmalloc(total + 3u * MX_MAX_SEGMENTS),
                *rbuf = xmalloc(rtotal + 3u * MX_MAX_SEGMENTS);
  mx_request_t sr = NULL, rr = NULL;
  mx_status_t st;
  uint32_t got = rtotal < total ? rtotal : total;
  layout(ss, ns, sbuf, total, seed);
  layout(rs, nr, rbuf, rtotal, seed * 7u + 1u);
  seg_fill(ss, ns, seed);
  memset(rbuf, 0, rtotal + 3u * MX_MAX_SEGMENTS);
  CHECK_OK(mx_irecv(e1, rs, (uint32_t)nr, seed, MX_MATCH_MASK_NONE, CTX(seed), &rr));
  CHECK_OK(mx_isend(e0, ss, (uint32_t)ns, to1, seed, CTX(seed + 1), &sr));
  if (!rr || !t_wait(e1, &rr, &st)) {
    CHECK(0, "%d->%d segments, %u bytes: receive did not complete", ns, nr, total);
  } else {
    CHECK_STATUS(st, got < total ? MX_STATUS_TRUNCATED : MX_STATUS_SUCCESS, seed, total, got,
                 CTX(seed));
    CHECK_SOURCE(st, nic, 0);
    long bad = seg_verify(rs, nr, seed, got);
    CHECK(bad < 0, "%d->%d segments, %u bytes: data differs at stream byte %ld", ns, nr, total,
          bad);
    /* gaps between receive segments untouched */
    for (int i = 0; i + 1 < nr; i++) {
      unsigned char *gap = (unsigned char *)rs[i].segment_ptr + rs[i].segment_length;
      if (gap[0] || gap[1] || gap[2]) {
        CHECK(0, "%d->%d segments: wrote into the gap after receive segment %d", ns, nr, i);
        break;
      }
    }
  }
  if (!sr || !t_wait(e0, &sr, &st))
    CHECK(0, "%d->%d segments: send did not complete", ns, nr);
  else
    CHECK(st.msg_length == total && st.context == CTX(seed + 1) &&
              (st.code == MX_STATUS_SUCCESS || st.code == MX_STATUS_TRUNCATED),
          "%d->%d segments: send status %s length %u", ns, nr, mx_strstatus(st.code),
          st.msg_length);
  free(sbuf);
  free(rbuf);
}

int main(void) {
  uint32_t seed = 1;
  t_init();
  nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  static const int counts[][2] = {{1, 256}, {256, 1}, {256, 256}, {255, 256}, {2, 3},
                                  {256, 17}, {64, 200}};
  static const uint32_t totals[] = {0, 1, 31, 129, 3000, 32768, 32769, 100000, 1u << 20};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
    for (size_t t = 0; t < sizeof totals / sizeof totals[0]; t++)
      vcase(e0, to1, e1, counts[c][0], counts[c][1], totals[t], totals[t], seed++);
  /* truncation through segments (eager and rendezvous) */
  vcase(e0, to1, e1, 256, 256, 5000, 3000, seed++);
  vcase(e0, to1, e1, 256, 256, 200000, 150000, seed++);
  vcase(e0, to1, e1, 10, 256, 200000, 1, seed++);

  /* 0 segments: an empty message, received by 0 or more segments */
  {
    mx_request_t sr = NULL, rr = NULL;
    mx_status_t st;
    char b[8] = "xxxxxxx";
    mx_segment_t one = {b, sizeof b};
    CHECK_OK(mx_irecv(e1, NULL, 0, 0x77, MX_MATCH_MASK_NONE, CTX(1), &rr));
    CHECK_OK(mx_isend(e0, NULL, 0, to1, 0x77, CTX(2), &sr));
    CHECK(rr && t_wait(e1, &rr, &st), "0-segment receive");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x77, 0, 0, CTX(1));
    CHECK(sr && t_wait(e0, &sr, &st), "0-segment send");
    CHECK_OK(mx_irecv(e1, &one, 1, 0x78, MX_MATCH_MASK_NONE, CTX(3), &rr));
    CHECK_OK(mx_isend(e0, NULL, 0, to1, 0x78, NULL, &sr));
    CHECK(rr && t_wait(e1, &rr, &st), "0-segment message into a buffer");
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x78, 0, 0, CTX(3));
    CHECK(strcmp(b, "xxxxxxx") == 0, "empty message wrote data");
    t_wait(e0, &sr, NULL);
    /* a message into 0 segments: truncated to nothing */
    CHECK_OK(mx_irecv(e1, NULL, 0, 0x79, MX_MATCH_MASK_NONE, CTX(4), &rr));
    sr = t_send(e0, to1, b, 8, 0x79, NULL);
    CHECK(rr && t_wait(e1, &rr, &st), "message into 0 segments");
    CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x79, 8, 0, CTX(4));
    t_wait(e0, &sr, NULL);
  }

  /* 257 segments: MX_BAD_SEG_CNT; nothing is posted */
  {
    static mx_segment_t many[MX_MAX_SEGMENTS + 1];
    static char b[MX_MAX_SEGMENTS + 1];
    mx_request_t req = NULL;
    uint32_t result = 1;
    mx_status_t st;
    for (int i = 0; i <= MX_MAX_SEGMENTS; i++) {
      many[i].segment_ptr = b + i;
      many[i].segment_length = 1;
    }
    CHECK_ERR(mx_isend(e0, many, MX_MAX_SEGMENTS + 1, to1, 0x88, NULL, &req), MX_BAD_SEG_CNT);
    CHECK_ERR(mx_issend(e0, many, MX_MAX_SEGMENTS + 1, to1, 0x88, NULL, &req), MX_BAD_SEG_CNT);
    CHECK_ERR(mx_irecv(e1, many, MX_MAX_SEGMENTS + 1, 0x88, MX_MATCH_MASK_NONE, NULL, &req),
              MX_BAD_SEG_CNT);
    CHECK_ERR(mx_irecv(e1, many, 100000, 0x88, MX_MATCH_MASK_NONE, NULL, &req), MX_BAD_SEG_CNT);
    CHECK_OK(mx_probe(e1, 200, 0x88, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 0, "a refused 257-segment send was delivered");
    /* exactly 256 is fine */
    CHECK_OK(mx_irecv(e1, many, MX_MAX_SEGMENTS, 0x89, MX_MATCH_MASK_NONE, NULL, &req));
    CHECK_OK(mx_cancel(e1, &req, &result));
    CHECK(result == 1, "cancel of the 256-segment receive");
  }

  /* a NULL segment list with a count is refused like a NULL segment pointer:
   * MX_BAD_SEG_LIST (not MX_BAD_SEG_CNT, whose message says "more than 256") */
  {
    mx_request_t req = NULL;
    CHECK_ERR(mx_isend(e0, NULL, 1, to1, 0x8a, NULL, &req), MX_BAD_SEG_LIST);
    CHECK_ERR(mx_irecv(e1, NULL, 1, 0x8a, MX_MATCH_MASK_NONE, NULL, &req), MX_BAD_SEG_LIST);
    CHECK(strstr(h_msg, "256") == NULL, "NULL segment list reported as: %s", h_msg);
  }

  /* a NULL segment pointer with a length is refused (not a match-mask error) */
  {
    mx_segment_t bad = {NULL, 16};
    mx_request_t req = NULL;
    h_reset();
    mx_return_t rc = mx_isend(e0, &bad, 1, to1, 0x90, NULL, &req);
    CHECK(rc != MX_SUCCESS && h_calls == 1 && h_last == rc,
          "isend of a NULL segment: rc %d, %d handler calls", (int)rc, h_calls);
    CHECK(rc != MX_BAD_MATCH_MASK, "isend of a NULL segment reported MX_BAD_MATCH_MASK");
    h_reset();
    rc = mx_irecv(e1, &bad, 1, 0x90, MX_MATCH_MASK_NONE, NULL, &req);
    CHECK(rc != MX_SUCCESS && h_calls == 1 && h_last == rc,
          "irecv into a NULL segment: rc %d, %d handler calls", (int)rc, h_calls);
    CHECK(rc != MX_BAD_MATCH_MASK, "irecv into a NULL segment reported MX_BAD_MATCH_MASK");
  }

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
