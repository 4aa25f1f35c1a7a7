/*
 * raw_io.c - a mapper-style program that includes only mx_raw.h and mx_io.h
 * (as MX's raw tools did) plus <stdio.h>; NULL and the 64-bit format macros
 * come from the MX headers. Built and linked, not run.
 */
#include <stdio.h>

#include "mx_io.h"
#include "mx_raw.h"

int main(void) {
  mx_raw_endpoint_t raw;
  mx_endpt_handle_t handle = MX__INVALID_HANDLE;
  mx_mapper_state_t state;
  uint64_t nic_id = 0;
  if (mx_init() != MX_SUCCESS)
    return EXIT_FAILURE;
  if (mx_open_board(0, &handle) == MX_SUCCESS && mx__get_mapper_state(handle, &state) == MX_SUCCESS)
    printf("map version %" PRIu32 "\n", state.map_version);
  if (mx_raw_open_endpoint(0, NULL, 0, &raw) != MX_SUCCESS)
    exit(EXIT_FAILURE);
  mx_board_number_to_nic_id(0, &nic_id);
  printf("board 0: %012" PRIx64 "\n", nic_id);
  mx_raw_close_endpoint(raw);
  mx_finalize();
  return 0;
}
