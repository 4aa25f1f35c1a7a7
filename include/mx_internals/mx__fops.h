/*
 * mx_internals/mx__fops.h - an empty MX-internal header of omx.
 *
 * MX shipped it and Open MPI's configure includes it to decide whether the MX
 * internal entry points (mx_open_board, mx__get_mapper_state in mx_io.h) may be
 * used; it declares nothing.
 */

#ifndef MX__FOPS_H
#define MX__FOPS_H

#endif /* MX__FOPS_H */
