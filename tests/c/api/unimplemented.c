/* unimplemented.c - entry points omx does not implement yet fail through
 * the error handler with MX_BAD_REQUEST and do not crash or disturb the
 * endpoint (mx_iput, mx_iget, omx_expose_region, omx_unexpose_region,
 * mx_register_unexp_callback); the MX-internal probes (mx_open_board,
 * mx__get_mapper_state, mx__regcache_clean) answer MX_SUCCESS. */
#include "common.h"

#include <mx_io.h>

static void callback(void *ctx, uint64_t m, int len) {
  (void)ctx;
  (void)m;
  (void)len;
}

/* One message e0 -> e1 works. */
static void still_works(mx_endpoint_t e0, mx_endpoint_addr_t to1, mx_endpoint_t e1, uint64_t m) {
  char s[32], r[32];
  mx_status_t st;
  fill(s, sizeof s, (uint32_t)m);
  mx_request_t rr = t_recv(e1, r, sizeof r, m, MX_MATCH_MASK_NONE, CTX(m));
  mx_request_t sr = t_send(e0, to1, s, sizeof s, m, NULL);
  CHECK(t_wait(e1, &rr, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(m) &&
            verify(r, sizeof r, (uint32_t)m) < 0,
        "communication after the unimplemented calls (%#" PRIx64 ")", m);
  t_wait(e0, &sr, NULL);
}

int main(void) {
  static char region[4096];
  mx_request_t req = NULL;

  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);

  /* ---- not implemented yet: MX_BAD_REQUEST through the handler ---- */
  CHECK_ERR(mx_iput(e0, region, 64, to1, (uint64_t)(uintptr_t)region, NULL, &req), MX_BAD_REQUEST);
  CHECK_ERR(mx_iget(e0, region, 64, to1, (uint64_t)(uintptr_t)region, NULL, &req), MX_BAD_REQUEST);
  CHECK_ERR(mx_iput(e0, region, 0, to1, 0, CTX(1), NULL), MX_BAD_REQUEST);
  CHECK_ERR(omx_expose_region(e1, region, sizeof region, 1, OMX_REGION_READ | OMX_REGION_WRITE),
            MX_BAD_REQUEST);
  CHECK_ERR(omx_unexpose_region(e1, 1), MX_BAD_REQUEST);
  CHECK_ERR(mx_register_unexp_callback(e1, callback, CTX(3)), MX_BAD_REQUEST);
  /* the handler's message says what happened */
  h_reset();
  mx_iget(e0, region, 8, to1, 0, NULL, &req);
  CHECK(h_msg[0] != 0, "empty error message for an unimplemented call");
  /* with MX_ERRORS_RETURN: just the code */
  mx_set_error_handler(MX_ERRORS_RETURN);
  CHECK_RC(mx_iput(e0, region, 64, to1, 0, NULL, &req), MX_BAD_REQUEST);
  CHECK_RC(omx_expose_region(e0, region, 64, 9, OMX_REGION_READ), MX_BAD_REQUEST);
  mx_set_error_handler(record_handler);
  /* nothing completes from them */
  {
    mx_status_t st;
    uint32_t result = 5;
    CHECK_OK(mx_wait_any(e0, 100, 0, 0, &st, &result));
    CHECK(result == 0, "an unimplemented call left a completion");
  }
  still_works(e0, to1, e1, 0x11);

  /* ---- MX-internal probes ---- */
  {
    mx_endpt_handle_t h = MX__INVALID_HANDLE;
    mx_mapper_state_t ms;
    CHECK_OK(mx_open_board(0, &h));
    memset(&ms, 0xff, sizeof ms);
    ms.board_number = 0;
    CHECK_OK(mx__get_mapper_state(h, &ms));
    CHECK(ms.map_version != 0xffffffffu, "mapper state: map_version not filled");
    CHECK(sizeof ms == 36, "mx_mapper_state_t is %zu bytes", sizeof ms);
    CHECK(mx__regcache_clean(region, sizeof region) == 0, "mx__regcache_clean");
    CHECK(mx__regcache_clean(NULL, 0) == 0, "mx__regcache_clean(NULL, 0)");
  }
  still_works(e0, to1, e1, 0x12);

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
