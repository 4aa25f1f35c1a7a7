/* common.h - helpers shared by the MX API tests of omx (tests/c/api).
 *
 * Every test is a stand-alone program that prints one "FAIL file:line: ..."
 * line per failed check on stderr and ends with "<name>: N checks, M failed";
 * the exit status is 0 only when every check passed.  Single-host tests run
 * inside one network namespace with OMX_IFACES=lo (board name "localhost"),
 * where every endpoint of the host shares the loopback interface.
 *
 * Header-only on purpose: each test is built from one .c file.
 */
#ifndef OMX_API_TEST_COMMON_H
#define OMX_API_TEST_COMMON_H

#define _POSIX_C_SOURCE 200809L

#include <myriexpress.h>
#include <mx_extensions.h>

#include "../../common/check.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Connection key used by every test endpoint unless a test says otherwise. */
#define TKEY 0x5eed1234u

/* Expect a call to return `want`; prints the MX text of what came back. */
#define CHECK_RC(call, want)                                                   \
  do {                                                                         \
    mx_return_t rc_ = (call);                                                  \
    CHECK(rc_ == (want), "%s returned %d (%s), expected %d (%s)", #call,       \
          (int)rc_, mx_strerror(rc_), (int)(want), mx_strerror(want));         \
  } while (0)

#define CHECK_OK(call) CHECK_RC(call, MX_SUCCESS)


/* ---- error handler capture ---- */

static int h_calls;
static mx_return_t h_last;
static char h_msg[256];

/* Records the call and returns the code unchanged (like MX_ERRORS_RETURN). */
static inline mx_return_t record_handler(char *msg, mx_return_t code) {
  h_calls++;
  h_last = code;
  snprintf(h_msg, sizeof h_msg, "%s", msg ? msg : "(null)");
  return code;
}

static inline void h_reset(void) {
  h_calls = 0;
  h_last = MX_SUCCESS;
  h_msg[0] = 0;
}

