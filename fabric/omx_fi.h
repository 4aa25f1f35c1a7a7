/* omx_fi.h - internal declarations of the libfabric provider "omx".
 *
 * The provider maps OFI objects onto the MX API of libmyriexpress: one MX
 * endpoint per fi_endpoint, one MX request per posted operation, MX match
 * information for OFI tags. See docs/LIBFABRIC.md for the design.
 */
#ifndef OMX_FI_H
#define OMX_FI_H

#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <rdma/fabric.h>
#include <rdma/fi_atomic.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/providers/fi_log.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>
#include <rdma/providers/fi_prov.h>

#include <myriexpress.h>
#include <mx_extensions.h>

#define OFX_NAME "omx"
#define OFX_PROV_VERSION FI_VERSION(0, 1)
#define OFX_KEY 0x0fab0fabu        /* MX connection key of every provider endpoint */
#define OFX_CONNECT_MS 10000u      /* bound of a (lazy) connect to a peer */
#define OFX_NIC_RETRY_MS 20u       /* retry period while a peer board is not known yet */
#define OFX_STEAL_MS 30000u        /* bound of the receive of a peeked message */
#define OFX_RESOLVE_MS 2000u       /* bound of resolving a node (neighbour, discovery) */
#define OFX_INDEX_SERVICES 32u     /* services below name MX endpoint indexes */

/* MX match information: bit 63 tells tagged from untagged messages, bits
 * 47..62 carry the sender's source id (for directed receives), bits 0..46
 * are the OFI tag. Untagged messages have tag 0. */
#define OFX_TAGGED_BIT (1ULL << 63)
#define OFX_SRC_SHIFT 47
#define OFX_SRC_MASK (0xffffULL << OFX_SRC_SHIFT)
#define OFX_TAG_MASK ((1ULL << OFX_SRC_SHIFT) - 1)
/* An RMA write's remote CQ data travels as an untagged message with this tag
 * bit, which untagged receives (tag 0 only) never match. */
#define OFX_NOTIFY_BIT (1ULL << (OFX_SRC_SHIFT - 1))

/* Every message starts with this header, a separate MX segment: the remote CQ
 * data and whether there is any. Reported lengths never include it. */
struct ofx_hdr {
  uint32_t data;
  uint32_t flags;
};
#define OFX_HDR_DATA 1u
#define OFX_HDR_LEN ((uint32_t)sizeof(struct ofx_hdr))

/* Operation flag of the fi_inject* calls (a bit libfabric leaves to
 * providers): no completion at all. The FI_INJECT flag itself only means the
 * buffer is free at return; such a send still completes. */
#define OFX_NO_COMPLETION (1ULL << 61)

#define OFX_IOV_LIMIT 255 /* MX takes 256 segments; one is the header */
#define OFX_INJECT_SIZE 4096
#define OFX_MAX_MSG ((size_t)UINT32_MAX - OFX_HDR_LEN)

/* The name of an endpoint (fi_getname, fi_av_insert): 16 bytes. */
struct ofx_name {
  uint64_t nic_id;
  uint32_t eid;
  uint32_t key;
};

#define OFX_CAPS                                                               \
  (FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM |   \
   FI_DIRECTED_RECV | FI_SOURCE | FI_MULTI_RECV)
#define OFX_MIN_MULTI_RECV 64 /* default FI_OPT_MIN_MULTI_RECV */
/* RMA and atomics, only when asked for: MX one-sided put/get and omx's
 * remote atomics into keyed windows. */
