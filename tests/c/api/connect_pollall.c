/* connect_pollall.c - OMX_CONNECT_POLLALL=1 in a process without a progress
 * thread (OMX_PROGRESS_THREAD=0) whose two endpoints reach each other over the
 * network (OMX_DISABLE_SHARED=1, on lo): a blocking mx_connect from one to the
 * other succeeds, because it makes progress on the other endpoint while it
 * waits (without the setting nothing answers the connect until its timeout,
 * the deadlock the original's knob avoids); the reverse connect and a message
 * each way then work. */
#include "common.h"

int main(void) {
  setenv("OMX_CONNECT_POLLALL", "1", 1);
  setenv("OMX_PROGRESS_THREAD", "0", 1);
  setenv("OMX_DISABLE_SHARED", "1", 1);
  t_init();
  mx_endpoint_t a = t_open(1, TKEY), b = t_open(2, TKEY);
  mx_endpoint_addr_t own;
  uint64_t nic = 0;
  uint32_t eid = 0;
  CHECK_OK(mx_get_endpoint_addr(b, &own));
  CHECK_OK(mx_decompose_endpoint_addr(own, &nic, &eid));

  mx_endpoint_addr_t to_b, to_a;
  REQUIRE(mx_connect(a, nic, 2, TKEY, (uint32_t)time_limit_ms(20000), &to_b) == MX_SUCCESS,
          "blocking connect from endpoint 1 to endpoint 2 of the same process");
  REQUIRE(mx_connect(b, nic, 1, TKEY, (uint32_t)time_limit_ms(20000), &to_a) == MX_SUCCESS,
          "blocking connect back");

  char out[100], in[100];
  mx_endpoint_t from[2] = {a, b}, into[2] = {b, a};
  mx_endpoint_addr_t dest[2] = {to_b, to_a};
  for (int k = 0; k < 2; k++) {
    fill(out, sizeof out, (uint32_t)k);
    memset(in, 0, sizeof in);
    mx_segment_t rs = {in, sizeof in}, ss = {out, sizeof out};
    mx_request_t rr, sr;
    mx_status_t st;
    uint32_t result = 0;
    CHECK_OK(mx_irecv(into[k], &rs, 1, 0x55, MX_MATCH_MASK_NONE, NULL, &rr));
    CHECK_OK(mx_isend(from[k], &ss, 1, dest[k], 0x55, NULL, &sr));
    /* No progress thread: poll both until both requests are done. */
    int got_r = 0, got_s = 0;
    double until = now_ms() + time_limit_ms(20000);
    while ((!got_r || !got_s) && now_ms() < until) {
      if (!got_s && mx_test(from[k], &sr, &st, &result) == MX_SUCCESS && result)
        got_s = 1;
      if (!got_r && mx_test(into[k], &rr, &st, &result) == MX_SUCCESS && result) {
        got_r = 1;
        CHECK(st.msg_length == sizeof out && verify(in, sizeof in, (uint32_t)k) < 0,
              "message %d: %u bytes, content differs", k, st.msg_length);
      }
    }
    CHECK(got_r && got_s, "message %d: receive %d, send %d", k, got_r, got_s);
  }
  mx_close_endpoint(a);
  mx_close_endpoint(b);
  mx_finalize();
  DONE();
}
