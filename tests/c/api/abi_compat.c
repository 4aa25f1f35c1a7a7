/* abi_compat.c - binary compatibility: run.sh compiles this once without an
 * rpath and runs it against build/lib through LD_LIBRARY_PATH (with
 * LD_BIND_NOW=1, from a directory holding only libmyriexpress.so.0); it
 * checks that it references the versioned entry points (mx_open_endpoint and
 * mx_decompose_endpoint_addr@MX_0.9, mx_get_info, mx_test, mx_wait and
 * mx_iprobe@MX_0.91, mx__init_api@MX_0.92) and that they work. */
#include "common.h"

int main(void) {
  mx_endpoint_t ep;
  mx_endpoint_addr_t self, own;
  uint64_t nic = 0, n2 = 0;
  uint32_t eid = 9, v = 0, result = 0;
  char s[100], r[100];
  mx_segment_t ss = {s, sizeof s}, rs = {r, sizeof r};
  mx_request_t sr, rr;
  mx_status_t st;

  CHECK_OK(mx__init_api(MX_API)); /* MX_0.92 */
  mx_set_error_handler(MX_ERRORS_RETURN);
  CHECK_OK(mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, TKEY, NULL, 0, &ep)); /* MX_0.9 */
  CHECK_OK(mx_get_info(ep, MX_NIC_COUNT, NULL, 0, &v, sizeof v)); /* MX_0.91 */
  CHECK(v >= 1, "MX_NIC_COUNT %u", v);
  CHECK_OK(mx_board_number_to_nic_id(0, &nic));
  CHECK_OK(mx_get_endpoint_addr(ep, &own));
  CHECK_OK(mx_decompose_endpoint_addr(own, &n2, &eid)); /* MX_0.9 */
  CHECK(n2 == nic && eid < 32, "own address %#" PRIx64 "/%u", n2, eid);
  CHECK_OK(mx_connect(ep, nic, eid, TKEY, 5000, &self));
  fill(s, sizeof s, 1);
  CHECK_OK(mx_isend(ep, &ss, 1, self, 0x42, NULL, &sr));
  CHECK_OK(mx_iprobe(ep, 0x42, MX_MATCH_MASK_NONE, &st, &result)); /* MX_0.91 */
  CHECK_OK(mx_irecv(ep, &rs, 1, 0x42, MX_MATCH_MASK_NONE, NULL, &rr));
  result = 0;
  CHECK_OK(mx_wait(ep, &rr, 5000, &st, &result)); /* MX_0.91 */
  CHECK(result == 1 && st.code == MX_STATUS_SUCCESS && st.xfer_length == sizeof r &&
            verify(r, sizeof r, 1) < 0,
        "self message through the versioned entry points");
  result = 0;
  for (int i = 0; i < 5000 && !result; i++) {
    CHECK_OK(mx_test(ep, &sr, &st, &result)); /* MX_0.91 */
    if (!result)
      sleep_ms(1);
  }
  CHECK(result == 1 && st.code == MX_STATUS_SUCCESS, "send via mx_test");
  CHECK_OK(mx_close_endpoint(ep));
  CHECK_OK(mx_finalize());
  DONE();
}
