/*
 * layout.c - checks the MX headers of omx against the MX ABI.
 *
 * Every structure size, alignment and member offset, every enumeration
 * value, every #define constant and every function prototype is compared
 * with the values of the interface specification (x86-64 and i386 tables).
 *
 * Built normally (C11, hosted), it checks at run time, prints each mismatch
 * and ends with "N passed, M failed" (exit status 1 on any failure).
 * Built with -DLAYOUT_STATIC_ONLY, every check is a _Static_assert instead,
 * so the checks also run where only a compiler (no C library) exists for
 * the target, e.g. "gcc -m32 -ffreestanding -fsyntax-only".
 */

#include <stddef.h>
#include <stdint.h>

#include "myriexpress.h"
#include "mx_extensions.h"
#include "mx_io.h"
#include "mx_raw.h"
#include "open-mx.h"

#if defined(__x86_64__) && defined(__LP64__)
#define ABI_NAME "x86-64"
#define HAVE_LAYOUT 1
#define PICK(lp64, ilp32) (lp64)
#elif defined(__i386__)
#define ABI_NAME "i386"
#define HAVE_LAYOUT 1
#define PICK(lp64, ilp32) (ilp32)
#else
#define ABI_NAME "unknown ABI (layouts not checked)"
#define HAVE_LAYOUT 0
#define PICK(lp64, ilp32) (lp64)
#endif

#ifdef LAYOUT_STATIC_ONLY

#define CHECK(name, actual, expected) \
  _Static_assert((actual) == (expected), name)

#else /* run-time checks */

#include <stdio.h>
#include <string.h>

static unsigned passed, failed;

static void check(const char *name, unsigned long long actual,
                  unsigned long long expected) {
  if (actual == expected) {
    passed++;
  } else {
    failed++;
    printf("FAIL %s: got %llu (0x%llx), expected %llu (0x%llx)\n", name,
           actual, actual, expected, expected);
  }
}

#define CHECK(name, actual, expected) \
  check(name, (unsigned long long)(actual), (unsigned long long)(expected))

#endif

