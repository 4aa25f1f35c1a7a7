/* onesided.c - one-sided mx_iget/mx_iput on memory exposed with
 * omx_expose_region: data lands where asked, accesses outside an exposed region
 * (or without permission, or after omx_unexpose_region) complete with
 * MX_STATUS_BAD_RDMAWIN and touch nothing; argument errors go through the
 * handler; the deprecated mx_register_unexp_callback notifies; the
 * MX-internal probes (mx_open_board, mx__get_mapper_state, mx__regcache_clean)
 * answer MX_SUCCESS. */
#include "common.h"

#include <mx_io.h>

static int cb_calls;
static uint64_t cb_match;
static void callback(void *ctx, uint64_t m, int len) {
  if (ctx == CTX(3) && len == 32) {
    cb_calls++;
    cb_match = m;
  }
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

  /* ---- one-sided operations ---- */
  {
    static unsigned char src[100000], dst[100000], local[100000];
    uint64_t src_addr = (uint64_t)(uintptr_t)src, dst_addr = (uint64_t)(uintptr_t)dst;
    mx_status_t st;
    fill(src, sizeof src, 77);
    memset(dst, 0, sizeof dst);
    CHECK_OK(omx_expose_region(e1, src, sizeof src, 1, OMX_REGION_READ));
    CHECK_OK(omx_expose_region(e1, dst, sizeof dst, 2, OMX_REGION_WRITE));
    CHECK_ERR(omx_expose_region(e1, src, 16, 1, OMX_REGION_READ), MX_BUSY);
    CHECK_ERR(omx_expose_region(e1, src, 16, 3, 0), MX_BAD_PARAM_VAL);
    CHECK_ERR(omx_unexpose_region(e1, 42), MX_BAD_PARAM_VAL);
    /* gets of several sizes and offsets */
    uint32_t offs[] = {0, 0, 1000, 99990}, lens[] = {0, 10, 60000, 10};
    for (int i = 0; i < 4; i++) {
      memset(local, 0, sizeof local);
      CHECK_OK(mx_iget(e0, local, lens[i], to1, src_addr + offs[i], CTX(10 + i), &req));
      CHECK(t_wait(e0, &req, &st) && st.code == MX_STATUS_SUCCESS && st.xfer_length == lens[i] &&
                st.context == CTX(10 + i),
            "get %u+%u: status %d xfer %u", offs[i], lens[i], st.code, st.xfer_length);
      CHECK(memcmp(local, src + offs[i], lens[i]) == 0, "get %u+%u: data", offs[i], lens[i]);
      fill(local, lens[i], 100 + i);
      CHECK_OK(mx_iput(e0, local, lens[i], to1, dst_addr + offs[i], CTX(20 + i), &req));
      CHECK(t_wait(e0, &req, &st) && st.code == MX_STATUS_SUCCESS && st.context == CTX(20 + i),
            "put %u+%u: status %d", offs[i], lens[i], st.code);
      CHECK(verify(dst + offs[i], lens[i], 100 + i) < 0, "put %u+%u: data", offs[i], lens[i]);
    }
    /* refused: outside, past the end, wrong permission; nothing is touched */
    unsigned char before[100000];
    memcpy(before, dst, sizeof dst);
    uint64_t bad_get[] = {src_addr + sizeof src - 5, dst_addr, src_addr - 64};
    for (int i = 0; i < 3; i++) {
      CHECK_OK(mx_iget(e0, local, 10, to1, bad_get[i], NULL, &req));
      CHECK(t_wait(e0, &req, &st) && st.code == MX_STATUS_BAD_RDMAWIN && st.xfer_length == 0,
            "refused get %d: status %d", i, st.code);
    }
    uint64_t bad_put[] = {dst_addr + sizeof dst - 1, src_addr, dst_addr - 1};
    for (int i = 0; i < 3; i++) {
      CHECK_OK(mx_iput(e0, local, 2, to1, bad_put[i], NULL, &req));
      CHECK(t_wait(e0, &req, &st) && st.code == MX_STATUS_BAD_RDMAWIN, "refused put %d: status %d", i,
            st.code);
    }
    CHECK(memcmp(before, dst, sizeof dst) == 0, "a refused put changed exposed memory");
    CHECK(verify(src, sizeof src, 77) < 0, "a put changed read-only memory");
    /* withdrawn: refused */
    CHECK_OK(omx_unexpose_region(e1, 1));
    CHECK_OK(mx_iget(e0, local, 10, to1, src_addr, NULL, &req));
    CHECK(t_wait(e0, &req, &st) && st.code == MX_STATUS_BAD_RDMAWIN, "get after unexpose: %d", st.code);
    CHECK_OK(omx_unexpose_region(e1, 2));
  }
  CHECK_ERR(mx_iget(e0, NULL, 8, to1, 0, NULL, &req), MX_BAD_SEG_LIST);
  /* the deprecated unexpected callback is told about unexpected messages */
  CHECK_OK(mx_register_unexp_callback(e1, callback, CTX(3)));
  {
    char sb[32], rb[32];
    mx_status_t st;
    fill(sb, sizeof sb, 5);
    mx_request_t sr = t_send(e0, to1, sb, sizeof sb, 0x77, NULL);
    t_wait(e0, &sr, NULL);
    for (int i = 0; i < 2000 && !cb_calls; i++) mx_progress(e1);
    CHECK(cb_calls == 1 && cb_match == 0x77, "callback calls %d", cb_calls);
    mx_request_t rr = t_recv(e1, rb, sizeof rb, 0x77, MX_MATCH_MASK_NONE, NULL);
    CHECK(t_wait(e1, &rr, &st) && verify(rb, sizeof rb, 5) < 0, "message kept after the callback");
    CHECK_OK(mx_register_unexp_callback(e1, NULL, NULL));
  }
  mx_set_error_handler(record_handler);
  /* nothing completes from them */
  {
    mx_status_t st;
    uint32_t result = 5;
    CHECK_OK(mx_wait_any(e0, 100, 0, 0, &st, &result));
    CHECK(result == 0, "a refused call left a completion");
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
