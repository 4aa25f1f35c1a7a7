/* knobs.c - the original's process knobs read at endpoint open:
 * OMX_ANY_ENDPOINT (the index MX_ANY_ENDPOINT takes), OMX_CTXIDS (context-id
 * split of endpoints opened without MX_PARAM_CONTEXT_ID; an explicit
 * parameter wins), OMX_PROCESS_BINDING (CPU binding by endpoint index), and
 * an inert knob (OMX_RCACHE) that is accepted. */
#define _GNU_SOURCE
#include "common.h"

#include <sched.h>

static uint32_t eid_of(mx_endpoint_t ep) {
  mx_endpoint_addr_t a;
  uint64_t nic = 0;
  uint32_t eid = 0;
  CHECK_OK(mx_get_endpoint_addr(ep, &a));
  CHECK_OK(mx_decompose_endpoint_addr(a, &nic, &eid));
  return eid;
}

int main(void) {
  setenv("OMX_ANY_ENDPOINT", "5", 1);
  setenv("OMX_CTXIDS", "4,60", 1);
  setenv("OMX_PROCESS_BINDING", "all:0", 1);
  setenv("OMX_RCACHE", "1", 1);
  t_init();

  /* MX_ANY_ENDPOINT takes OMX_ANY_ENDPOINT's index; the process is bound. */
  mx_endpoint_t any = NULL;
  CHECK_OK(mx_open_endpoint(0, MX_ANY_ENDPOINT, TKEY, NULL, 0, &any));
  REQUIRE(any != NULL, "no endpoint");
  CHECK(eid_of(any) == 5, "MX_ANY_ENDPOINT opened %u, OMX_ANY_ENDPOINT=5", eid_of(any));
  cpu_set_t set;
  CPU_ZERO(&set);
  CHECK(sched_getaffinity(0, sizeof set, &set) == 0, "sched_getaffinity");
  CHECK(CPU_ISSET(0, &set) && CPU_COUNT(&set) == 1,
        "OMX_PROCESS_BINDING=all:0 left %d CPUs", CPU_COUNT(&set));

  /* OMX_CTXIDS=4,60: context bits 60..63; a receive whose mask leaves them out
   * is refused, one that covers them is taken. */
  char buf[8];
  mx_segment_t seg = {buf, sizeof buf};
  mx_request_t r;
  CHECK_ERR(mx_irecv(any, &seg, 1, 0, 0, NULL, &r), MX_BAD_MATCHING_FOR_CONTEXT_ID_MASK);
  CHECK_OK(mx_irecv(any, &seg, 1, 1ULL << 60, 0xfULL << 60, NULL, &r));
  uint32_t cancelled = 0;
  CHECK_OK(mx_cancel(any, &r, &cancelled));
  CHECK(cancelled == 1, "receive not cancelled");

  /* An explicit MX_PARAM_CONTEXT_ID without bits overrides OMX_CTXIDS. */
  mx_param_t p;
  memset(&p, 0, sizeof p);
  p.key = MX_PARAM_CONTEXT_ID;
  p.val.context_id.bits = 0;
  p.val.context_id.shift = 0;
  mx_endpoint_t plain = NULL;
  CHECK_OK(mx_open_endpoint(0, 2, TKEY, &p, 1, &plain));
  REQUIRE(plain != NULL, "no endpoint 2");
  CHECK_OK(mx_irecv(plain, &seg, 1, 0, 0, NULL, &r));
  CHECK_OK(mx_cancel(plain, &r, &cancelled));

  CHECK_OK(mx_close_endpoint(plain));
  CHECK_OK(mx_close_endpoint(any));
  mx_finalize();
  DONE();
}
