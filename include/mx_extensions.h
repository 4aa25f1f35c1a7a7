/*
 * mx_extensions.h - MX API extensions of omx.
 *
 * The calls MX offers beyond its base interface (non-blocking connect,
 * forget, unexpected-message handler, per-request timeouts, ...), plus the
 * omx extension controlling one-sided access (mx_iput/mx_iget).
 */

#ifndef MX_EXTENSIONS_H
#define MX_EXTENSIONS_H

#include <stddef.h>
#include <stdint.h>

#include "myriexpress.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Feature macro: mx_iconnect() takes a match value and a context. */
#define MX_HAS_ICONNECT_V2 1

/* ------------------------------------------------------------------------
 * Unexpected-message handler
 * ------------------------------------------------------------------------ */

/* What the unexpected handler asks the library to do with the message. */
typedef enum {
  MX_RECV_CONTINUE = 0, /* keep it as unexpected (or match a receive the handler posted) */
  MX_RECV_FINISHED = 1  /* drop it */
} mx_unexp_handler_action_t;

/* Called for each incoming message matching no posted receive.
 * data_if_available is non-NULL only when the whole payload is at hand. */
typedef mx_unexp_handler_action_t (*mx_unexp_handler_t)(
    void *context, mx_endpoint_addr_t source, uint64_t match_value,
    uint32_t length, void *data_if_available);

/* Install (or remove, with NULL) the unexpected-message handler of an endpoint. */
mx_return_t mx_register_unexp_handler(mx_endpoint_t endpoint,
                                      mx_unexp_handler_t handler,
                                      void *context);

/* ------------------------------------------------------------------------
 * Progress, requests, connections
 * ------------------------------------------------------------------------ */

/* Run one network progress pass on an endpoint. */
mx_return_t mx_progress(mx_endpoint_t endpoint);

/* Give up a request: it is freed once done and never reported. */
mx_return_t mx_forget(mx_endpoint_t endpoint, mx_request_t *request);

/* Limit the retransmission time (ms) of a request, or the endpoint default if NULL; 0 = none. */
mx_return_t mx_set_request_timeout(mx_endpoint_t endpoint,
                                   mx_request_t request,
                                   uint32_t milli_seconds);

/* Start a non-blocking connect; the request's status.source is the new address. */
mx_return_t mx_iconnect(mx_endpoint_t endpoint, uint64_t nic_id,
                        uint32_t endpoint_id, uint32_t key,
                        uint64_t match_info, void *context,
                        mx_request_t *request);

/* Forget every local state about a peer; nothing is sent on the wire. */
mx_return_t mx_disconnect(mx_endpoint_t endpoint, mx_endpoint_addr_t addr);

/* Split an endpoint address into nic id, endpoint index and session id. */
mx_return_t mx_decompose_endpoint_addr2(mx_endpoint_addr_t endpoint_addr,
                                        uint64_t *nic_id,
                                        uint32_t *endpoint_id,
                                        uint32_t *session_id);

/* Attach a user pointer to the peer an address designates. */
mx_return_t mx_set_endpoint_addr_context(mx_endpoint_addr_t endpoint_addr,
                                         void *context);

/* Read back the user pointer attached to the peer an address designates. */
mx_return_t mx_get_endpoint_addr_context(mx_endpoint_addr_t endpoint_addr,
                                         void **context);

/* Drop registration-cache entries overlapping [ptr, ptr+len); returns 0 (MX internal). */
int mx__regcache_clean(void *ptr, size_t len);

/* ------------------------------------------------------------------------
 * omx extension: memory exposed to one-sided access
 *
 * mx_iput() and mx_iget() only ever touch memory that its owner exposed on
 * the destination endpoint with omx_expose_region().
 *
 * - remote_addr of mx_iput()/mx_iget() is the address of the target bytes
 *   in the owner's address space (as in MX); region_id is the owner's name
 *   for the region, used to withdraw it.
 * - The owner accepts an access only if the whole range
 *   [remote_addr, remote_addr + length) lies inside one single region
 *   exposed on that endpoint with the needed permission (OMX_REGION_WRITE
 *   for mx_iput, OMX_REGION_READ for mx_iget).  A zero-length access is
 *   checked the same way.
 * - Otherwise (range partly or wholly outside every exposed region, region
 *   withdrawn, permission missing) the initiator's request completes with
 *   status code MX_STATUS_BAD_RDMAWIN and xfer_length 0, and not one byte
 *   of the owner's memory is read or written.
 * - Regions may overlap.  Closing the endpoint withdraws all its regions.
 * ------------------------------------------------------------------------ */

/* Feature macro: omx_expose_region()/omx_unexpose_region() are available. */
#define OMX_HAS_EXPOSE_REGION 1

