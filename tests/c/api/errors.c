/* errors.c - the error-handler model and bad arguments of the endpoint and
 * communication calls: the documented code comes back through
 * MX_ERRORS_RETURN and is handed to a custom handler (global, or per
 * endpoint through MX_PARAM_ERROR_HANDLER), whose return value is what the
 * failing call returns. */
#include "common.h"

#include <sys/wait.h>

static int ep_calls;
static mx_return_t ep_last;

static mx_return_t ep_handler(char *msg, mx_return_t code) {
  (void)msg;
  ep_calls++;
  ep_last = code;
  return code;
}

/* A handler that maps every error to MX_NO_RESOURCES. */
static mx_return_t remap_handler(char *msg, mx_return_t code) {
  (void)msg;
  (void)code;
  return MX_NO_RESOURCES;
}

/* Expect an error (any code), reported once to record_handler with that code. */
#define CHECK_FAILS(call)                                                      \
  do {                                                                         \
    h_reset();                                                                 \
    mx_return_t rcf_ = (call);                                                 \
    CHECK(rcf_ != MX_SUCCESS, "%s succeeded, expected an error", #call);       \
    CHECK(h_calls == 1 && h_last == rcf_,                                      \
          "%s: handler called %d times with %d, call returned %d", #call,      \
          h_calls, (int)h_last, (int)rcf_);                                    \
  } while (0)

/* Child mode (errors busy N): another process opening index N gets MX_BUSY. */
static int busy_child(uint32_t index) {
  mx_endpoint_t ep = NULL;
  if (mx_init() != MX_SUCCESS)
    return 3;
  mx_set_error_handler(MX_ERRORS_RETURN);
  mx_return_t rc = mx_open_endpoint(0, index, TKEY, NULL, 0, &ep);
  if (rc != MX_BUSY)
    fprintf(stderr, "child: opening index %u held by another process: %d (%s)\n", index,
            (int)rc, mx_strerror(rc));
  return rc == MX_BUSY ? 0 : 1;
}

/* Run this program again as `errors busy N`; returns its exit status. */
static int spawn_busy_child(uint32_t index) {
  char arg[16];
  snprintf(arg, sizeof arg, "%u", index);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    execl("/proc/self/exe", "errors", "busy", arg, (char *)NULL);
    _exit(127);
  }
  int ws = 0;
  if (pid < 0 || waitpid(pid, &ws, 0) < 0)
    return -1;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128;
}

