/*
 * open-mx.h - the native Open-MX API of omx (omx_* functions).
 *
 * Open-MX shipped this interface beside MX's: same library, same objects,
 * different names, its own return codes (omx_return_t, also used as the
 * completion status), timeouts in milliseconds with OMX_TIMEOUT_INFINITE for
 * "forever" and given last, and contiguous send/receive calls beside the
 * vectored ones.  Programs link with -lopen-mx (or -lmyriexpress: one
 * library) and may include myriexpress.h as well: the objects behind
 * omx_endpoint_t / mx_endpoint_t and omx_request_t / mx_request_t are the
 * same, and omx_status_t, omx_seg_t and omx_endpoint_addr_t have the layouts
 * of mx_status_t, mx_segment_t and mx_endpoint_addr_t.
 *
 * Every value, type and layout below is part of the binary interface (checked
 * by tests/c/abi/layout.c on x86-64 and i386).  What each function does in omx
 * is listed in docs/API.md ("Native Open-MX API").
 */

#ifndef OMX_OPEN_MX_H
#define OMX_OPEN_MX_H

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------
 * Handles and return codes
 * ------------------------------------------------------------------------ */

/* An open endpoint (the object an mx_endpoint_t designates). */
typedef struct omx_endpoint *omx_endpoint_t;

/* A posted operation (the object an mx_request_t designates). */
typedef union omx_request *omx_request_t;

/* Return codes, and completion status codes.  Where MX has a code of the
 * same meaning the value is MX's. */
enum omx_return {
  OMX_SUCCESS = 0,
  OMX_BAD_ERROR = 1,
  OMX_ALREADY_INITIALIZED = 3,
  OMX_NOT_INITIALIZED = 4,
  OMX_NO_DEVICE_FILE = 5,
  OMX_NO_DRIVER = 6,
  OMX_ACCESS_DENIED = 7,
  OMX_BOARD_NOT_FOUND = 8,
  OMX_BAD_ENDPOINT = 9,
  OMX_SEGMENTS_BAD_COUNT = 12,
  OMX_BAD_REQUEST = 13,
  OMX_BAD_MATCH_MASK = 14,
  OMX_NO_RESOURCES = 15,
  OMX_BUSY = 20,
  OMX_BAD_INFO_KEY = 21,
  OMX_BAD_INFO_ADDRESS = 22,
  OMX_ENDPOINT_PARAMS_BAD_LIST = 24,
  OMX_ENDPOINT_PARAM_BAD_KEY = 25,
  OMX_ENDPOINT_PARAM_BAD_VALUE = 26,
  OMX_PEER_NOT_FOUND = 28,
  OMX_TIMEOUT = 30,
  OMX_REMOTE_ENDPOINT_BAD_ID = 32,
  OMX_REMOTE_ENDPOINT_CLOSED = 33,
  OMX_REMOTE_ENDPOINT_BAD_CONNECTION_KEY = 34,
  OMX_BAD_INFO_LENGTH = 35,
  OMX_NIC_ID_NOT_FOUND = 36,
  OMX_BAD_KERNEL_ABI = 37,
  OMX_BAD_LIB_ABI = 38,
  OMX_BAD_MATCHING_FOR_CONTEXT_ID_MASK = 42,
  /* Codes without an MX return code (completion statuses mostly). */
  OMX_CANCELLED = 90,
  OMX_REMOTE_RDMA_WINDOW_BAD_ID = 91,
  OMX_REMOTE_ENDPOINT_UNREACHABLE = 92,
  OMX_REMOTE_ENDPOINT_BAD_SESSION = 93,
  OMX_MESSAGE_ABORTED = 94,
  OMX_MESSAGE_TRUNCATED = 95,
  OMX_NOT_SUPPORTED_IN_HANDLER = 96,
  OMX_NO_SYSTEM_RESOURCES = 97,
  OMX_NOT_IMPLEMENTED = 99,
  OMX_RETURN_CODE_MAX = 100
};
typedef enum omx_return omx_return_t;

/* ------------------------------------------------------------------------
 * Addresses, segments, statuses
 * ------------------------------------------------------------------------ */

