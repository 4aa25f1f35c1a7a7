/*
 * myriexpress.h - Myrinet Express (MX) API of omx.
 *
 * omx exposes the MX 1.2 programming interface and binary interface so that
 * programs written for MX build and link unchanged (-lmyriexpress).  Every
 * numeric value, type and structure layout below is part of the binary
 * interface: do not change them.
 *
 * Structure layouts rely on the platform's natural C alignment; see
 * tests/c/abi/layout.c for the sizes and offsets checked on x86-64 and i386.
 *
 * Extensions (mx_iconnect, mx_forget, the unexpected-message handler, ...)
 * are declared in mx_extensions.h; the raw (mapper) interface in mx_raw.h.
 */

#ifndef MYRIEXPRESS_H
#define MYRIEXPRESS_H

/* The original's header brought in <inttypes.h> (PRIx64, SCNx64, ...) and, through
 * its native header, <stdint.h> and <stdlib.h>; MX programs rely on all three. */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Constants
 * ------------------------------------------------------------------------ */

/* Interface version passed to the library by mx_init(); the major part
 * (high byte, 3) must match the library. */
#define MX_API 0x301

/* Size of one label slot returned for MX_COUNTERS_LABELS. */
#define MX_MAX_STR_LEN 128

/* Number of bytes in an endpoint address. */
#define MX_SIZEOF_ADDR 16

/* Wildcards for mx_open_endpoint(): any board, any endpoint index. */
#define MX_ANY_NIC 0xffffffffU
#define MX_ANY_ENDPOINT 0xffffffffU

/* Timeout value meaning "wait forever" (note: 0 in the MX interface). */
#define MX_INFINITE 0

/* Largest number of match bits usable as a context id (MX_PARAM_CONTEXT_ID). */
#define MX_CONTEXT_ID_BITS_MAX 16

/* Largest number of segments in one send or receive. */
#define MX_MAX_SEGMENTS 256

/* Match mask selecting every bit of the match value (exact matching). */
#define MX_MATCH_MASK_NONE (~(uint64_t)0)

/* Size of the buffer mx_nic_id_to_hostname() writes into. */
#define MX_MAX_HOSTNAME_LEN 80

/* High and low 32-bit halves of a 64-bit value (for printf "%08x%08x"). */
#define MX_U32(x) ((uint32_t)(((uint64_t)(x)) >> 32))
#define MX_L32(x) ((uint32_t)(((uint64_t)(x)) & 0xffffffffU))

/* Feature macro: mx_get_info() knows MX_NET_TYPE and enum mx_net_type. */
#define MX_HAS_NET_TYPE

/* ------------------------------------------------------------------------
 * Return codes
 * ------------------------------------------------------------------------ */

typedef enum mx_return_code {
  MX_SUCCESS = 0,
  MX_BAD_BAD_BAD = 1,
  MX_FAILURE = 2,
  MX_ALREADY_INITIALIZED = 3,
  MX_NOT_INITIALIZED = 4,
  MX_NO_DEV = 5,
  MX_NO_DRIVER = 6,
  MX_NO_PERM = 7,
  MX_BOARD_UNKNOWN = 8,
  MX_BAD_ENDPOINT = 9,
  MX_BAD_SEG_LIST = 10,
  MX_BAD_SEG_MEM = 11,
  MX_BAD_SEG_CNT = 12,
  MX_BAD_REQUEST = 13,
  MX_BAD_MATCH_MASK = 14,
  MX_NO_RESOURCES = 15,
  MX_BAD_ADDR_LIST = 16,
  MX_BAD_ADDR_COUNT = 17,
  MX_BAD_ROOT = 18,
  MX_NOT_COMPLETED = 19,
  MX_BUSY = 20,
  MX_BAD_INFO_KEY = 21,
  MX_BAD_INFO_VAL = 22,
  MX_BAD_NIC = 23,
  MX_BAD_PARAM_LIST = 24,
  MX_BAD_PARAM_NAME = 25,
  MX_BAD_PARAM_VAL = 26,
  MX_BAD_HOSTNAME_ARGS = 27,
  MX_HOST_NOT_FOUND = 28,
  MX_REQUEST_PENDING = 29,
  MX_TIMEOUT = 30,
  MX_NO_MATCH = 31,
  MX_BAD_ENDPOINT_ID = 32,
  MX_CONNECTION_FAILED = 33,
  MX_BAD_CONNECTION_KEY = 34,
  MX_BAD_INFO_LENGTH = 35,
  MX_NIC_NOT_FOUND = 36,
  MX_BAD_KERNEL_VERSION = 37,
  MX_BAD_LIB_VERSION = 38,
  MX_NIC_DEAD = 39,
  MX_CANCEL_NOT_SUPPORTED = 40,
  MX_CLOSE_IN_HANDLER = 41,
  MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK = 42,
  MX_NOT_SUPPORTED_WITH_CONTEXT_ID = 43
} mx_return_t;