/* Expect `call` to fail with `want`, reported once through record_handler. */
#define CHECK_ERR(call, want)                                                  \
  do {                                                                         \
    h_reset();                                                                 \
    CHECK_RC(call, want);                                                      \
    CHECK(h_calls == 1 && h_last == (want),                                    \
          "%s: handler called %d times, last code %d, expected once with %d",  \
          #call, h_calls, (int)h_last, (int)(want));                           \
  } while (0)

/* mx_init + the recording handler (failing calls return their code). */
static inline void t_init(void) {
  mx_return_t rc = mx_init();
  if (rc != MX_SUCCESS) {
    fprintf(stderr, "FAIL mx_init: %d (%s)\n", (int)rc, mx_strerror(rc));
    exit(1);
  }
  mx_set_error_handler(record_handler);
}

static inline mx_endpoint_t t_open(uint32_t index, uint32_t key) {
  mx_endpoint_t ep = NULL;
  mx_return_t rc = mx_open_endpoint(0, index, key, NULL, 0, &ep);
  if (rc != MX_SUCCESS) {
    fprintf(stderr, "FAIL mx_open_endpoint(0, %u): %d (%s)\n", index, (int)rc,
            mx_strerror(rc));
    t_failures++;
    t_done("open");
  }
  return ep;
}

/* nic id of the local board 0. */
static inline uint64_t t_nic(void) {
  uint64_t nic = 0;
  mx_return_t rc = mx_board_number_to_nic_id(0, &nic);
  if (rc != MX_SUCCESS) {
    fprintf(stderr, "FAIL mx_board_number_to_nic_id: %s\n", mx_strerror(rc));
    t_failures++;
    t_done("nic");
  }
  return nic;
}

/* Connect `ep` to endpoint `index` of the local board. */
static inline mx_endpoint_addr_t t_connect(mx_endpoint_t ep, uint32_t index,
                                    uint32_t key) {
  mx_endpoint_addr_t a;
  memset(&a, 0, sizeof a);
  mx_return_t rc = mx_connect(ep, t_nic(), index, key, 5000, &a);
  if (rc != MX_SUCCESS) {
    fprintf(stderr, "FAIL mx_connect(ep %u): %d (%s)\n", index, (int)rc,
            mx_strerror(rc));
    t_failures++;
    t_done("connect");
  }
  return a;
}

/* Wait (up to 10 s) for a request; returns 1 and fills *st when it completed. */
static inline int t_wait(mx_endpoint_t ep, mx_request_t *req, mx_status_t *st) {
  uint32_t result = 0;
  mx_status_t tmp;
  if (!st)
    st = &tmp;
  memset(st, 0xa5, sizeof *st);
  mx_return_t rc = mx_wait(ep, req, 10000, st, &result);
  if (rc != MX_SUCCESS || result != 1) {
    fprintf(stderr, "t_wait: rc %d (%s) result %u\n", (int)rc,
            mx_strerror(rc), result);
    return 0;
  }
  return 1;
}

/* Post a contiguous send / receive; 0 on failure (reported). */
static inline mx_request_t t_send(mx_endpoint_t ep, mx_endpoint_addr_t dest,
                           void *buf, uint32_t len, uint64_t match,
                           void *ctx) {
  mx_segment_t seg;
  mx_request_t r = NULL;
  seg.segment_ptr = buf;
  seg.segment_length = len;
  mx_return_t rc = mx_isend(ep, &seg, 1, dest, match, ctx, &r);
  CHECK(rc == MX_SUCCESS, "mx_isend(len %u): %s", len, mx_strerror(rc));
  return r;
}

static inline mx_request_t t_recv(mx_endpoint_t ep, void *buf, uint32_t len,
                           uint64_t match, uint64_t mask, void *ctx) {
  mx_segment_t seg;
  mx_request_t r = NULL;
  seg.segment_ptr = buf;
  seg.segment_length = len;
  mx_return_t rc = mx_irecv(ep, &seg, 1, match, mask, ctx, &r);
  CHECK(rc == MX_SUCCESS, "mx_irecv(len %u): %s", len, mx_strerror(rc));
  return r;
}

/* Endpoint index carried by an address (-1 if it cannot be decomposed). */
static inline long t_addr_eid(mx_endpoint_addr_t a, uint64_t *nic) {
  uint64_t n = 0;
  uint32_t e = 0;
  if (mx_decompose_endpoint_addr(a, &n, &e) != MX_SUCCESS)
    return -1;
  if (nic)
    *nic = n;
  return (long)e;
}

/* Check every field of a completion status. */
#define CHECK_STATUS(st, want_code, want_match, want_msg, want_xfer, want_ctx) \
  do {                                                                         \
    CHECK((st).code == (want_code), "status code %d (%s), expected %d (%s)",   \
          (int)(st).code, mx_strstatus((st).code), (int)(want_code),           \
          mx_strstatus(want_code));                                            \
    CHECK((st).match_info == (uint64_t)(want_match),                           \
          "match_info %#" PRIx64 ", expected %#" PRIx64, (st).match_info,      \
          (uint64_t)(want_match));                                             \
    CHECK((st).msg_length == (uint32_t)(want_msg),                             \
          "msg_length %u, expected %u", (st).msg_length,                       \
          (uint32_t)(want_msg));                                               \
    CHECK((st).xfer_length == (uint32_t)(want_xfer),                           \
          "xfer_length %u, expected %u", (st).xfer_length,                     \
          (uint32_t)(want_xfer));                                              \
    CHECK((st).context == (void *)(want_ctx), "context %p, expected %p",       \
          (st).context, (void *)(want_ctx));                                   \
  } while (0)

/* Check that status.source designates endpoint `eid` of nic `nic`. */
#define CHECK_SOURCE(st, want_nic, want_eid)                                   \
  do {                                                                         \
    uint64_t n_ = 0;                                                           \
    long e_ = t_addr_eid((st).source, &n_);                                    \
    CHECK(e_ == (long)(want_eid) && n_ == (uint64_t)(want_nic),                \
          "source: nic %#" PRIx64 " endpoint %ld, expected %#" PRIx64          \
          " endpoint %ld",                                                     \
          n_, e_, (uint64_t)(want_nic), (long)(want_eid));                     \
  } while (0)

#define CTX(n) ((void *)(uintptr_t)(n))

#endif /* OMX_API_TEST_COMMON_H */