/* Permission flags of an exposed region (may be or-ed). */
#define OMX_REGION_READ 1  /* remote mx_iget() may read it */
#define OMX_REGION_WRITE 2 /* remote mx_iput() may write it */

/* Expose [addr, addr+len) to remote mx_iput/mx_iget on an endpoint, as region_id.
 *
 * region_id is chosen by the caller and must be unique on the endpoint.
 * Errors: MX_BAD_PARAM_VAL (NULL address, zero length, range wrapping
 * around, flags zero or with unknown bits), MX_BUSY (region_id already
 * exposed on the endpoint), MX_NO_RESOURCES (no room for another region). */
mx_return_t omx_expose_region(mx_endpoint_t ep, void *addr, size_t len,
                              uint64_t region_id, uint32_t flags);

/* Feature macro: omx_expose_window() is available. */
#define OMX_HAS_EXPOSE_WINDOW 1

/* omx_expose_region() whose bytes remote accesses name from window on rather
 * than from addr: mx_iput()/mx_iget() at remote_addr window + i reach byte i.
 * Windows that name nothing else (e.g. a key in the high bits) make the
 * region reachable only by those who know the window. Errors as
 * omx_expose_region(), and MX_BAD_PARAM_VAL if window + len wraps around. */
mx_return_t omx_expose_window(mx_endpoint_t ep, void *addr, size_t len,
                              uint64_t window, uint64_t region_id, uint32_t flags);

/* Withdraw an exposed region: once this returns, no remote access touches it.
 *
 * Accesses in progress either finished before the call returned or fail
 * with MX_STATUS_BAD_RDMAWIN.  Errors: MX_BAD_PARAM_VAL (region_id is not
 * exposed on the endpoint). */
mx_return_t omx_unexpose_region(mx_endpoint_t ep, uint64_t region_id);

/* Feature macro: omx_iput_notify() is available. */
#define OMX_HAS_IPUT_NOTIFY 1

/* Largest notice of omx_iput_notify(), in bytes. */
#define OMX_PUT_NOTICE_MAX 64

/* mx_iput() that, once the data is in place at dest, sends dest an ordinary
 * message with match info notice_match and the notice_length bytes at notice
 * (copied at the call). omx's progress sends it: the caller need not test or
 * wait for the put first. A refused put sends no notice. Errors as mx_iput(),
 * and MX_BAD_PARAM_VAL (notice_length above OMX_PUT_NOTICE_MAX, NULL notice). */
mx_return_t omx_iput_notify(mx_endpoint_t ep, void *local_addr, uint32_t length,
                            mx_endpoint_addr_t dest, uint64_t remote_addr,
                            uint64_t notice_match, const void *notice,
                            uint32_t notice_length, void *context,
                            mx_request_t *request);

/* ------------------------------------------------------------------------
 * omx extension: remote atomics on exposed memory (native wire mode)
 *
 * op and datatype take libfabric's enum fi_op (FI_MIN .. FI_MSWAP) and enum
 * fi_datatype (FI_INT8 .. FI_DOUBLE) values. count elements at remote_addr
 * are combined with operand (and compare for the compare operations); the
 * owner's progress applies requests one at a time (per process), so
 * concurrent initiators never lose an update; they are not atomic against
 * the owner application's own stores. A request needs OMX_REGION_WRITE
 * (FI_ATOMIC_READ: OMX_REGION_READ; fetching kinds: both) over the whole
 * range; otherwise it completes with MX_STATUS_BAD_RDMAWIN and nothing is
 * read or written. The request completes as a receive: xfer_length is the
 * bytes of old values written to result (0 for OMX_ATOMIC_PLAIN). Values are
 * in the owner's byte order.
 * ------------------------------------------------------------------------ */

#define OMX_HAS_ATOMIC 1

#define OMX_ATOMIC_PLAIN 0   /* fi_atomic: no old values */
#define OMX_ATOMIC_FETCH 1   /* fi_fetch_atomic: old values into result */
#define OMX_ATOMIC_COMPARE 2 /* fi_compare_atomic: compare vector, old values */

/* Largest operand vector of one request, in bytes. */
#define OMX_ATOMIC_MAX_BYTES 48

typedef struct {
  uint32_t op, datatype, kind, count;
  const void *operand; /* count elements; unused by FI_ATOMIC_READ */
  const void *compare; /* count elements, compare operations only */
  void *result;        /* count elements, fetching kinds only */
} omx_atomic_t;

/* Posts a remote atomic. Errors: MX_BAD_PARAM_VAL (unknown op, type or kind,
 * count 0 or above omx_atomic_valid()), MX_BAD_SEG_LIST (a needed buffer is
 * NULL), MX_BAD_REQUEST (bad address, or the partner lacks one-sided
 * operations: MX wire mode). */