/* ------------------------------------------------------------------------
 * Request completion status codes (mx_status_t.code)
 * ------------------------------------------------------------------------ */

typedef enum mx_status_code {
  MX_STATUS_SUCCESS = 0,
  MX_STATUS_PENDING = 1,
  MX_STATUS_BUFFERED = 2,
  MX_STATUS_REJECTED = 3,
  MX_STATUS_TIMEOUT = 4,
  MX_STATUS_TRUNCATED = 5,
  MX_STATUS_CANCELLED = 6,
  MX_STATUS_ENDPOINT_UNKNOWN = 7,
  MX_STATUS_ENDPOINT_CLOSED = 8,
  MX_STATUS_ENDPOINT_UNREACHABLE = 9,
  MX_STATUS_BAD_SESSION = 10,
  MX_STATUS_BAD_KEY = 11,
  MX_STATUS_BAD_ENDPOINT = 12,
  MX_STATUS_BAD_RDMAWIN = 13,
  MX_STATUS_ABORTED = 14,
  MX_STATUS_EVENTQ_FULL = 15,
  MX_STATUS_NO_RESOURCES = 16
} mx_status_code_t;

/* ------------------------------------------------------------------------
 * Other enumerations
 * ------------------------------------------------------------------------ */

/* Keys of the parameters given to mx_open_endpoint(). */
typedef enum {
  MX_PARAM_ERROR_HANDLER = 0,
  MX_PARAM_UNEXP_QUEUE_MAX = 1,
  MX_PARAM_CONTEXT_ID = 2
} mx_param_key_t;

/* Keys of mx_get_info(). */
typedef enum {
  MX_NIC_COUNT = 1,
  MX_NIC_IDS = 2,
  MX_MAX_NATIVE_ENDPOINTS = 3,
  MX_NATIVE_REQUESTS = 4,
  MX_COUNTERS_COUNT = 5,
  MX_COUNTERS_LABELS = 6,
  MX_COUNTERS_VALUES = 7,
  MX_PRODUCT_CODE = 8,
  MX_PART_NUMBER = 9,
  MX_SERIAL_NUMBER = 10,
  MX_PORT_COUNT = 11,
  MX_PIO_SEND_MAX = 12,
  MX_COPY_SEND_MAX = 13,
  MX_NUMA_NODE = 14,
  MX_NET_TYPE = 15,
  MX_LINE_SPEED = 16
} mx_get_info_key_t;

/* Link speeds (MX_LINE_SPEED, mx_raw_line_speed()). */
typedef enum {
  MX_SPEED_2G = 0,
  MX_SPEED_10G = 1,
  MX_SPEED_OPEN_MX = 2
} mx_line_speed_t;

/* Network kinds (MX_NET_TYPE). */
enum mx_net_type {
  MX_NET_MYRI = 0,
  MX_NET_ETHER = 1
};

/* ------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------ */

/* Opaque handle of an open endpoint. */
typedef struct mx_endpoint *mx_endpoint_t;

/* Opaque handle of a posted operation. */
typedef union mx_request *mx_request_t;

/* Address of a (remote or local) endpoint; opaque, passed by value, only
 * meaningful inside the process and endpoint that obtained it.
 * 16 bytes; alignment 8 on x86-64, 4 on i386. */
typedef struct {
  uint64_t stuff[2];
} mx_endpoint_addr_t;

/* One piece of a vectored buffer. */
typedef void *mx_segment_ptr_t;

/* 16 bytes on x86-64 (4 trailing padding bytes), 8 on i386. */
typedef struct {
  mx_segment_ptr_t segment_ptr;
  uint32_t segment_length;
} mx_segment_t;

/* Completion status of a request.
 * x86-64: 48 bytes, 4 padding bytes after code, source at 8.
 * i386:   40 bytes, no padding, source at 4. */
typedef struct mx_status {
  mx_status_code_t code;
  mx_endpoint_addr_t source;
  uint64_t match_info;
  uint32_t msg_length;
  uint32_t xfer_length;
  void *context;
} mx_status_t;

