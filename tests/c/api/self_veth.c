/* self_veth.c - an endpoint talking to itself on a real interface (the veth
 * omx0 of host h0, no OMX_IFACES): after mx_connect to its own address,
 * messages of every size class must arrive with the right status and data,
 * as they do on lo (sendrecv.c covers self sends there). */
#include "common.h"

int main(void) {
  static const uint32_t lens[] = {0, 100, 5000, 32768, 32769, 100000, 1u << 20};
  mx_endpoint_addr_t self;
  uint64_t nic;
  char name[MX_MAX_HOSTNAME_LEN];

  t_init();
  nic = t_nic();
  CHECK_OK(mx_nic_id_to_hostname(nic, name));
  CHECK(strcmp(name, "localhost") != 0, "running on lo (board %s), not on a real interface", name);
  mx_endpoint_t ep = t_open(0, TKEY);
  CHECK_OK(mx_connect(ep, nic, 0, TKEY, 5000, &self));
  CHECK(t_addr_eid(self, NULL) == 0, "self address");
  unsigned char *s = xmalloc(1u << 20), *r = xmalloc(1u << 20);
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint32_t len = lens[i], res = 0;
    mx_status_t st;
    fill(s, len, (uint32_t)i);
    memset(r, 0, len);
    mx_request_t rr = t_recv(ep, r, len, 0x10 + i, MX_MATCH_MASK_NONE, CTX(1));
    mx_request_t sr = t_send(ep, self, s, len, 0x10 + i, CTX(2));
    CHECK_OK(mx_wait(ep, &rr, 1500, &st, &res));
    if (!res) {
      CHECK(0, "self message of %u bytes on %s never arrived", len, name);
      CHECK_OK(mx_cancel(ep, &rr, &res));
      mx_forget(ep, &sr);
      continue;
    }
    CHECK_STATUS(st, MX_STATUS_SUCCESS, 0x10 + i, len, len, CTX(1));
    CHECK(verify(r, len, (uint32_t)i) < 0, "self message of %u bytes: data", len);
    res = 0;
    CHECK_OK(mx_wait(ep, &sr, 3000, &st, &res));
    CHECK(res == 1 && st.code == MX_STATUS_SUCCESS, "self send of %u bytes", len);
  }
  free(s);
  free(r);
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
  DONE();
}
