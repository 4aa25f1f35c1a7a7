/* truncation.c - messages longer than the receive buffer: the receive
 * completes with MX_STATUS_TRUNCATED, msg_length = message length,
 * xfer_length = buffer length, only the buffer is written; an eager send
 * completes with MX_STATUS_SUCCESS and the full length, a rendezvous send
 * sees MX_STATUS_TRUNCATED with the bytes taken (a self send: either).
 * The two endpoints share a process, so they talk through shared memory,
 * where messages above OMX_SHARED_RNDV_THRESHOLD (4096) are rendezvous.
 * A truncation is a request status, not an error: no handler call, and no
 * exit with MX_ERRORS_ARE_FATAL. */
#include "common.h"

static uint64_t nic;
static uint32_t rndv; /* MX_COPY_SEND_MAX: largest eager message */

/* Largest eager message between two endpoints of this host. */
static uint32_t local_eager_max(void) {
  const char *off = getenv("OMX_DISABLE_SHARED"), *t = getenv("OMX_SHARED_RNDV_THRESHOLD");
  if (off && atoi(off))
    return rndv;
  return t ? (uint32_t)atoi(t) : 4096;
}

static void trunc_case(mx_endpoint_t from, mx_endpoint_addr_t to, mx_endpoint_t into, int self,
                       uint32_t msg, uint32_t buf, int unexpected, uint32_t seed) {
  unsigned char *s = xmalloc(msg), *r = xmalloc(buf + 64);
  mx_request_t sr, rr = NULL;
  mx_status_t st;
  uint32_t result;
  int eager = !self && msg <= local_eager_max();
  fill(s, msg, seed);
  memset(r, 0xcd, buf + 64);
  h_reset();
  if (!unexpected)
    rr = t_recv(into, r, buf, seed, MX_MATCH_MASK_NONE, CTX(1));
  sr = t_send(from, to, s, msg, seed, CTX(2));
  if (unexpected) {
    result = 0;
    CHECK_OK(mx_probe(into, 5000, seed, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1 && st.msg_length == msg, "probe of the long message: result %u length %u",
          result, st.msg_length);
    rr = t_recv(into, r, buf, seed, MX_MATCH_MASK_NONE, CTX(1));
  }
  if (t_wait(into, &rr, &st)) {
    CHECK_STATUS(st, MX_STATUS_TRUNCATED, seed, msg, buf, CTX(1));
    CHECK(verify(r, buf, seed) < 0, "msg %u buf %u: received prefix differs", msg, buf);
    for (uint32_t i = buf; i < buf + 64; i++)
      if (r[i] != 0xcd) {
        CHECK(0, "msg %u buf %u: byte %u past the buffer written", msg, buf, i);
        break;
      }
  } else {
    CHECK(0, "msg %u buf %u (%s): truncated receive did not complete", msg, buf,
          unexpected ? "unexpected" : "expected");
  }
  if (t_wait(from, &sr, &st)) {
    if (self && msg <= rndv && st.code == MX_STATUS_TRUNCATED)
      /* The original Open-MX completes self sends only when matched and
       * reports the truncation; omx sends to itself like to any peer
       * (eager below MX_COPY_SEND_MAX). Both are accepted. */
      CHECK_STATUS(st, MX_STATUS_TRUNCATED, seed, msg, buf, CTX(2));
    else if (eager || (self && msg <= rndv))
      CHECK_STATUS(st, MX_STATUS_SUCCESS, seed, msg, msg, CTX(2));
    else
      CHECK_STATUS(st, MX_STATUS_TRUNCATED, seed, msg, buf, CTX(2));
  } else {
    CHECK(0, "msg %u buf %u: send did not complete", msg, buf);
  }
  CHECK(h_calls == 0, "msg %u buf %u: error handler called for a truncation (code %d)", msg, buf,
        (int)h_last);
  free(s);
  free(r);
}

int main(void) {
  static const uint32_t cases[][2] = {
      {1, 0},         {20, 0},          {32, 31},       {100, 50},       {128, 1},
      {129, 128},     {5000, 4000},     {9000, 100},    {32768, 32767},  {32769, 32768},
      {40000, 39999}, {200000, 100000}, {200000, 0},    {1u << 20, 12345}};
  const size_t n = sizeof cases / sizeof cases[0];
  uint32_t seed = 100;

  t_init();
  nic = t_nic();
  CHECK_OK(mx_get_info(NULL, MX_COPY_SEND_MAX, NULL, 0, &rndv, sizeof rndv));
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY), self = t_connect(e0, 0, TKEY);

  for (int unexp = 0; unexp < 2; unexp++)
    for (size_t i = 0; i < n; i++)
      trunc_case(e0, to1, e1, 0, cases[i][0], cases[i][1], unexp, seed++);
  for (int unexp = 0; unexp < 2; unexp++)
    for (size_t i = 0; i < n; i++)
      trunc_case(e0, self, e0, 1, cases[i][0], cases[i][1], unexp, seed++);

  /* mx_issend always takes the rendezvous path: its sender sees the truncation */
  {
    char s[64], r[16];
    mx_status_t st;
    mx_request_t rr = t_recv(e1, r, sizeof r, 0x55, MX_MATCH_MASK_NONE, NULL);
    mx_segment_t seg = {s, sizeof s};
    mx_request_t sr = NULL;
    fill(s, sizeof s, 3);
    CHECK_OK(mx_issend(e0, &seg, 1, to1, 0x55, NULL, &sr));
    CHECK(t_wait(e1, &rr, &st), "issend receive");
    CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x55, 64, 16, NULL);
    CHECK(t_wait(e0, &sr, &st), "issend");
    CHECK_STATUS(st, MX_STATUS_TRUNCATED, 0x55, 64, 16, NULL);
  }

  /* The fatal handler does not fire for truncated requests. */
  mx_set_error_handler(MX_ERRORS_ARE_FATAL);
  trunc_case(e0, to1, e1, 0, 300, 10, 0, seed++);
  trunc_case(e0, to1, e1, 0, 100000, 10, 0, seed++);
  mx_set_error_handler(record_handler);

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