#define OFX_RMA_CAPS                                                           \
  (FI_RMA | FI_ATOMIC | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
/* The primary caps that reach registered memory of a peer. */
#define OFX_REMOTE_CAPS (FI_RMA | FI_ATOMIC)

struct ofx_fabric {
  struct fid_fabric fid;
};

struct ofx_domain {
  struct fid_domain fid;
  pthread_mutex_t lock; /* the provider lock: every object of the domain */
  bool serialized;      /* FI_THREAD_DOMAIN: the application serializes, no lock */
  int refs;             /* objects opened on it */
  uint64_t caps;
  enum fi_av_type av_type;
  uint64_t mr_key; /* next key handed out by fi_mr_reg */
  bool prov_key;   /* FI_MR_PROV_KEY: remote keys are the provider's (random) */
  struct ofx_mr *mrs;  /* registrations with remote access */
  struct ofx_ep *eps;  /* endpoints, to expose them on */
};

struct ofx_ep;

/* A memory registration. With remote access it is exposed on every enabled
 * endpoint of its domain as MX window key << 32 (omx_fi_rma.c). */
struct ofx_mr {
  struct fid_mr mr;
  struct ofx_domain *dom;
  char *base;
  size_t len;
  uint32_t expose; /* OMX_REGION_READ/WRITE: remote access, 0: local only */
  struct ofx_mr *next; /* the domain's remotely accessible registrations */
};

struct ofx_av_entry {
  struct ofx_name name;
  bool used;
};

struct ofx_av_shm;

struct ofx_av {
  struct fid_av fid;
  struct ofx_domain *dom;
  enum fi_av_type type;
  struct ofx_av_entry *tab;
  size_t n, cap;   /* entries used so far (fi_addr = index), allocated */
  struct ofx_ep **eps; /* endpoints bound to it (their connection caches) */
  size_t neps;
  /* A named (shared) AV: tab lives in shared memory; see omx_fi_av.c. */
  struct ofx_av_shm *shm;
  size_t shm_len;
  bool read_only; /* opened FI_READ: another process inserts */
  char *shm_name; /* the creator's, unlinked at close */
};

/* Entries of an AV (a shared one: as many as its creator inserted so far). */
size_t ofx_av_len(struct ofx_av *av);

/* A completion waiting in a CQ. */
struct ofx_cqe {
  void *ctx;
  uint64_t flags;
  size_t len;
  void *buf;
  uint64_t data;
  uint64_t tag;
  fi_addr_t src;
  int err; /* positive FI_E* errno, 0 = success */
  size_t olen;
  int prov_errno;
};

struct ofx_queue {
  struct ofx_cqe *e;
  size_t head, count, cap;
};

/* A wait object: see omx_fi_wait.c. -1 descriptors: none. */
struct ofx_wait {
  int epfd;  /* the set handed out by FI_GETWAIT */
  int sigfd; /* fi_cq_signal, counter updates */
};

struct ofx_cntr {
  struct fid_cntr fid;
  struct ofx_domain *dom;
  uint64_t value, errs;
  struct ofx_ep **eps; /* endpoints bound to it, drained on read */
  size_t neps;
  enum fi_wait_obj wait_obj;
  struct ofx_wait wait;
  int polls; /* poll sets holding it */
};

struct ofx_cq {
  struct fid_cq fid;
  struct ofx_domain *dom;
  enum fi_cq_format format;
  enum fi_wait_obj wait_obj;
  struct ofx_wait wait; /* FI_WAIT_FD only */
  struct ofx_queue ok, errs;
  struct ofx_ep **eps; /* endpoints bound to it, drained on read */
  size_t neps;
  bool signaled; /* fi_cq_signal: the next (or current) fi_cq_sread returns */
  int polls;     /* poll sets holding it */
};

struct ofx_eq {
  struct fid_eq fid;
  struct ofx_domain *dom; /* NULL: opened on the fabric */
};

enum ofx_op_kind { OFX_OP_SEND, OFX_OP_RECV, OFX_OP_WRITE, OFX_OP_READ };

/* One posted operation: the context of its MX request. */
struct ofx_op {
  enum ofx_op_kind kind;
  struct ofx_ep *ep;
  void *ctx;
  uint64_t flags;  /* FI_SEND/FI_RECV | FI_MSG/FI_TAGGED */
  bool report;     /* write a completion on success */
  bool quiet;      /* injected: no completion, not even an error */
  bool pooled;     /* goes back to the endpoint's free list */
  void *buf;       /* first user buffer (completion field buf) */
  mx_request_t req;
  struct ofx_hdr hdr;
  struct ofx_op *prev, *next; /* pending receives of the endpoint */
  bool notify;          /* the standing receive of RMA write notifications */
  uint64_t rma_len;     /* a notification's payload: the write's length */
  /* FI_MULTI_RECV: the buffer, the bytes used, and the match of its receives */
  bool multi;
  char *mr_base;
  size_t mr_len, mr_off;
  uint64_t mr_match, mr_mask;
};

/* A message taken out of MX by a peek (see omx_fi_ep.c). */
struct ofx_stash {
  struct ofx_stash *next;
  uint64_t match;
  fi_addr_t src;
  struct ofx_hdr hdr;
  size_t len; /* payload bytes held */
  void *data;
  void *claim_ctx; /* FI_CLAIM: the context that claimed it */
  bool claimed;
};

struct ofx_ep {
  struct fid_ep fid;
  struct ofx_domain *dom;
  uint64_t caps;
  uint64_t tx_op_flags, rx_op_flags;
  struct ofx_cq *tx_cq, *rx_cq;
  struct ofx_cntr *tx_cntr, *rx_cntr, *rd_cntr, *wr_cntr;
  struct ofx_ep *dom_next; /* the domain's endpoints */
  bool tx_selective, rx_selective;
  struct ofx_av *av;
  mx_endpoint_t mx;
  bool enabled;
  uint32_t want_eid; /* MX endpoint index to open (MX_ANY_ENDPOINT) */
  uint32_t want_key; /* its connection key: OFX_KEY, or a bound port's */
  struct ofx_name name;
  uint16_t src_id;    /* our source id in the match bits */
  uint32_t copy_send_max; /* MX_COPY_SEND_MAX: sends MX copies at post */
  size_t min_multi_recv;  /* FI_OPT_MIN_MULTI_RECV: release below this room */
  mx_endpoint_addr_t *conn; /* per AV index: connected MX address */
  bool *conn_ok;
  size_t conn_cap;
  struct ofx_op pending; /* sentinel of the list of pending operations */
  struct ofx_op *free_ops;
  struct ofx_stash *stash, **stash_tail;
};

/* omx_fi.c */
extern struct fi_provider ofx_prov;
int ofx_mx_init(void);
int ofx_errno(mx_return_t rc);
int ofx_lookup_host(const char *node, uint64_t *nic);
int ofx_parse_service(const char *service, uint32_t *eid, uint32_t *key);
void ofx_lock(struct ofx_domain *d);
void ofx_unlock(struct ofx_domain *d);
int ofx_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
                struct fid_eq **eq, void *context);