/* Bytes in an endpoint address. */
#define OMX_SIZEOF_ADDR 16

/* Address of an endpoint; opaque, passed by value, meaningful only in the
 * process and endpoint that obtained it (layout of mx_endpoint_addr_t). */
struct omx_endpoint_addr {
  uint64_t data[OMX_SIZEOF_ADDR / sizeof(uint64_t)];
};
typedef struct omx_endpoint_addr omx_endpoint_addr_t;

/* Completion status (layout of mx_status_t; `addr` is MX's `source`). */
struct omx_status {
  enum omx_return code;
  omx_endpoint_addr_t addr;
  uint64_t match_info;
  uint32_t msg_length;
  uint32_t xfer_length;
  void *context;
};
typedef struct omx_status omx_status_t;

/* Largest number of segments in one vectored send or receive. */
#define OMX_MAX_SEGMENTS 256

/* One piece of a vectored buffer (layout of mx_segment_t). */
typedef void *omx_seg_ptr_t;
struct omx_seg {
  omx_seg_ptr_t ptr;
  uint32_t len;
};
typedef struct omx_seg omx_seg_t;

/* Timeout meaning "wait forever" (timeouts are in milliseconds; 0 does not
 * wait). */
#define OMX_TIMEOUT_INFINITE ((uint32_t)-1)

/* ------------------------------------------------------------------------
 * Library
 * ------------------------------------------------------------------------ */

/* Interface version checked by omx_init() (major part: high byte). */
#define OMX_API 0x301

omx_return_t omx__init_api(int api);

/* Initialise the library, checking that this header matches it. */
static inline omx_return_t omx_init(void) { return omx__init_api(OMX_API); }

omx_return_t omx_finalize(void);

/* Text of a return or status code. */
const char *omx_strerror(omx_return_t ret);

omx_return_t omx_board_number_to_nic_id(uint32_t board_number,
                                        uint64_t *nic_id);
omx_return_t omx_nic_id_to_board_number(uint64_t nic_id,
                                        uint32_t *board_number);

/* Error handler: receives a message and the failing code (a native code),
 * returns what the failing call returns. */
typedef omx_return_t (*omx_error_handler_t)(char *str, omx_return_t ret);

/* Installs the handler of an endpoint (ep != NULL) or the global one (ep ==
 * NULL); returns the previous one. */
omx_error_handler_t omx_set_error_handler(omx_endpoint_t ep,
                                          omx_error_handler_t handler);

/* Predefined handlers: print and exit, or return the code. */
extern const omx_error_handler_t OMX_ERRORS_ARE_FATAL;
extern const omx_error_handler_t OMX_ERRORS_RETURN;

/* ------------------------------------------------------------------------
 * Endpoints
 * ------------------------------------------------------------------------ */

/* Wildcards of omx_open_endpoint(): any board, any endpoint index. */
#define OMX_ANY_NIC 0xffffffffU
#define OMX_ANY_ENDPOINT 0xffffffffU

enum omx_endpoint_param_key {
  OMX_ENDPOINT_PARAM_ERROR_HANDLER = 0,
  OMX_ENDPOINT_PARAM_UNEXP_QUEUE_MAX = 1,
  OMX_ENDPOINT_PARAM_CONTEXT_ID = 2
};
typedef enum omx_endpoint_param_key omx_endpoint_param_key_t;

/* Largest number of match bits used as a context id. */
#define OMX_ENDPOINT_CONTEXT_ID_BITS_MAX 16

/* Endpoint-open parameter (layout of mx_param_t). */
typedef struct {
  omx_endpoint_param_key_t key;
  union {
    omx_error_handler_t error_handler;
    uint32_t unexp_queue_max;
    struct {
      uint8_t bits;
      uint8_t shift;
    } context_id;
  } val;
} omx_endpoint_param_t;

omx_return_t omx_open_endpoint(uint32_t board_index, uint32_t endpoint_index,
                               uint32_t key, omx_endpoint_param_t *param_array,
                               uint32_t param_count, omx_endpoint_t *epp);
