/* large_lo.c - large messages between two endpoints of one process on the
 * loopback interface complete promptly: 2, 4 and 8 MiB rendezvous, each
 * expected well under a second (a lost frame recovered by the 1 s pull
 * retransmission shows up as a stall of about 1 s). Data are checked. */
#include "common.h"

int main(void) {
  static const uint32_t lens[] = {1u << 20, 2u << 20, 4u << 20, 4u << 20, 8u << 20};
  t_init();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);
  unsigned char *s = xmalloc(8u << 20), *r = xmalloc(8u << 20);
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint32_t len = lens[i];
    mx_status_t st;
    fill(s, len, (uint32_t)i);
    memset(r, 0, len);
    double t0 = now_ms();
    mx_request_t rr = t_recv(e1, r, len, 0x10 + i, MX_MATCH_MASK_NONE, NULL);
    mx_request_t sr = t_send(e0, to1, s, len, 0x10 + i, NULL);
    CHECK(t_wait(e1, &rr, &st) && st.code == MX_STATUS_SUCCESS && st.xfer_length == len,
          "%u bytes: receive", len);
    CHECK(t_wait(e0, &sr, &st) && st.code == MX_STATUS_SUCCESS, "%u bytes: send", len);
    double el = now_ms() - t0;
    CHECK(verify(r, len, (uint32_t)i) < 0, "%u bytes: data", len);
    CHECK(el < 500, "%u bytes over lo took %.0f ms (retransmission stall?)", len, el);
  }
  free(s);
  free(r);
  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