/* omx_fi_av.c */
int ofx_av_open(struct fid_domain *domain, struct fi_av_attr *attr,
                struct fid_av **av, void *context);
uint16_t ofx_src_id(uint64_t nic_id, uint32_t eid);
fi_addr_t ofx_av_find(struct ofx_av *av, uint64_t nic_id, uint32_t eid);
int ofx_av_attach(struct ofx_av *av, struct ofx_ep *ep);
void ofx_av_detach(struct ofx_av *av, struct ofx_ep *ep);

/* omx_fi_cq.c */
int ofx_cq_open(struct fid_domain *domain, struct fi_cq_attr *attr,
                struct fid_cq **cq, void *context);
int ofx_cq_push(struct ofx_cq *cq, const struct ofx_cqe *e);
int ofx_cq_attach(struct ofx_cq *cq, struct ofx_ep *ep);
void ofx_cq_detach(struct ofx_cq *cq, struct ofx_ep *ep);

int ofx_cq_trywait(struct ofx_cq *cq);
bool ofx_cq_ready_locked(struct ofx_cq *cq);

/* omx_fi_wait.c */
int ofx_wait_init(struct ofx_wait *w);
void ofx_wait_fini(struct ofx_wait *w);
int ofx_wait_watch(struct ofx_wait *w, struct ofx_ep *ep, bool on);
void ofx_wait_signal(struct ofx_wait *w);
void ofx_wait_clear_signal(struct ofx_wait *w);
bool ofx_arm_eps(struct ofx_ep **eps, size_t n);
void ofx_wait_sleep(struct ofx_wait *w, bool safe, int timeout_ms);
double ofx_now_ms(void);
int ofx_left_ms(double deadline);
int ofx_cntr_open(struct fid_domain *domain, struct fi_cntr_attr *attr,
                  struct fid_cntr **cntr, void *context);
void ofx_cntr_count(struct ofx_cntr *c, bool err);
int ofx_cntr_attach(struct ofx_cntr *c, struct ofx_ep *ep);
void ofx_cntr_detach(struct ofx_cntr *c, struct ofx_ep *ep);
int ofx_trywait(struct fid_fabric *fabric, struct fid **fids, int count);
uint64_t ofx_cntr_events_locked(struct ofx_cntr *c);

/* omx_fi_poll.c */
int ofx_poll_open(struct fid_domain *domain, struct fi_poll_attr *attr,
                  struct fid_poll **pollset);

/* omx_fi_rma.c */
extern struct fi_ops_rma ofx_rma_ops;
extern struct fi_ops_atomic ofx_atomic_ops;
int ofx_query_atomic(struct fid_domain *d, enum fi_datatype t, enum fi_op o,
                     struct fi_atomic_attr *a, uint64_t flags);
int ofx_mr_reg_remote(struct ofx_mr *m, uint64_t access, uint64_t requested_key);
void ofx_mr_unexpose(struct ofx_mr *m);
int ofx_mr_expose_all(struct ofx_ep *ep);
void ofx_domain_forget_ep(struct ofx_domain *d, struct ofx_ep *ep);
int ofx_rma_listen(struct ofx_ep *ep);

/* omx_fi_ep.c */
struct ofx_op *ofx_op_get(struct ofx_ep *ep, size_t extra);
void ofx_op_put(struct ofx_ep *ep, struct ofx_op *op);
void ofx_op_track(struct ofx_ep *ep, struct ofx_op *op);
int ofx_get_conn(struct ofx_ep *ep, fi_addr_t dest, mx_endpoint_addr_t *out);
int ofx_notify_post(struct ofx_ep *ep, struct ofx_op *op);
int ofx_endpoint(struct fid_domain *domain, struct fi_info *info,
                 struct fid_ep **ep, void *context);
/* Moves up to `max` MX completions of `ep` into its CQs; `polled`: the caller
 * polls `ep`'s network itself (a wait in MX), so only completed requests are
 * taken, without a pass over the network. */
size_t ofx_ep_progress(struct ofx_ep *ep, size_t max, bool polled);
void ofx_ep_forget_conn(struct ofx_ep *ep, fi_addr_t addr);

#endif