omx_return_t omx_close_endpoint(omx_endpoint_t ep);

/* Ends every blocking call of the endpoint. */
omx_return_t omx_wakeup(omx_endpoint_t ep);

/* ------------------------------------------------------------------------
 * Addresses and connections
 * ------------------------------------------------------------------------ */

omx_return_t omx_get_endpoint_addr(omx_endpoint_t endpoint,
                                   omx_endpoint_addr_t *endpoint_addr);
/* timeout in ms, OMX_TIMEOUT_INFINITE for no limit. */
omx_return_t omx_connect(omx_endpoint_t endpoint, uint64_t nic_id,
                         uint32_t endpoint_id, uint32_t key, uint32_t timeout,
                         omx_endpoint_addr_t *addr);
omx_return_t omx_iconnect(omx_endpoint_t ep, uint64_t nic_id,
                          uint32_t endpoint_id, uint32_t key,
                          uint64_t match_info, void *context,
                          omx_request_t *request);
omx_return_t omx_disconnect(omx_endpoint_t ep, omx_endpoint_addr_t addr);
omx_return_t omx_decompose_endpoint_addr(omx_endpoint_addr_t endpoint_addr,
                                         uint64_t *nic_id,
                                         uint32_t *endpoint_id);
omx_return_t omx_decompose_endpoint_addr_with_session(
    omx_endpoint_addr_t endpoint_addr, uint64_t *nic_id, uint32_t *endpoint_id,
    uint32_t *session_id);
omx_return_t omx_set_endpoint_addr_context(omx_endpoint_addr_t endpoint_addr,
                                           void *context);
omx_return_t omx_get_endpoint_addr_context(omx_endpoint_addr_t endpoint_addr,
                                           void **context);

/* ------------------------------------------------------------------------
 * Communication
 * ------------------------------------------------------------------------ */

/* Contiguous buffers. */
omx_return_t omx_isend(omx_endpoint_t ep, void *buffer, size_t length,
                       omx_endpoint_addr_t dest_endpoint, uint64_t match_info,
                       void *context, omx_request_t *request);
omx_return_t omx_issend(omx_endpoint_t ep, void *buffer, size_t length,
                        omx_endpoint_addr_t dest_endpoint, uint64_t match_info,
                        void *context, omx_request_t *request);
omx_return_t omx_irecv(omx_endpoint_t ep, void *buffer, size_t length,
                       uint64_t match_info, uint64_t match_mask, void *context,
                       omx_request_t *request);

/* Vectored buffers (up to OMX_MAX_SEGMENTS segments). */
omx_return_t omx_isendv(omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg,
                        omx_endpoint_addr_t dest_endpoint, uint64_t match_info,
                        void *context, omx_request_t *request);
omx_return_t omx_issendv(omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg,
                         omx_endpoint_addr_t dest_endpoint,
                         uint64_t match_info, void *context,
                         omx_request_t *request);
omx_return_t omx_irecvv(omx_endpoint_t ep, omx_seg_t *segs, uint32_t nseg,
                        uint64_t match_info, uint64_t match_mask,
                        void *context, omx_request_t *request);

omx_return_t omx_context(omx_request_t *request, void **context);

/* Completions; the blocking calls take their timeout (ms) last. */
omx_return_t omx_test(omx_endpoint_t ep, omx_request_t *request,
                      omx_status_t *status, uint32_t *result);
omx_return_t omx_wait(omx_endpoint_t ep, omx_request_t *request,
                      omx_status_t *status, uint32_t *result,
                      uint32_t timeout);
omx_return_t omx_test_any(omx_endpoint_t ep, uint64_t match_info,
                          uint64_t match_mask, omx_status_t *status,
                          uint32_t *result);
omx_return_t omx_wait_any(omx_endpoint_t ep, uint64_t match_info,
                          uint64_t match_mask, omx_status_t *status,
                          uint32_t *result, uint32_t timeout);
omx_return_t omx_ipeek(omx_endpoint_t ep, omx_request_t *request,
                       uint32_t *result);
omx_return_t omx_peek(omx_endpoint_t ep, omx_request_t *request,
                      uint32_t *result, uint32_t timeout);