#define VAL(name, expected) CHECK(#name, name, expected)
#define SIZE(T, lp64, ilp32) CHECK("sizeof(" #T ")", sizeof(T), PICK(lp64, ilp32))
#define ALIGN(T, lp64, ilp32) \
  CHECK("_Alignof(" #T ")", _Alignof(T), PICK(lp64, ilp32))
#define OFF(T, m, lp64, ilp32) \
  CHECK("offsetof(" #T ", " #m ")", offsetof(T, m), PICK(lp64, ilp32))
/* The function (or object) has exactly the type the specification gives.
 * The operand of _Generic is not evaluated: no symbol is referenced. */
#define PROTO(f, type) \
  CHECK("prototype of " #f, _Generic(&(f), type: 1, default: 0), 1)
/* A typedef names exactly the type the specification gives. */
#define TYPE_IS(T, type) \
  CHECK("type of " #T, _Generic((T)0, type: 1, default: 0), 1)

static void check_layouts(void) {
#if HAVE_LAYOUT
  /* mx_endpoint_addr_t: 16 bytes, align 8 (x86-64) / 4 (i386). */
  SIZE(mx_endpoint_addr_t, 16, 16);
  ALIGN(mx_endpoint_addr_t, 8, 4);
  OFF(mx_endpoint_addr_t, stuff, 0, 0);
  CHECK("sizeof(mx_endpoint_addr_t) == MX_SIZEOF_ADDR",
        sizeof(mx_endpoint_addr_t), MX_SIZEOF_ADDR);

  /* mx_segment_t */
  SIZE(mx_segment_t, 16, 8);
  ALIGN(mx_segment_t, 8, 4);
  OFF(mx_segment_t, segment_ptr, 0, 0);
  OFF(mx_segment_t, segment_length, 8, 4);
  /* omx_typed_segment_t (mx_extensions.h): the same on both ABIs. */
  SIZE(omx_typed_segment_t, 40, 40);
  OFF(omx_typed_segment_t, type, 0, 0);
  OFF(omx_typed_segment_t, fd, 4, 4);
  OFF(omx_typed_segment_t, pid, 8, 8);
  OFF(omx_typed_segment_t, reserved, 12, 12);
  OFF(omx_typed_segment_t, addr, 16, 16);
  OFF(omx_typed_segment_t, offset, 24, 24);
  OFF(omx_typed_segment_t, length, 32, 32);
  SIZE(mx_segment_ptr_t, 8, 4);

  /* mx_status_t */
  SIZE(mx_status_t, 48, 40);
  SIZE(struct mx_status, 48, 40);
  ALIGN(mx_status_t, 8, 4);
  OFF(mx_status_t, code, 0, 0);
  OFF(mx_status_t, source, 8, 4);
  OFF(mx_status_t, match_info, 24, 20);
  OFF(mx_status_t, msg_length, 32, 28);
  OFF(mx_status_t, xfer_length, 36, 32);
  OFF(mx_status_t, context, 40, 36);

  /* mx_param_t */
  SIZE(mx_param_t, 16, 8);
  ALIGN(mx_param_t, 8, 4);
  OFF(mx_param_t, key, 0, 0);
  OFF(mx_param_t, val, 8, 4);
  OFF(mx_param_t, val.error_handler, 8, 4);
  OFF(mx_param_t, val.unexp_queue_max, 8, 4);
  OFF(mx_param_t, val.context_id, 8, 4);
  OFF(mx_param_t, val.context_id.bits, 8, 4);
  OFF(mx_param_t, val.context_id.shift, 9, 5);

  /* mx_mapper_state_t (mx_io.h): 36 bytes on both. */
  SIZE(mx_mapper_state_t, 36, 36);
  ALIGN(mx_mapper_state_t, 4, 4);
  OFF(mx_mapper_state_t, board_number, 0, 0);
  OFF(mx_mapper_state_t, mapper_mac, 4, 4);
  OFF(mx_mapper_state_t, iport, 10, 10);
  OFF(mx_mapper_state_t, map_version, 12, 12);
  OFF(mx_mapper_state_t, num_hosts, 16, 16);
  OFF(mx_mapper_state_t, network_configured, 20, 20);
  OFF(mx_mapper_state_t, routes_valid, 24, 24);
  OFF(mx_mapper_state_t, level, 28, 28);
  OFF(mx_mapper_state_t, flags, 32, 32);

  /* struct omx_raw_endpoint (mx_raw.h) */
  SIZE(struct omx_raw_endpoint, 8, 8);
  OFF(struct omx_raw_endpoint, board_index, 0, 0);
  OFF(struct omx_raw_endpoint, fd, 4, 4);

  /* Handles and scalar typedefs. */
  SIZE(mx_endpoint_t, 8, 4);
  SIZE(mx_request_t, 8, 4);
  SIZE(mx_raw_endpoint_t, 8, 4);
  SIZE(mx_error_handler_t, 8, 4);
  SIZE(mx_endpt_handle_t, 4, 4);
  SIZE(mx_raw_status_t, 4, 4);

  /* Enumerations are plain 4-byte C enums. */
  SIZE(mx_return_t, 4, 4);
  SIZE(mx_status_code_t, 4, 4);
  SIZE(mx_param_key_t, 4, 4);
  SIZE(mx_get_info_key_t, 4, 4);
  SIZE(mx_line_speed_t, 4, 4);
  SIZE(enum mx_net_type, 4, 4);
  SIZE(mx_unexp_handler_action_t, 4, 4);
  SIZE(mx_host_type_t, 4, 4);
#endif
}

static void check_defines(void) {
  VAL(MX_API, 0x301);
  VAL(MX_MAX_STR_LEN, 128);
  VAL(MX_SIZEOF_ADDR, 16);
  VAL(MX_ANY_NIC, 0xffffffffU);
  VAL(MX_ANY_ENDPOINT, 0xffffffffU);
  VAL(MX_INFINITE, 0);
  VAL(MX_CONTEXT_ID_BITS_MAX, 16);
  VAL(MX_MAX_SEGMENTS, 256);
  VAL(MX_MATCH_MASK_NONE, 0xffffffffffffffffULL);
  CHECK("sizeof(MX_MATCH_MASK_NONE)", sizeof(MX_MATCH_MASK_NONE), 8);
  VAL(MX_MAX_HOSTNAME_LEN, 80);
  CHECK("MX_U32(0x0123456789abcdef)", MX_U32(0x0123456789abcdefULL), 0x01234567U);
  CHECK("MX_L32(0x0123456789abcdef)", MX_L32(0x0123456789abcdefULL), 0x89abcdefU);
#ifdef MX_HAS_NET_TYPE
  CHECK("MX_HAS_NET_TYPE defined", 1, 1);
#else
  CHECK("MX_HAS_NET_TYPE defined", 0, 1);
#endif
  VAL(MX_HAS_ICONNECT_V2, 1);
  VAL(MX_RAW_POLL_SUPPORTED, 1);
  VAL(MX_RAW_NO_EVENT, 0);
  VAL(MX_RAW_SEND_COMPLETE, 1);
  VAL(MX_RAW_RECV_COMPLETE, 2);
  VAL(MX_DEAD_RECOVERABLE_SRAM_PARITY_ERROR, 10);
  VAL(MX_DEAD_SRAM_PARITY_ERROR, 11);
  VAL(MX_DEAD_WATCHDOG_TIMEOUT, 12);
  VAL(MX_DEAD_COMMAND_TIMEOUT, 13);
  VAL(MX_DEAD_ENDPOINT_CLOSE_TIMEOUT, 14);
  VAL(MX_DEAD_ROUTE_UPDATE_TIMEOUT, 15);
  VAL(MX_DEAD_PCI_PARITY_ERROR, 16);
  VAL(MX_DEAD_PCI_MASTER_ABORT, 17);
  VAL(MX_SET_ROUTE_TAKES_MAGID, 1);
  VAL(MX_HAS_RAW_LINE_SPEED, 1);
  VAL(MX_HAS_RAW_SET_NIC_REPLY_INFO, 1);
  VAL(MX__INVALID_HANDLE, -1);
  /* omx extension */
  VAL(OMX_HAS_EXPOSE_REGION, 1);
  VAL(OMX_REGION_READ, 1);
  VAL(OMX_REGION_WRITE, 2);
}

static void check_enums(void) {
  /* mx_return_t */
  VAL(MX_SUCCESS, 0);
  VAL(MX_BAD_BAD_BAD, 1);
  VAL(MX_FAILURE, 2);
  VAL(MX_ALREADY_INITIALIZED, 3);
  VAL(MX_NOT_INITIALIZED, 4);
  VAL(MX_NO_DEV, 5);
  VAL(MX_NO_DRIVER, 6);
  VAL(MX_NO_PERM, 7);
  VAL(MX_BOARD_UNKNOWN, 8);
  VAL(MX_BAD_ENDPOINT, 9);
  VAL(MX_BAD_SEG_LIST, 10);
  VAL(MX_BAD_SEG_MEM, 11);
  VAL(MX_BAD_SEG_CNT, 12);
  VAL(MX_BAD_REQUEST, 13);
  VAL(MX_BAD_MATCH_MASK, 14);
  VAL(MX_NO_RESOURCES, 15);
  VAL(MX_BAD_ADDR_LIST, 16);
  VAL(MX_BAD_ADDR_COUNT, 17);
  VAL(MX_BAD_ROOT, 18);
  VAL(MX_NOT_COMPLETED, 19);
  VAL(MX_BUSY, 20);
  VAL(MX_BAD_INFO_KEY, 21);
  VAL(MX_BAD_INFO_VAL, 22);
  VAL(MX_BAD_NIC, 23);
  VAL(MX_BAD_PARAM_LIST, 24);
  VAL(MX_BAD_PARAM_NAME, 25);
  VAL(MX_BAD_PARAM_VAL, 26);
  VAL(MX_BAD_HOSTNAME_ARGS, 27);
  VAL(MX_HOST_NOT_FOUND, 28);
  VAL(MX_REQUEST_PENDING, 29);
  VAL(MX_TIMEOUT, 30);
  VAL(MX_NO_MATCH, 31);
  VAL(MX_BAD_ENDPOINT_ID, 32);
  VAL(MX_CONNECTION_FAILED, 33);
  VAL(MX_BAD_CONNECTION_KEY, 34);
  VAL(MX_BAD_INFO_LENGTH, 35);
  VAL(MX_NIC_NOT_FOUND, 36);
  VAL(MX_BAD_KERNEL_VERSION, 37);
  VAL(MX_BAD_LIB_VERSION, 38);
  VAL(MX_NIC_DEAD, 39);
  VAL(MX_CANCEL_NOT_SUPPORTED, 40);
  VAL(MX_CLOSE_IN_HANDLER, 41);
  VAL(MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK, 42);
  VAL(MX_NOT_SUPPORTED_WITH_CONTEXT_ID, 43);

  /* mx_status_code_t */
  VAL(MX_STATUS_SUCCESS, 0);
  VAL(MX_STATUS_PENDING, 1);
  VAL(MX_STATUS_BUFFERED, 2);
  VAL(MX_STATUS_REJECTED, 3);
  VAL(MX_STATUS_TIMEOUT, 4);
  VAL(MX_STATUS_TRUNCATED, 5);
  VAL(MX_STATUS_CANCELLED, 6);
  VAL(MX_STATUS_ENDPOINT_UNKNOWN, 7);
  VAL(MX_STATUS_ENDPOINT_CLOSED, 8);
  VAL(MX_STATUS_ENDPOINT_UNREACHABLE, 9);
  VAL(MX_STATUS_BAD_SESSION, 10);
  VAL(MX_STATUS_BAD_KEY, 11);
  VAL(MX_STATUS_BAD_ENDPOINT, 12);
  VAL(MX_STATUS_BAD_RDMAWIN, 13);
  VAL(MX_STATUS_ABORTED, 14);
  VAL(MX_STATUS_EVENTQ_FULL, 15);
  VAL(MX_STATUS_NO_RESOURCES, 16);

  /* mx_param_key_t */
  VAL(MX_PARAM_ERROR_HANDLER, 0);
  VAL(MX_PARAM_UNEXP_QUEUE_MAX, 1);
  VAL(MX_PARAM_CONTEXT_ID, 2);

  /* mx_get_info_key_t */
  VAL(MX_NIC_COUNT, 1);
  VAL(MX_NIC_IDS, 2);
  VAL(MX_MAX_NATIVE_ENDPOINTS, 3);
  VAL(MX_NATIVE_REQUESTS, 4);
  VAL(MX_COUNTERS_COUNT, 5);
  VAL(MX_COUNTERS_LABELS, 6);
  VAL(MX_COUNTERS_VALUES, 7);
  VAL(MX_PRODUCT_CODE, 8);
  VAL(MX_PART_NUMBER, 9);
  VAL(MX_SERIAL_NUMBER, 10);
  VAL(MX_PORT_COUNT, 11);
  VAL(MX_PIO_SEND_MAX, 12);
  VAL(MX_COPY_SEND_MAX, 13);
  VAL(MX_NUMA_NODE, 14);
  VAL(MX_NET_TYPE, 15);
  VAL(MX_LINE_SPEED, 16);

  /* mx_line_speed_t, enum mx_net_type */
  VAL(MX_SPEED_2G, 0);
  VAL(MX_SPEED_10G, 1);
  VAL(MX_SPEED_OPEN_MX, 2);
  VAL(MX_NET_MYRI, 0);
  VAL(MX_NET_ETHER, 1);

  /* mx_unexp_handler_action_t */
  VAL(MX_RECV_CONTINUE, 0);
  VAL(MX_RECV_FINISHED, 1);

  /* mx_host_type_t */
  VAL(MX_HOST_GM, 1);
  VAL(MX_HOST_XM, 2);
  VAL(MX_HOST_MX, 3);
  VAL(MX_HOST_MXvM, 4);
}

/* Prototypes as written in the specification, parameter by parameter. */
static void check_prototypes(void) {
  /* myriexpress.h: library and endpoints */
  PROTO(mx__init_api, mx_return_t (*)(int));
  CHECK("sizeof(mx_init())", sizeof(mx_init()), sizeof(mx_return_t));
  PROTO(mx_finalize, mx_return_t (*)(void));
  PROTO(mx_set_error_handler, mx_error_handler_t (*)(mx_error_handler_t));
  PROTO(MX_ERRORS_ARE_FATAL, const mx_error_handler_t *);
  PROTO(MX_ERRORS_RETURN, const mx_error_handler_t *);
  PROTO(mx_open_endpoint, mx_return_t (*)(uint32_t, uint32_t, uint32_t,
                                          mx_param_t *, uint32_t,
                                          mx_endpoint_t *));
  PROTO(mx_close_endpoint, mx_return_t (*)(mx_endpoint_t));
  PROTO(mx_wakeup, mx_return_t (*)(mx_endpoint_t));
  PROTO(mx_disable_progression, mx_return_t (*)(mx_endpoint_t));
  PROTO(mx_reenable_progression, mx_return_t (*)(mx_endpoint_t));
  PROTO(mx_register_unexp_callback,
        mx_return_t (*)(mx_endpoint_t, mx_matching_callback_t, void *));
  /* myriexpress.h: communication */
  PROTO(mx_isend, mx_return_t (*)(mx_endpoint_t, mx_segment_t *, uint32_t,
                                  mx_endpoint_addr_t, uint64_t, void *,
                                  mx_request_t *));
  PROTO(mx_issend, mx_return_t (*)(mx_endpoint_t, mx_segment_t *, uint32_t,
                                   mx_endpoint_addr_t, uint64_t, void *,
                                   mx_request_t *));
  PROTO(mx_irecv, mx_return_t (*)(mx_endpoint_t, mx_segment_t *, uint32_t,
                                  uint64_t, uint64_t, void *, mx_request_t *));
  PROTO(mx_cancel, mx_return_t (*)(mx_endpoint_t, mx_request_t *, uint32_t *));
  PROTO(mx_test, mx_return_t (*)(mx_endpoint_t, mx_request_t *, mx_status_t *,
                                 uint32_t *));
  PROTO(mx_wait, mx_return_t (*)(mx_endpoint_t, mx_request_t *, uint32_t,
                                 mx_status_t *, uint32_t *));
  PROTO(mx_test_any, mx_return_t (*)(mx_endpoint_t, uint64_t, uint64_t,
                                     mx_status_t *, uint32_t *));
  PROTO(mx_wait_any, mx_return_t (*)(mx_endpoint_t, uint32_t, uint64_t,
                                     uint64_t, mx_status_t *, uint32_t *));
  PROTO(mx_ipeek, mx_return_t (*)(mx_endpoint_t, mx_request_t *, uint32_t *));
  PROTO(mx_peek, mx_return_t (*)(mx_endpoint_t, uint32_t, mx_request_t *,
                                 uint32_t *));
  PROTO(mx_iprobe, mx_return_t (*)(mx_endpoint_t, uint64_t, uint64_t,
                                   mx_status_t *, uint32_t *));
  PROTO(mx_probe, mx_return_t (*)(mx_endpoint_t, uint32_t, uint64_t, uint64_t,
                                  mx_status_t *, uint32_t *));
  PROTO(mx_ibuffered, mx_return_t (*)(mx_endpoint_t, mx_request_t *,
                                      uint32_t *));
  PROTO(mx_buffered, mx_return_t (*)(mx_endpoint_t, mx_request_t *, uint32_t,
                                     uint32_t *));
  PROTO(mx_context, mx_return_t (*)(mx_request_t *, void **));
  PROTO(mx_iput, mx_return_t (*)(mx_endpoint_t, void *, uint32_t,
                                 mx_endpoint_addr_t, uint64_t, void *,
                                 mx_request_t *));
  PROTO(mx_iget, mx_return_t (*)(mx_endpoint_t, void *, uint32_t,
                                 mx_endpoint_addr_t, uint64_t, void *,
                                 mx_request_t *));
  /* myriexpress.h: addressing */
  PROTO(mx_connect, mx_return_t (*)(mx_endpoint_t, uint64_t, uint32_t,
                                    uint32_t, uint32_t, mx_endpoint_addr_t *));
  PROTO(mx_get_endpoint_addr,
        mx_return_t (*)(mx_endpoint_t, mx_endpoint_addr_t *));
  PROTO(mx_decompose_endpoint_addr,
        mx_return_t (*)(mx_endpoint_addr_t, uint64_t *, uint32_t *));
  PROTO(mx_hostname_to_nic_id, mx_return_t (*)(char *, uint64_t *));
  PROTO(mx_nic_id_to_hostname, mx_return_t (*)(uint64_t, char *));
  PROTO(mx_board_number_to_nic_id, mx_return_t (*)(uint32_t, uint64_t *));
  PROTO(mx_nic_id_to_board_number, mx_return_t (*)(uint64_t, uint32_t *));
  /* myriexpress.h: information */
  PROTO(mx_get_info, mx_return_t (*)(mx_endpoint_t, mx_get_info_key_t, void *,
                                     uint32_t, void *, uint32_t));
  PROTO(mx_strerror, const char *(*)(mx_return_t));
  PROTO(mx_strstatus, const char *(*)(mx_status_code_t));

  /* mx_extensions.h */
  PROTO(mx_progress, mx_return_t (*)(mx_endpoint_t));
  PROTO(mx_register_unexp_handler,
        mx_return_t (*)(mx_endpoint_t, mx_unexp_handler_t, void *));
  PROTO(mx_forget, mx_return_t (*)(mx_endpoint_t, mx_request_t *));
  PROTO(mx_set_request_timeout,
        mx_return_t (*)(mx_endpoint_t, mx_request_t, uint32_t));
  PROTO(mx_iconnect, mx_return_t (*)(mx_endpoint_t, uint64_t, uint32_t,
                                     uint32_t, uint64_t, void *,
                                     mx_request_t *));
  PROTO(mx_disconnect, mx_return_t (*)(mx_endpoint_t, mx_endpoint_addr_t));
  PROTO(mx_decompose_endpoint_addr2,
        mx_return_t (*)(mx_endpoint_addr_t, uint64_t *, uint32_t *,
                        uint32_t *));
  PROTO(mx_set_endpoint_addr_context,
        mx_return_t (*)(mx_endpoint_addr_t, void *));
  PROTO(mx_get_endpoint_addr_context,
        mx_return_t (*)(mx_endpoint_addr_t, void **));
  PROTO(mx__regcache_clean, int (*)(void *, size_t));
  PROTO(omx_expose_region, mx_return_t (*)(mx_endpoint_t, void *, size_t,
                                           uint64_t, uint32_t));
  PROTO(omx_unexpose_region, mx_return_t (*)(mx_endpoint_t, uint64_t));
  PROTO(omx_isend_typed,
        mx_return_t (*)(mx_endpoint_t, omx_typed_segment_t *, uint32_t,
                        mx_endpoint_addr_t, uint64_t, void *, mx_request_t *));
  PROTO(omx_issend_typed,
        mx_return_t (*)(mx_endpoint_t, omx_typed_segment_t *, uint32_t,
                        mx_endpoint_addr_t, uint64_t, void *, mx_request_t *));
  PROTO(omx_irecv_typed,
        mx_return_t (*)(mx_endpoint_t, omx_typed_segment_t *, uint32_t,
                        uint64_t, uint64_t, void *, mx_request_t *));

  /* mx_io.h */
  PROTO(mx_open_board, mx_return_t (*)(int, mx_endpt_handle_t *));
  PROTO(mx__get_mapper_state,
        mx_return_t (*)(mx_endpt_handle_t, mx_mapper_state_t *));

  /* mx_raw.h */
  PROTO(mx_raw_handle, mx_endpt_handle_t (*)(mx_raw_endpoint_t));
  PROTO(mx_raw_open_endpoint, mx_return_t (*)(uint32_t, mx_param_t *, uint32_t,
                                              mx_raw_endpoint_t *));
  PROTO(mx_raw_close_endpoint, mx_return_t (*)(mx_raw_endpoint_t));
  PROTO(mx_raw_send, mx_return_t (*)(mx_raw_endpoint_t, uint32_t, void *,
                                     uint32_t, void *, uint32_t, void *));
  PROTO(mx_raw_next_event,
        mx_return_t (*)(mx_raw_endpoint_t, uint32_t *, void **, void *,
                        uint32_t *, uint32_t, mx_raw_status_t *));
  PROTO(mx_raw_set_route_begin, mx_return_t (*)(mx_raw_endpoint_t));
  PROTO(mx_raw_set_route_end, mx_return_t (*)(mx_raw_endpoint_t));
  PROTO(mx_raw_set_route_mag,
        mx_return_t (*)(mx_raw_endpoint_t, uint64_t, void *, uint32_t,
                        uint32_t, uint32_t, mx_host_type_t, uint32_t));
  PROTO(mx_raw_set_route,
        mx_return_t (*)(mx_raw_endpoint_t, uint64_t, void *, uint32_t,
                        uint32_t, uint32_t, mx_host_type_t));
  PROTO(mx_raw_clear_routes,
        mx_return_t (*)(mx_raw_endpoint_t, uint64_t, uint32_t));
  PROTO(mx_raw_remove_peer, mx_return_t (*)(mx_raw_endpoint_t, uint64_t));
  PROTO(mx_raw_set_map_version,
        mx_return_t (*)(mx_raw_endpoint_t, uint32_t, uint64_t, uint32_t,
                        uint32_t, uint32_t));
  PROTO(mx_raw_num_ports, mx_return_t (*)(mx_raw_endpoint_t, uint32_t *));
  PROTO(mx_raw_line_speed,
        mx_return_t (*)(mx_raw_endpoint_t, mx_line_speed_t *));
  PROTO(mx_raw_set_hostname, mx_return_t (*)(mx_raw_endpoint_t, char *));
  PROTO(mx_raw_set_peer_name,
        mx_return_t (*)(mx_raw_endpoint_t, uint64_t, char *));
  PROTO(mx_raw_set_nic_reply_info,
        mx_return_t (*)(mx_raw_endpoint_t, void *, uint32_t));

  /* Callback types */
  TYPE_IS(mx_error_handler_t, mx_return_t (*)(char *, mx_return_t));
  TYPE_IS(mx_matching_callback_t, void (*)(void *, uint64_t, int));
  TYPE_IS(mx_unexp_handler_t,
          mx_unexp_handler_action_t (*)(void *, mx_endpoint_addr_t, uint64_t,
                                        uint32_t, void *));
  TYPE_IS(mx_segment_ptr_t, void *);
  TYPE_IS(mx_endpt_handle_t, int);
  TYPE_IS(mx_raw_status_t, int);
  TYPE_IS(mx_endpoint_t, struct mx_endpoint *);
  TYPE_IS(mx_request_t, union mx_request *);
  TYPE_IS(mx_raw_endpoint_t, struct omx_raw_endpoint *);
}

/* The native API (open-mx.h): its values, and layouts equal to the MX ones
 * (the same objects pass between both APIs by pointer). */
static void check_native(void) {
#if HAVE_LAYOUT
  SIZE(omx_endpoint_addr_t, 16, 16);
  ALIGN(omx_endpoint_addr_t, 8, 4);
  SIZE(omx_seg_t, 16, 8);
  OFF(omx_seg_t, ptr, 0, 0);
  OFF(omx_seg_t, len, 8, 4);
  SIZE(omx_status_t, 48, 40);
  ALIGN(omx_status_t, 8, 4);
  OFF(omx_status_t, code, 0, 0);
  OFF(omx_status_t, addr, 8, 4);
  OFF(omx_status_t, match_info, 24, 20);
  OFF(omx_status_t, msg_length, 32, 28);
  OFF(omx_status_t, xfer_length, 36, 32);
  OFF(omx_status_t, context, 40, 36);
  SIZE(omx_endpoint_param_t, 16, 8);
  OFF(omx_endpoint_param_t, val, 8, 4);
  OFF(omx_endpoint_param_t, val.context_id.shift, 9, 5);
#endif
  CHECK("omx_status_t == mx_status_t", sizeof(omx_status_t), sizeof(mx_status_t));
  CHECK("omx_seg_t == mx_segment_t", sizeof(omx_seg_t), sizeof(mx_segment_t));
  CHECK("omx_endpoint_param_t == mx_param_t", sizeof(omx_endpoint_param_t), sizeof(mx_param_t));
  CHECK("sizeof(omx_return_t)", sizeof(omx_return_t), 4);
  VAL(OMX_API, 0x301);
  VAL(OMX_SIZEOF_ADDR, 16);
  VAL(OMX_ANY_NIC, 0xffffffffU);
  VAL(OMX_ANY_ENDPOINT, 0xffffffffU);
  VAL(OMX_TIMEOUT_INFINITE, 0xffffffffU);
  VAL(OMX_MAX_SEGMENTS, 256);
  VAL(OMX_ENDPOINT_CONTEXT_ID_BITS_MAX, 16);
  VAL(OMX_HOSTNAMELEN_MAX, 80);
  VAL(OMX_BOARD_ADDR_STRLEN, 18);
  VAL(OMX_SUCCESS, 0);
  VAL(OMX_BAD_ERROR, 1);
  VAL(OMX_ALREADY_INITIALIZED, 3);
  VAL(OMX_NOT_INITIALIZED, 4);
  VAL(OMX_NO_DEVICE_FILE, 5);
  VAL(OMX_NO_DRIVER, 6);
  VAL(OMX_ACCESS_DENIED, 7);
  VAL(OMX_BOARD_NOT_FOUND, 8);
  VAL(OMX_BAD_ENDPOINT, 9);
  VAL(OMX_SEGMENTS_BAD_COUNT, 12);
  VAL(OMX_BAD_REQUEST, 13);
  VAL(OMX_BAD_MATCH_MASK, 14);
  VAL(OMX_NO_RESOURCES, 15);
  VAL(OMX_BUSY, 20);
  VAL(OMX_BAD_INFO_KEY, 21);
  VAL(OMX_BAD_INFO_ADDRESS, 22);
  VAL(OMX_ENDPOINT_PARAMS_BAD_LIST, 24);
  VAL(OMX_ENDPOINT_PARAM_BAD_KEY, 25);
  VAL(OMX_ENDPOINT_PARAM_BAD_VALUE, 26);
  VAL(OMX_PEER_NOT_FOUND, 28);
  VAL(OMX_TIMEOUT, 30);
  VAL(OMX_REMOTE_ENDPOINT_BAD_ID, 32);
  VAL(OMX_REMOTE_ENDPOINT_CLOSED, 33);
  VAL(OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY, 34);
  VAL(OMX_BAD_INFO_LENGTH, 35);
  VAL(OMX_NIC_ID_NOT_FOUND, 36);
  VAL(OMX_BAD_KERNEL_ABI, 37);
  VAL(OMX_BAD_LIB_ABI, 38);
  VAL(OMX_BAD_MATCHING_FOR_CONTEXT_ID_MASK, 42);
  VAL(OMX_CANCELLED, 90);
  VAL(OMX_REMOTE_RDMA_WINDOW_BAD_ID, 91);
  VAL(OMX_REMOTE_ENDPOINT_UNREACHABLE, 92);
  VAL(OMX_REMOTE_ENDPOINT_BAD_SESSION, 93);
  VAL(OMX_MESSAGE_ABORTED, 94);
  VAL(OMX_MESSAGE_TRUNCATED, 95);
  VAL(OMX_NOT_SUPPORTED_IN_HANDLER, 96);
  VAL(OMX_NO_SYSTEM_RESOURCES, 97);
  VAL(OMX_NOT_IMPLEMENTED, 99);
  VAL(OMX_RETURN_CODE_MAX, 100);
  VAL(OMX_ENDPOINT_PARAM_ERROR_HANDLER, 0);
  VAL(OMX_ENDPOINT_PARAM_UNEXP_QUEUE_MAX, 1);
  VAL(OMX_ENDPOINT_PARAM_CONTEXT_ID, 2);
  VAL(OMX_UNEXP_HANDLER_RECV_CONTINUE, 0);
  VAL(OMX_UNEXP_HANDLER_RECV_FINISHED, 1);
  VAL(OMX_INFO_BOARD_MAX, 0);
  VAL(OMX_INFO_ENDPOINT_MAX, 1);
  VAL(OMX_INFO_BOARD_COUNT, 2);
  VAL(OMX_INFO_BOARD_IDS, 3);
  VAL(OMX_INFO_BOARD_HOSTNAME, 4);
  VAL(OMX_INFO_BOARD_IFACENAME, 5);
  VAL(OMX_INFO_BOARD_NUMA_NODE, 6);
  VAL(OMX_INFO_COUNTER_MAX, 7);
  VAL(OMX_INFO_COUNTER_VALUES, 8);
  VAL(OMX_INFO_COUNTER_LABEL, 9);
  /* the timeout is the last argument of the blocking calls */
  PROTO(omx_wait, omx_return_t (*)(omx_endpoint_t, omx_request_t *, omx_status_t *,
                                   uint32_t *, uint32_t));
  PROTO(omx_wait_any, omx_return_t (*)(omx_endpoint_t, uint64_t, uint64_t, omx_status_t *,
                                       uint32_t *, uint32_t));
  PROTO(omx_peek, omx_return_t (*)(omx_endpoint_t, omx_request_t *, uint32_t *, uint32_t));
  PROTO(omx_probe, omx_return_t (*)(omx_endpoint_t, uint64_t, uint64_t, omx_status_t *,
                                    uint32_t *, uint32_t));
  PROTO(omx_isend, omx_return_t (*)(omx_endpoint_t, void *, size_t, omx_endpoint_addr_t,
                                    uint64_t, void *, omx_request_t *));
  PROTO(omx_irecv, omx_return_t (*)(omx_endpoint_t, void *, size_t, uint64_t, uint64_t,
                                    void *, omx_request_t *));
  PROTO(omx_isendv, omx_return_t (*)(omx_endpoint_t, omx_seg_t *, uint32_t,
                                     omx_endpoint_addr_t, uint64_t, void *, omx_request_t *));
  PROTO(omx_cancel_notest, omx_return_t (*)(omx_endpoint_t, omx_request_t *, uint32_t *));
  PROTO(omx_get_info, omx_return_t (*)(omx_endpoint_t, omx_info_key_t, const void *, uint32_t,
                                       void *, uint32_t));
  PROTO(omx_set_error_handler,
        omx_error_handler_t (*)(omx_endpoint_t, omx_error_handler_t));
  PROTO(OMX_ERRORS_RETURN, const omx_error_handler_t *);
}

#ifdef LAYOUT_STATIC_ONLY

/* Nothing to run: compiling this file is the test. */
void layout_static_checks(void);
void layout_static_checks(void) {
  check_layouts();
  check_defines();
  check_enums();
  check_prototypes();
  check_native();
}

#else

#define XSTR(x) STR(x)
#define STR(x) #x

int main(void) {
  check_layouts();
  check_defines();
  check_enums();
  check_prototypes();
  check_native();
  /* mx_init() must pass the header's API version to mx__init_api(). */
  CHECK("mx_init() expands to mx__init_api(MX_API)",
        strcmp(XSTR(mx_init()), "mx__init_api(0x301)"), 0);
  printf("layout (%s): %u passed, %u failed\n", ABI_NAME, passed, failed);
  return failed == 0 ? 0 : 1;
}

#endif