int main(int argc, char **argv) {
  mx_endpoint_t ep = NULL, e2 = NULL;
  mx_param_t p[2];
  char buf[64];
  mx_segment_t seg = {buf, sizeof buf};
  mx_request_t req = NULL;
  mx_status_t st;
  uint32_t result = 0;

  if (argc == 3 && strcmp(argv[1], "busy") == 0)
    return busy_child((uint32_t)atoi(argv[2]));
  t_init();

  /* ---- mx_open_endpoint arguments ---- */
  CHECK_ERR(mx_open_endpoint(0, 32, TKEY, NULL, 0, &ep), MX_BAD_ENDPOINT);
  CHECK_ERR(mx_open_endpoint(0, 1000, TKEY, NULL, 0, &ep), MX_BAD_ENDPOINT);
  CHECK_ERR(mx_open_endpoint(7, 0, TKEY, NULL, 0, &ep), MX_BOARD_UNKNOWN);
  CHECK_ERR(mx_open_endpoint(0, 0, TKEY, NULL, 1, &ep), MX_BAD_PARAM_LIST);
  memset(p, 0, sizeof p);
  p[0].key = (mx_param_key_t)7;
  CHECK_ERR(mx_open_endpoint(0, 0, TKEY, p, 1, &ep), MX_BAD_PARAM_NAME);
  p[0].key = MX_PARAM_CONTEXT_ID;
  p[0].val.context_id.bits = 17;
  p[0].val.context_id.shift = 0;
  CHECK_ERR(mx_open_endpoint(0, 0, TKEY, p, 1, &ep), MX_BAD_PARAM_VAL);
  p[0].val.context_id.bits = 16;
  p[0].val.context_id.shift = 49;
  CHECK_ERR(mx_open_endpoint(0, 0, TKEY, p, 1, &ep), MX_BAD_PARAM_VAL);
  /* the limits themselves are fine */
  p[0].val.context_id.shift = 48;
  CHECK_OK(mx_open_endpoint(0, 0, TKEY, p, 1, &ep));
  CHECK_OK(mx_close_endpoint(ep));
  p[0].key = MX_PARAM_UNEXP_QUEUE_MAX;
  p[0].val.unexp_queue_max = 1000;
  CHECK_OK(mx_open_endpoint(0, 0, TKEY, p, 1, &ep));
  CHECK_OK(mx_close_endpoint(ep));
  /* A NULL result pointer cannot be filled. */
  CHECK_FAILS(mx_open_endpoint(0, 0, TKEY, NULL, 0, NULL));

  /* ---- MX_BUSY: an index already open (in this process) ---- */
  ep = t_open(3, TKEY);
  CHECK_ERR(mx_open_endpoint(0, 3, TKEY, NULL, 0, &e2), MX_BUSY);
  CHECK_ERR(mx_open_endpoint(MX_ANY_NIC, 3, TKEY, NULL, 0, &e2), MX_BUSY);
  /* ... and in another process of the host */
  CHECK(spawn_busy_child(3) == 0, "another process could open an endpoint index in use");

  /* ---- every index taken: MX_ANY_ENDPOINT reports MX_BUSY ---- */
  {
    mx_endpoint_t all[32];
    uint32_t max = 0;
    int n = 0;
    CHECK_OK(mx_get_info(NULL, MX_MAX_NATIVE_ENDPOINTS, NULL, 0, &max, sizeof max));
    for (; n < 32; n++) {
      mx_endpoint_t x = NULL;
      h_reset();
      mx_return_t rc = mx_open_endpoint(MX_ANY_NIC, MX_ANY_ENDPOINT, TKEY, NULL, 0, &x);
      if (rc != MX_SUCCESS) {
        CHECK(rc == MX_BUSY, "ANY endpoint with every index taken: %s",
              mx_strerror(rc));
        CHECK(h_calls == 1 && h_last == MX_BUSY, "handler not told MX_BUSY");
        break;
      }
      all[n] = x;
      {
        mx_endpoint_addr_t a;
        long idx;
        CHECK_OK(mx_get_endpoint_addr(x, &a));
        idx = t_addr_eid(a, NULL);
        CHECK(idx >= 0 && idx < (long)max && idx != 3,
              "ANY endpoint got index %ld", idx);
      }
    }
    CHECK(n == (int)max - 1, "opened %d endpoints with MX_ANY_ENDPOINT, expected %u",
          n, max - 1);
    for (int i = 0; i < n && i < 32; i++)
      CHECK_OK(mx_close_endpoint(all[i]));
  }

  /* ---- communication arguments ---- */
  CHECK_ERR(mx_irecv(ep, &seg, 1, 0x1, 0x0, NULL, &req), MX_BAD_MATCH_MASK);
  CHECK_ERR(mx_irecv(ep, &seg, 1, 0xff00, 0x0f00, NULL, &req), MX_BAD_MATCH_MASK);
  CHECK_ERR(mx_test_any(ep, 0x3, 0x1, &st, &result), MX_BAD_MATCH_MASK);
  CHECK_ERR(mx_wait_any(ep, 10, 0x3, 0x1, &st, &result), MX_BAD_MATCH_MASK);
  CHECK_ERR(mx_iprobe(ep, 0x3, 0x1, &st, &result), MX_BAD_MATCH_MASK);
  CHECK_ERR(mx_probe(ep, 10, 0x3, 0x1, &st, &result), MX_BAD_MATCH_MASK);
  {
    mx_segment_t many[MX_MAX_SEGMENTS + 1];
    mx_endpoint_addr_t self;
    for (int i = 0; i <= MX_MAX_SEGMENTS; i++) {
      many[i].segment_ptr = buf;
      many[i].segment_length = 0;
    }
    CHECK_OK(mx_connect(ep, t_nic(), 3, TKEY, 5000, &self));
    CHECK_ERR(mx_irecv(ep, many, MX_MAX_SEGMENTS + 1, 0, MX_MATCH_MASK_NONE, NULL, &req),
              MX_BAD_SEG_CNT);
    CHECK_ERR(mx_isend(ep, many, MX_MAX_SEGMENTS + 1, self, 0, NULL, &req),
              MX_BAD_SEG_CNT);
    CHECK_ERR(mx_issend(ep, many, MX_MAX_SEGMENTS + 1, self, 0, NULL, &req),
              MX_BAD_SEG_CNT);
  }
  /* NULL where there is nothing to act on */
  CHECK_FAILS(mx_test(ep, NULL, &st, &result));
  req = NULL;
  CHECK_FAILS(mx_test(ep, &req, &st, &result));
  CHECK_FAILS(mx_wait(ep, &req, 10, &st, &result));
  CHECK_FAILS(mx_cancel(ep, &req, &result));
  CHECK_FAILS(mx_forget(ep, &req));
  CHECK_FAILS(mx_get_endpoint_addr(ep, NULL));
  CHECK_FAILS(mx_connect(ep, t_nic(), 3, TKEY, 1000, NULL));

  /* ---- custom handler return value is what the call returns ---- */
  {
    mx_error_handler_t prev = mx_set_error_handler(remap_handler);
    CHECK(prev == record_handler, "previous handler not returned");
    CHECK_RC(mx_open_endpoint(0, 40, TKEY, NULL, 0, &e2), MX_NO_RESOURCES);
    CHECK_RC(mx_irecv(ep, &seg, 1, 0x1, 0x0, NULL, &req), MX_NO_RESOURCES);
    prev = mx_set_error_handler(MX_ERRORS_RETURN);
    CHECK(prev == remap_handler, "previous handler not returned");
    CHECK_RC(mx_open_endpoint(0, 40, TKEY, NULL, 0, &e2), MX_BAD_ENDPOINT);
    CHECK_RC(mx_irecv(ep, &seg, 1, 0x1, 0x0, NULL, &req), MX_BAD_MATCH_MASK);
    mx_set_error_handler(record_handler);
  }

  /* ---- per-endpoint handler (MX_PARAM_ERROR_HANDLER) ---- */
  {
    mx_endpoint_t pe = NULL;
    memset(p, 0, sizeof p);
    p[0].key = MX_PARAM_ERROR_HANDLER;
    p[0].val.error_handler = ep_handler;
    CHECK_OK(mx_open_endpoint(0, 4, TKEY, p, 1, &pe));
    h_reset();
    ep_calls = 0;
    CHECK_RC(mx_irecv(pe, &seg, 1, 0x1, 0x0, NULL, &req), MX_BAD_MATCH_MASK);
    CHECK(ep_calls == 1 && ep_last == MX_BAD_MATCH_MASK,
          "endpoint handler: %d calls, last %d", ep_calls, (int)ep_last);
    CHECK(h_calls == 0, "global handler called for an endpoint error");
    /* errors of other endpoints still go to the global handler */
    ep_calls = 0;
    CHECK_ERR(mx_irecv(ep, &seg, 1, 0x1, 0x0, NULL, &req), MX_BAD_MATCH_MASK);
    CHECK(ep_calls == 0, "endpoint handler called for another endpoint");
    CHECK_OK(mx_close_endpoint(pe));
  }

  /* ---- use after close: MX_BAD_ENDPOINT ---- */
  {
    mx_endpoint_addr_t self;
    uint64_t nic = t_nic();
    CHECK_OK(mx_connect(ep, nic, 3, TKEY, 5000, &self));
    CHECK_OK(mx_close_endpoint(ep));
    req = NULL;
    CHECK_ERR(mx_close_endpoint(ep), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_isend(ep, &seg, 1, self, 1, NULL, &req), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_issend(ep, &seg, 1, self, 1, NULL, &req), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_irecv(ep, &seg, 1, 1, MX_MATCH_MASK_NONE, NULL, &req), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_test_any(ep, 0, 0, &st, &result), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_wait_any(ep, 10, 0, 0, &st, &result), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_ipeek(ep, &req, &result), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_peek(ep, 10, &req, &result), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_iprobe(ep, 0, 0, &st, &result), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_probe(ep, 10, 0, 0, &st, &result), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_wakeup(ep), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_progress(ep), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_disable_progression(ep), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_reenable_progression(ep), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_get_endpoint_addr(ep, &self), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_connect(ep, nic, 3, TKEY, 1000, &self), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_iconnect(ep, nic, 3, TKEY, 0, NULL, &req), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_disconnect(ep, self), MX_BAD_ENDPOINT);
    CHECK_ERR(mx_set_request_timeout(ep, NULL, 1000), MX_BAD_ENDPOINT);
    {
      uint32_t v;
      CHECK_ERR(mx_get_info(ep, MX_NIC_COUNT, NULL, 0, &v, sizeof v), MX_BAD_ENDPOINT);
    }
    /* the index is free again */
    ep = t_open(3, TKEY);
    CHECK_OK(mx_close_endpoint(ep));
  }

  /* mx_finalize with nothing open; calls after it report MX_NOT_INITIALIZED */
  CHECK_OK(mx_finalize());
  CHECK_ERR(mx_open_endpoint(0, 0, TKEY, NULL, 0, &ep), MX_NOT_INITIALIZED);
  {
    uint64_t nic = 0;
    uint32_t v = 0, b = 0;
    char name[MX_MAX_HOSTNAME_LEN];
    CHECK_ERR(mx_board_number_to_nic_id(0, &nic), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_nic_id_to_board_number(0, &b), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_hostname_to_nic_id((char *)"localhost", &nic), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_nic_id_to_hostname(0, name), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_get_info(NULL, MX_NIC_COUNT, NULL, 0, &v, sizeof v), MX_NOT_INITIALIZED);
  }
  DONE();
}
