/*
 * mx_io.h - MX-internal device-level declarations of omx.
 *
 * Kept for programs (fabric tools, MPI configure probes) that use the
 * lower-level MX entry points: device handles and the mapper state.
 */

#ifndef MX_IO_H
#define MX_IO_H

#include <stdint.h>
#include <stdlib.h> /* NULL, which Open MPI's configure probe of this header uses */

#include "myriexpress.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Value of an invalid mx_endpt_handle_t. */
#define MX__INVALID_HANDLE (-1)

/* Device handle (a file descriptor; for mx_raw_handle() the raw device's). */
typedef int mx_endpt_handle_t;

/* Fabric mapping state of a board (36 bytes, alignment 4). */
typedef struct {
  uint32_t board_number;
  uint8_t mapper_mac[6]; /* mapper id, most significant byte first */
  uint16_t iport;
  uint32_t map_version;
  uint32_t num_hosts;
  uint32_t network_configured;
  uint32_t routes_valid;
  uint32_t level;
  uint32_t flags;
} mx_mapper_state_t;

/* Obtain a device handle for a board (kept for compatibility; does nothing). */
mx_return_t mx_open_board(int board_number, mx_endpt_handle_t *handle);

/* Read the mapping state of a board (map_version and mapper_mac are filled). */
mx_return_t mx__get_mapper_state(mx_endpt_handle_t handle,
                                 mx_mapper_state_t *state);

#ifdef __cplusplus
}
#endif

#endif /* MX_IO_H */
