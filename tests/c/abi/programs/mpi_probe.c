/*
 * mpi_probe.c - what Open MPI's configure compiles to decide that MX's
 * internal entry points exist: the two mx_internals headers, mx_io.h for NULL
 * and the prototypes. Built and linked, not run.
 */
#include <myriexpress.h>
#include <mx_io.h>
#include <mx_internals/mx__driver_interface.h>
#include <mx_internals/mx__fops.h>

int main(void) {
  mx_endpt_handle_t handle;
  mx_mapper_state_t state;
  void *unused = NULL;
  (void)unused;
  if (mx_open_board(0, &handle) != MX_SUCCESS)
    return 1;
  return mx__get_mapper_state(handle, &state) == MX_SUCCESS ? 0 : 1;
}