omx_return_t omx_iprobe(omx_endpoint_t ep, uint64_t match_info,
                        uint64_t match_mask, omx_status_t *status,
                        uint32_t *result);
omx_return_t omx_probe(omx_endpoint_t ep, uint64_t match_info,
                       uint64_t match_mask, omx_status_t *status,
                       uint32_t *result, uint32_t timeout);
omx_return_t omx_ibuffered(omx_endpoint_t ep, omx_request_t *request,
                           uint32_t *result);

/* Unexpected-message handler (called for a message no receive matches). */
enum omx_unexp_handler_action {
  OMX_UNEXP_HANDLER_RECV_CONTINUE = 0,
  OMX_UNEXP_HANDLER_RECV_FINISHED = 1
};
typedef enum omx_unexp_handler_action omx_unexp_handler_action_t;
typedef omx_unexp_handler_action_t (*omx_unexp_handler_t)(
    void *context, omx_endpoint_addr_t source, uint64_t match_info,
    uint32_t msg_length, void *data_if_available);
omx_return_t omx_register_unexp_handler(omx_endpoint_t ep,
                                        omx_unexp_handler_t handler,
                                        void *context);

/* Cancel a request: success frees it (result 1); omx_cancel_notest keeps it,
 * and it completes later with status OMX_CANCELLED. */
omx_return_t omx_cancel(omx_endpoint_t ep, omx_request_t *request,
                        uint32_t *result);
omx_return_t omx_cancel_notest(omx_endpoint_t ep, omx_request_t *request,
                               uint32_t *result);
omx_return_t omx_forget(omx_endpoint_t ep, omx_request_t *request);

omx_return_t omx_disable_progression(omx_endpoint_t ep);
omx_return_t omx_reenable_progression(omx_endpoint_t ep);
omx_return_t omx_progress(omx_endpoint_t ep);

/* NULL request: the endpoint's default for requests posted afterwards. */
omx_return_t omx_set_request_timeout(omx_endpoint_t endpoint,
                                     omx_request_t request,
                                     uint32_t milliseconds);

/* ------------------------------------------------------------------------
 * Information and names
 * ------------------------------------------------------------------------ */

enum omx_info_key {
  OMX_INFO_BOARD_MAX = 0,       /* uint32_t: boards a host may have */
  OMX_INFO_ENDPOINT_MAX = 1,    /* uint32_t: endpoints per board */
  OMX_INFO_BOARD_COUNT = 2,     /* uint32_t: boards attached */
  OMX_INFO_BOARD_IDS = 3,       /* uint64_t[]: nic id of each board, then 0 */
  OMX_INFO_BOARD_HOSTNAME = 4,  /* string; board of ep, or uint8_t in in_val */
  OMX_INFO_BOARD_IFACENAME = 5, /* string; board of ep, or uint8_t in in_val */
  OMX_INFO_BOARD_NUMA_NODE = 6, /* uint32_t; board of ep, or uint8_t in_val */
  OMX_INFO_COUNTER_MAX = 7,     /* uint32_t: number of counters */
  OMX_INFO_COUNTER_VALUES = 8,  /* uint32_t[]: every counter of the board */
  OMX_INFO_COUNTER_LABEL = 9    /* string: label of counter uint8_t in_val */
};
typedef enum omx_info_key omx_info_key_t;

omx_return_t omx_get_info(omx_endpoint_t ep, omx_info_key_t key,
                          const void *in_val, uint32_t in_len, void *out_val,
                          uint32_t out_len);

/* Size of the buffer omx_nic_id_to_hostname() writes into. */
#define OMX_HOSTNAMELEN_MAX 80

/* Length of "xx:xx:xx:xx:xx:xx" and its NUL. */
#define OMX_BOARD_ADDR_STRLEN 18

omx_return_t omx_hostname_to_nic_id(char *hostname, uint64_t *board_addr);
omx_return_t omx_nic_id_to_hostname(uint64_t board_addr, char *hostname);

#ifdef __cplusplus
}
#endif

#endif /* OMX_OPEN_MX_H */
