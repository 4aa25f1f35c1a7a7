/* probe.c - mx_iprobe / mx_probe: report the oldest matching unexpected
 * message (source, match_info, msg_length) without consuming it - it stays
 * until a receive takes it; masks select; messages matched by a posted
 * receive are never reported; eager and rendezvous messages. */
#include "common.h"

int main(void) {
  static unsigned char sb[300000], rb[300000];
  mx_status_t st;
  uint32_t result;
  uint64_t nic;

  t_init();
  nic = t_nic();
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY), e2 = t_open(2, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY), from2 = t_connect(e2, 1, TKEY);

  /* nothing yet */
  result = 5;
  CHECK_OK(mx_iprobe(e1, 0, 0, &st, &result));
  CHECK(result == 0, "iprobe on an empty endpoint: %u", result);

  /* one eager message from e0, one rendezvous from e2 */
  fill(sb, 100, 1);
  mx_request_t s1 = t_send(e0, to1, sb, 100, 0xa1, CTX(1));
  fill(sb + 1000, 250000, 2);
  mx_request_t s2 = t_send(e2, from2, sb + 1000, 250000, 0xb2, CTX(2));

  result = 0;
  memset(&st, 0, sizeof st);
  CHECK_OK(mx_probe(e1, 5000, 0xa1, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1, "probe for 0xa1 found nothing");
  CHECK(st.code == MX_STATUS_SUCCESS && st.match_info == 0xa1 && st.msg_length == 100,
        "probe status: code %d match %#" PRIx64 " length %u", (int)st.code, st.match_info,
        st.msg_length);
  CHECK_SOURCE(st, nic, 0);
  result = 0;
  CHECK_OK(mx_probe(e1, 5000, 0xb2, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1 && st.match_info == 0xb2 && st.msg_length == 250000,
        "probe of the rendezvous: result %u length %u", result, st.msg_length);
  CHECK_SOURCE(st, nic, 2);

  /* probing again: still there (not consumed), repeatedly */
  for (int i = 0; i < 5; i++) {
    result = 0;
    CHECK_OK(mx_iprobe(e1, 0xa1, MX_MATCH_MASK_NONE, &st, &result));
    CHECK(result == 1 && st.msg_length == 100, "iprobe %d: message consumed", i);
  }
  /* masks: the oldest matching one */
  result = 0;
  CHECK_OK(mx_iprobe(e1, 0, 0, &st, &result));
  CHECK(result == 1 && st.match_info == 0xa1, "wildcard iprobe: oldest is %#" PRIx64,
        st.match_info);
  result = 0;
  CHECK_OK(mx_iprobe(e1, 0xb0, 0xf0, &st, &result));
  CHECK(result == 1 && st.match_info == 0xb2, "iprobe mask 0xf0: %#" PRIx64, st.match_info);
  result = 5;
  CHECK_OK(mx_iprobe(e1, 0xc0, 0xf0, &st, &result));
  CHECK(result == 0, "iprobe for 0xc? found %#" PRIx64, st.match_info);
  /* another endpoint sees nothing */
  result = 5;
  CHECK_OK(mx_iprobe(e0, 0, 0, &st, &result));
  CHECK(result == 0, "iprobe on the sender found a message");

  /* receive the eager one: gone from probes, the other stays */
  mx_request_t r = t_recv(e1, rb, 100, 0xa1, MX_MATCH_MASK_NONE, CTX(3));
  CHECK(t_wait(e1, &r, &st), "receive of the probed message");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0xa1, 100, 100, CTX(3));
  CHECK(verify(rb, 100, 1) < 0, "data of the probed message");
  result = 5;
  CHECK_OK(mx_iprobe(e1, 0xa1, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 0, "received message still probed");
  result = 0;
  CHECK_OK(mx_iprobe(e1, 0, 0, &st, &result));
  CHECK(result == 1 && st.match_info == 0xb2, "remaining message not probed");

  /* the rendezvous stays pending for the sender until received */
  {
    mx_status_t ss;
    result = 5;
    CHECK_OK(mx_test(e2, &s2, &ss, &result));
    CHECK(result == 0, "rendezvous send completed while only probed");
  }
  r = t_recv(e1, rb, sizeof rb, 0xb2, MX_MATCH_MASK_NONE, CTX(4));
  CHECK(t_wait(e1, &r, &st), "receive of the probed rendezvous");
  CHECK_STATUS(st, MX_STATUS_SUCCESS, 0xb2, 250000, 250000, CTX(4));
  CHECK(verify(rb, 250000, 2) < 0, "data of the probed rendezvous");
  CHECK(t_wait(e0, &s1, &st) && t_wait(e2, &s2, &st), "sends");
  result = 5;
  CHECK_OK(mx_iprobe(e1, 0, 0, &st, &result));
  CHECK(result == 0, "iprobe after everything was received");

  /* a message taken by a posted receive is never probed */
  r = t_recv(e1, rb, 100, 0xd4, MX_MATCH_MASK_NONE, NULL);
  s1 = t_send(e0, to1, sb, 10, 0xd4, NULL);
  CHECK(t_wait(e1, &r, &st), "expected receive");
  result = 5;
  CHECK_OK(mx_probe(e1, 100, 0xd4, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 0, "a message matched by a posted receive was probed");
  t_wait(e0, &s1, NULL);

  /* zero-length message */
  s1 = t_send(e0, to1, sb, 0, 0xe5, NULL);
  result = 0;
  CHECK_OK(mx_probe(e1, 5000, 0xe5, MX_MATCH_MASK_NONE, &st, &result));
  CHECK(result == 1 && st.msg_length == 0, "probe of an empty message");
  r = t_recv(e1, rb, 0, 0xe5, MX_MATCH_MASK_NONE, NULL);
  CHECK(t_wait(e1, &r, &st) && st.code == MX_STATUS_SUCCESS, "empty message received");
  t_wait(e0, &s1, NULL);

  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  CHECK_OK(mx_close_endpoint(e2));
  mx_finalize();
  DONE();
}