/* Error handler: receives a message and the failing code, returns the code
 * the failing call should return. */
typedef mx_return_t (*mx_error_handler_t)(char *str, mx_return_t ret);

/* Deprecated matching callback (mx_register_unexp_callback()). */
typedef void (*mx_matching_callback_t)(void *context, uint64_t match_value,
                                       int length);

/* Endpoint-open parameter.
 * x86-64: 16 bytes, val at 8 (context_id.bits at 8, .shift at 9).
 * i386:   8 bytes, val at 4. */
typedef struct {
  mx_param_key_t key;
  union {
    mx_error_handler_t error_handler;
    uint32_t unexp_queue_max;
    struct {
      uint8_t bits;
      uint8_t shift;
    } context_id;
  } val;
} mx_param_t;

/* ------------------------------------------------------------------------
 * Library and endpoint management
 * ------------------------------------------------------------------------ */

/* Initialise the library after checking the caller's API version; use mx_init(). */
mx_return_t mx__init_api(int api);

/* Initialise the library (checks that this header matches the library). */
#define mx_init() mx__init_api(MX_API)

/* Shut the library down; endpoints should be closed first. */
mx_return_t mx_finalize(void);

/* Install the process-wide error handler; returns the previous one. */
mx_error_handler_t mx_set_error_handler(mx_error_handler_t handler);

/* Error handler that prints the error and exits the process (the default). */
extern const mx_error_handler_t MX_ERRORS_ARE_FATAL;

/* Error handler that makes failing calls return their error code. */
extern const mx_error_handler_t MX_ERRORS_RETURN;

/* Open an endpoint on a board (or any board/index with the wildcards). */
mx_return_t mx_open_endpoint(uint32_t board_number, uint32_t endpoint_id,
                             uint32_t endpoint_key, mx_param_t *params_array,
                             uint32_t params_count, mx_endpoint_t *endpoint);

/* Close an endpoint, dropping every request still pending on it. */
mx_return_t mx_close_endpoint(mx_endpoint_t endpoint);

/* Make every thread blocked on this endpoint return with nothing completed. */
mx_return_t mx_wakeup(mx_endpoint_t endpoint);

/* Stop network progress inside library calls on this endpoint. */
mx_return_t mx_disable_progression(mx_endpoint_t endpoint);

/* Resume network progress on this endpoint and progress once. */
mx_return_t mx_reenable_progression(mx_endpoint_t endpoint);

/* Deprecated unexpected-message callback; not supported. */
mx_return_t mx_register_unexp_callback(mx_endpoint_t endpoint,
                                       mx_matching_callback_t callback,
                                       void *context);

/* ------------------------------------------------------------------------
 * Communication
 * ------------------------------------------------------------------------ */

/* Post a send of a segment list to a connected endpoint address. */
mx_return_t mx_isend(mx_endpoint_t endpoint, mx_segment_t *segments_list,
                     uint32_t segments_count, mx_endpoint_addr_t dest_endpoint,
                     uint64_t match_info, void *context, mx_request_t *request);

/* Post a synchronous send that completes only once the receiver took the data. */
mx_return_t mx_issend(mx_endpoint_t endpoint, mx_segment_t *segments_list,
                      uint32_t segments_count, mx_endpoint_addr_t dest_endpoint,
                      uint64_t match_info, void *context, mx_request_t *request);

/* Post a receive for messages whose match value matches match_info under match_mask. */
mx_return_t mx_irecv(mx_endpoint_t endpoint, mx_segment_t *segments_list,
                     uint32_t segments_count, uint64_t match_info,
                     uint64_t match_mask, void *context, mx_request_t *request);

/* Cancel a pending receive or connect; *result tells whether it was cancelled. */
mx_return_t mx_cancel(mx_endpoint_t endpoint, mx_request_t *request,
                      uint32_t *result);

/* Check once whether a request completed; if so, return its status and free it. */
mx_return_t mx_test(mx_endpoint_t endpoint, mx_request_t *request,
                    mx_status_t *status, uint32_t *result);

/* Wait (up to timeout ms, MX_INFINITE = forever) for a request to complete. */
mx_return_t mx_wait(mx_endpoint_t endpoint, mx_request_t *request,
                    uint32_t timeout, mx_status_t *status, uint32_t *result);

/* Complete the oldest completed request whose match value matches, if any. */
mx_return_t mx_test_any(mx_endpoint_t endpoint, uint64_t match_info,
                        uint64_t match_mask, mx_status_t *status,
                        uint32_t *result);