mx_return_t omx_iatomic(mx_endpoint_t ep, const omx_atomic_t *atomic,
                        mx_endpoint_addr_t dest, uint64_t remote_addr, void *context,
                        mx_request_t *request);

/* Largest count of one omx_iatomic() of op on datatype as kind; 0: invalid. */
size_t omx_atomic_valid(uint32_t op, uint32_t datatype, uint32_t kind);

/* Feature macro: omx_test_any_completed() is available. */
#define OMX_HAS_TEST_ANY_COMPLETED 1

/* mx_test_any() without a progress pass: takes the oldest request that has
 * already completed and matches (match_info, match_mask), if any.
 *
 * A caller draining several completions calls mx_test_any() once (it polls
 * the network) and this for the rest, which avoids a poll per completion.
 * Errors as mx_test_any(). */
mx_return_t omx_test_any_completed(mx_endpoint_t ep, uint64_t match_info,
                                   uint64_t match_mask, mx_status_t *status,
                                   uint32_t *result);

/* ------------------------------------------------------------------------
 * omx extension: asynchronous memory copies
 *
 * Usable without mx_init() or any endpoint; errors are returned, never given
 * to the error handler.  Copies run on the host's copy service (omx_copyd,
 * OMX_COPY_SERVICE) when one answers, otherwise on the process's own copy
 * thread.  The copies of a process are numbered by cookies from 1 in the
 * order they were started and complete in that order: a copy is complete
 * when every earlier one is.  Until then the caller keeps both ranges valid
 * and does not touch the destination.  See docs/COPY.md.
 * ------------------------------------------------------------------------ */

/* Feature macro: omx_memcpy_async()/omx_memcpy_test()/omx_memcpy_wait(). */
#define OMX_HAS_MEMCPY_ASYNC 1

/* Start copying len bytes from src to dst; *cookie names the copy.
 * Waits while the copy engine's queue is full.  len 0 is a valid copy.
 * Errors: MX_BAD_PARAM_VAL (NULL cookie, NULL address with len > 0, a range
 * wrapping around, overlapping src and dst), MX_NO_RESOURCES (no copy
 * engine could be started). */
mx_return_t omx_memcpy_async(void *dst, const void *src, size_t len,
                             uint64_t *cookie);

/* *done = 1 if the copy named cookie is complete, else 0.
 * Errors: MX_BAD_PARAM_VAL (NULL done, cookie never given out, or the copy
 * service could not access the memory). */
mx_return_t omx_memcpy_test(uint64_t cookie, uint32_t *done);

/* Wait until the copy named cookie is complete.  Errors as omx_memcpy_test(). */
mx_return_t omx_memcpy_wait(uint64_t cookie);

/* ------------------------------------------------------------------------
 * omx extension: naming peers the sockets way (IP addresses, host names,
 * ports), for the libfabric provider and sockets-style layers.
 * ------------------------------------------------------------------------ */

/* Feature macro: omx_resolve_node()/omx_port_endpoint() are available. */
#define OMX_HAS_RESOLVE_NODE 1

/* The nic id of the omx board that owns node: an IPv4 or IPv6 address
 * ("10.0.0.2", "fd00::2", "[fd00::2]"), a host name resolving to one, a
 * loopback address or "localhost" (this host), or an omx board name
 * ("host:board", or "host" for "host:0"). Addresses of this host's
 * interfaces give this host's board; a peer's address is looked up in the
 * file named by OMX_IPMAP ("ADDRESS BOARD-NAME-OR-MAC" lines), then in the
 * kernel's neighbour table of an omx interface (resolved on demand). Waits
 * up to timeout_ms for that resolution or for discovery to learn a name.
 * Errors: MX_BAD_PARAM_VAL (NULL argument), MX_HOST_NOT_FOUND. */
mx_return_t omx_resolve_node(const char *node, uint32_t timeout_ms,
                             uint64_t *nic_id);

/* The MX endpoint index and connection key that carry port number port:
 * index port mod 31, key OMX_PORT_KEY_BASE | port. A process binding a port
 * opens that index with that key; a client naming (node, port) connects to
 * it with that key, so it never reaches another port's endpoint (two ports
 * with the same index cannot both be bound on one host).
 * Errors: MX_BAD_PARAM_VAL (port above 65535, NULL argument). */
#define OMX_PORT_KEY_BASE 0x4f500000u
mx_return_t omx_port_endpoint(uint32_t port, uint32_t *endpoint_id,
                              uint32_t *key);

