/*
 * nic_id.c - an MX program written for the original's headers. Besides
 * <stdio.h> it includes only myriexpress.h and relies on what that header
 * brought in: <inttypes.h> (PRIx64, SCNx64) and <stdlib.h> (malloc, exit).
 * Reads a NIC id in hex and prints it back with PRIx64 and MX_U32/MX_L32.
 */
#include <stdio.h>

#include "myriexpress.h"

int main(int argc, char **argv) {
  uint64_t nic_id = 0;
  char *text;
  const char *arg = argc > 1 ? argv[1] : "0x0002c9a1b2c3";
  if (sscanf(arg, "%" SCNx64, &nic_id) != 1)
    exit(EXIT_FAILURE);
  text = (char *)malloc(MX_MAX_HOSTNAME_LEN);
  if (text == NULL)
    abort();
  snprintf(text, MX_MAX_HOSTNAME_LEN, "%012" PRIx64, nic_id);
  printf("%s %08x%08x %" PRIu64 "\n", text, MX_U32(nic_id), MX_L32(nic_id), nic_id);
  free(text);
  return 0;
}