/* Wait (up to timeout ms) for a completed request whose match value matches. */
mx_return_t mx_wait_any(mx_endpoint_t endpoint, uint32_t timeout,
                        uint64_t match_info, uint64_t match_mask,
                        mx_status_t *status, uint32_t *result);

/* Return the oldest completed request without completing it. */
mx_return_t mx_ipeek(mx_endpoint_t endpoint, mx_request_t *request,
                     uint32_t *result);

/* Wait (up to timeout ms) for a completed request and return it without completing it. */
mx_return_t mx_peek(mx_endpoint_t endpoint, uint32_t timeout,
                    mx_request_t *request, uint32_t *result);

/* Report, without receiving it, the oldest unexpected message that matches. */
mx_return_t mx_iprobe(mx_endpoint_t endpoint, uint64_t match_info,
                      uint64_t match_mask, mx_status_t *status,
                      uint32_t *result);

/* Wait (up to timeout ms) for an unexpected message that matches and report it. */
mx_return_t mx_probe(mx_endpoint_t endpoint, uint32_t timeout,
                     uint64_t match_info, uint64_t match_mask,
                     mx_status_t *status, uint32_t *result);

/* Tell whether a send's buffer may already be reused. */
mx_return_t mx_ibuffered(mx_endpoint_t endpoint, mx_request_t *request,
                         uint32_t *result);

/* Wait (up to timeout ms) until a send's buffer may be reused. */
mx_return_t mx_buffered(mx_endpoint_t endpoint, mx_request_t *request,
                        uint32_t timeout, uint32_t *result);

/* Return the context pointer a request was posted with. */
mx_return_t mx_context(mx_request_t *request, void **context);

/* One-sided write of local memory into memory the peer exposed (see mx_extensions.h). */
mx_return_t mx_iput(mx_endpoint_t endpoint, void *local_addr, uint32_t length,
                    mx_endpoint_addr_t dest_endpoint, uint64_t remote_addr,
                    void *context, mx_request_t *request);

/* One-sided read of memory the peer exposed into local memory (see mx_extensions.h). */
mx_return_t mx_iget(mx_endpoint_t endpoint, void *local_addr, uint32_t length,
                    mx_endpoint_addr_t dest_endpoint, uint64_t remote_addr,
                    void *context, mx_request_t *request);

/* ------------------------------------------------------------------------
 * Addressing and connection
 * ------------------------------------------------------------------------ */

/* Connect to a remote endpoint (blocking, up to timeout ms) and return its address. */
mx_return_t mx_connect(mx_endpoint_t endpoint, uint64_t nic_id,
                       uint32_t endpoint_id, uint32_t key, uint32_t timeout,
                       mx_endpoint_addr_t *addr);

/* Return the address of a local endpoint. */
mx_return_t mx_get_endpoint_addr(mx_endpoint_t endpoint,
                                 mx_endpoint_addr_t *endpoint_addr);

/* Split an endpoint address into its nic id and endpoint index. */
mx_return_t mx_decompose_endpoint_addr(mx_endpoint_addr_t endpoint_addr,
                                       uint64_t *nic_id, uint32_t *endpoint_id);

/* Look up the nic id of a peer by its name (e.g. "node1:0"). */
mx_return_t mx_hostname_to_nic_id(char *hostname, uint64_t *nic_id);

/* Look up the name of a peer (buffer of MX_MAX_HOSTNAME_LEN bytes). */
mx_return_t mx_nic_id_to_hostname(uint64_t nic_id, char *hostname);

/* Return the nic id of a local board. */
mx_return_t mx_board_number_to_nic_id(uint32_t board_number, uint64_t *nic_id);

/* Return the local board index of a nic id. */
mx_return_t mx_nic_id_to_board_number(uint64_t nic_id, uint32_t *board_number);

/* ------------------------------------------------------------------------
 * Information and messages
 * ------------------------------------------------------------------------ */

/* Query library, board or endpoint information selected by key. */
mx_return_t mx_get_info(mx_endpoint_t endpoint, mx_get_info_key_t key,
                        void *in_val, uint32_t in_len, void *out_val,
                        uint32_t out_len);

/* Return a text describing a return code. */
const char *mx_strerror(mx_return_t return_code);

/* Return a text describing a request status code. */
const char *mx_strstatus(mx_status_code_t status);

#ifdef __cplusplus
}
#endif

#endif /* MYRIEXPRESS_H */