/* ------------------------------------------------------------------------
 * omx extension: waiting on a descriptor (poll/epoll) instead of in MX
 *
 * omx_endpoint_notify_fd() gives a descriptor of the endpoint (created on
 * first call, closed with the endpoint). omx_endpoint_arm_notify() clears it
 * and asks for one signal: the next request of the endpoint that completes
 * (on whichever thread: the progress thread makes progress while the
 * application sleeps) makes it readable. Completions that happened before
 * the call do not: arm, then look for completions (mx_test_any), then sleep
 * in poll() on the descriptor if there was none.
 * ------------------------------------------------------------------------ */

/* Feature macro: omx_endpoint_notify_fd()/omx_endpoint_arm_notify() exist. */
#define OMX_HAS_NOTIFY_FD 1

/* Errors: MX_BAD_PARAM_VAL (fd NULL), MX_NO_RESOURCES (no descriptor). */
mx_return_t omx_endpoint_notify_fd(mx_endpoint_t ep, int *fd);

/* MX_SUCCESS: armed, safe to sleep on the descriptor. MX_BUSY: armed, but
 * work under way (copies, queued local messages) completes without the
 * descriptor firing until it is done: poll the endpoint rather than sleep. */
mx_return_t omx_endpoint_arm_notify(mx_endpoint_t ep);

/* ------------------------------------------------------------------------
 * omx extension: typed segments
 *
 * A send or receive segment may be this process's memory, a range of an
 * open file, or another process's memory; kinds mix freely in one list of
 * up to 256 (MX_MAX_SEGMENTS), in every message class, large messages
 * included (the receiver pulls into a file range as into memory).  See
 * docs/API.md ("Typed segments") for the mapping to MX's address types.
 *
 * - OMX_SEG_MEMORY: length bytes at addr in this process (as mx_segment_t).
 * - OMX_SEG_FILE: length bytes of the file open as fd from offset; a send
 *   reads them with pread (fd open for reading, the file at least offset +
 *   length long), a receive writes them with pwrite (fd open for writing;
 *   the file grows as needed).  Regular files and block devices only.
 * - OMX_SEG_PROCESS: length bytes at addr in process pid, copied with
 *   process_vm_readv/process_vm_writev: allowed when the kernel lets this
 *   process ptrace pid (same user and Yama's ptrace_scope, or
 *   CAP_SYS_PTRACE).
 *
 * The segments are checked when the request is posted: an unknown kind, a
 * nonzero reserved field, a null address with bytes, a descriptor not open
 * for the direction or not seekable, a send's file range beyond the end of
 * the file, a process that does not exist, refuses access or has nothing
 * mapped at either end of the range: MX_BAD_SEG_LIST (through the error
 * handler, with the reason), and nothing is sent or posted.  A copy that
 * fails later (the file cut short, the process gone) completes the request
 * with MX_STATUS_ABORTED.  As with memory, the segments must stay valid
 * (descriptors open, processes alive) until the request completes.
 * ------------------------------------------------------------------------ */

/* Feature macro: omx_isend_typed()/omx_issend_typed()/omx_irecv_typed(). */
#define OMX_HAS_TYPED_SEGMENTS 1

#define OMX_SEG_MEMORY 0
#define OMX_SEG_FILE 1
#define OMX_SEG_PROCESS 2

typedef struct {
  uint32_t type;     /* OMX_SEG_MEMORY, OMX_SEG_FILE or OMX_SEG_PROCESS */
  int32_t fd;        /* OMX_SEG_FILE: the open file */
  uint32_t pid;      /* OMX_SEG_PROCESS: the process */
  uint32_t reserved; /* 0 */
  uint64_t addr;     /* OMX_SEG_MEMORY, OMX_SEG_PROCESS: the first byte */
  uint64_t offset;   /* OMX_SEG_FILE: the first byte's offset in the file */
  uint64_t length;   /* bytes (a message is at most 4 GiB - 1 in all) */
} omx_typed_segment_t;

/* mx_isend(), mx_issend() and mx_irecv() with typed segments; everything but
 * the segment list as those. */
mx_return_t omx_isend_typed(mx_endpoint_t ep, omx_typed_segment_t *segs,
                            uint32_t count, mx_endpoint_addr_t dest,
                            uint64_t match_info, void *context,
                            mx_request_t *request);
mx_return_t omx_issend_typed(mx_endpoint_t ep, omx_typed_segment_t *segs,
                             uint32_t count, mx_endpoint_addr_t dest,
                             uint64_t match_info, void *context,
                             mx_request_t *request);
mx_return_t omx_irecv_typed(mx_endpoint_t ep, omx_typed_segment_t *segs,
                            uint32_t count, uint64_t match_info,
                            uint64_t match_mask, void *context,
                            mx_request_t *request);

#ifdef __cplusplus
}
#endif

#endif /* MX_EXTENSIONS_H */
