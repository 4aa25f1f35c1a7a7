/*
 * usage.c - a typical MX client, only compiled (never linked or run).
 *
 * Checks that the macros and types of the headers work the way MX programs
 * use them, in C and in C++ (compile_all.sh builds it with -x c++ too).
 */

#include <stdio.h>
#include <string.h>

#include "myriexpress.h"
#include "mx_extensions.h"
#include "mx_raw.h"

static mx_unexp_handler_action_t on_unexpected(void *context,
                                               mx_endpoint_addr_t source,
                                               uint64_t match_value,
                                               uint32_t length, void *data) {
  (void)context;
  (void)source;
  (void)match_value;
  (void)length;
  return data != NULL ? MX_RECV_FINISHED : MX_RECV_CONTINUE;
}

int client(uint32_t board, uint64_t peer_nic);
int client(uint32_t board, uint64_t peer_nic) {
  mx_endpoint_t ep;
  mx_endpoint_addr_t peer;
  mx_param_t param[2];
  mx_segment_t seg[2];
  mx_request_t req;
  mx_status_t status;
  uint32_t result = 0, count = 0;
  char host[MX_MAX_HOSTNAME_LEN];
  static char buf[64], region[4096];
  mx_return_t ret;

  mx_set_error_handler(MX_ERRORS_RETURN);
  ret = mx_init();
  if (ret != MX_SUCCESS) {
    printf("mx_init: %s\n", mx_strerror(ret));
    return 1;
  }
  memset(param, 0, sizeof(param));
  param[0].key = MX_PARAM_CONTEXT_ID;
  param[0].val.context_id.bits = 8;
  param[0].val.context_id.shift = 56;
  param[1].key = MX_PARAM_ERROR_HANDLER;
  param[1].val.error_handler = MX_ERRORS_ARE_FATAL;
  if (mx_open_endpoint(board == 0 ? MX_ANY_NIC : board, MX_ANY_ENDPOINT, 42,
                       param, 2, &ep) != MX_SUCCESS)
    return 1;
  mx_register_unexp_handler(ep, on_unexpected, NULL);
  mx_get_info(ep, MX_NIC_COUNT, NULL, 0, &count, sizeof(count));
  if (mx_nic_id_to_hostname(peer_nic, host) == MX_SUCCESS)
    printf("peer %s (%08x%08x)\n", host, MX_U32(peer_nic), MX_L32(peer_nic));
  if (mx_connect(ep, peer_nic, 0, 42, MX_INFINITE, &peer) != MX_SUCCESS)
    return 1;
  omx_expose_region(ep, region, sizeof(region), 1,
                    OMX_REGION_READ | OMX_REGION_WRITE);
  seg[0].segment_ptr = buf;
  seg[0].segment_length = sizeof(buf) / 2;
  seg[1].segment_ptr = buf + sizeof(buf) / 2;
  seg[1].segment_length = sizeof(buf) / 2;
  mx_isend(ep, seg, 2, peer, 0x0100000000000001ULL, NULL, &req);
  mx_wait(ep, &req, MX_INFINITE, &status, &result);
  mx_irecv(ep, seg, 1, 0x0100000000000002ULL, MX_MATCH_MASK_NONE, buf, &req);
  mx_test(ep, &req, &status, &result);
  if (result && status.code != MX_STATUS_SUCCESS)
    printf("%s: %u of %u bytes\n", mx_strstatus(status.code),
           status.xfer_length, status.msg_length);
  mx_forget(ep, &req);
  mx_set_request_timeout(ep, NULL, 1000);
  omx_unexpose_region(ep, 1);
  mx_disconnect(ep, peer);
  mx_close_endpoint(ep);
  mx_finalize();
  return count == 0;
}
