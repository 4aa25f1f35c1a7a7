/*
 * extensions.c - an MX program that includes only mx_extensions.h (and
 * <stdio.h>): iconnect, forget, the unexpected handler, a 64-bit match value
 * printed with PRIx64. Built and linked, not run.
 */
#include <stdio.h>

#include "mx_extensions.h"

static mx_unexp_handler_action_t handler(void *context, mx_endpoint_addr_t source,
                                         uint64_t match_value, uint32_t length,
                                         void *data_if_available) {
  (void)context;
  (void)source;
  (void)data_if_available;
  printf("unexpected %" PRIx64 " (%" PRIu32 " bytes)\n", match_value, length);
  return MX_RECV_CONTINUE;
}

int main(int argc, char **argv) {
  mx_endpoint_t ep;
  mx_request_t req;
  uint64_t nic_id = 0;
  mx_return_t ret;
  if (argc < 2 || sscanf(argv[1], "%" SCNx64, &nic_id) != 1)
    return EXIT_FAILURE;
  ret = mx_init();
  if (ret != MX_SUCCESS)
    return EXIT_FAILURE;
  ret = mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, 0x1234, NULL, 0, &ep);
  if (ret != MX_SUCCESS)
    exit(EXIT_FAILURE);
  mx_register_unexp_handler(ep, handler, NULL);
  if (mx_iconnect(ep, nic_id, 0, 0x1234, 0, NULL, &req) == MX_SUCCESS)
    mx_forget(ep, &req);
  mx_close_endpoint(ep);
  mx_finalize();
  return 0;
}
