/* init.c - mx_init / mx__init_api, mx_finalize, mx_set_error_handler and the
 * default error handlers (MX_ERRORS_ARE_FATAL, MX_ERRORS_RETURN,
 * OMX_FATAL_ERRORS=0, its MX name MX_ERRORS_ARE_FATAL=0 in the environment,
 * ignored under OMX_IGNORE_MX_ENV=1).
 *
 * The fatal-handler cases run in forked children before the parent touches
 * the library (no library threads exist yet at fork time). */
#include "common.h"

#include <sys/wait.h>

/* Run fn() in a child; returns its raw wait status. */
static int in_child(void (*fn)(void)) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(2);
  }
  if (pid == 0) {
    fn();
    _exit(0);
  }
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
  }
  return ws;
}

/* Default handler before mx_init is fatal: a failing call ends the process. */
static void child_fail_before_init(void) {
  mx_endpoint_t ep;
  unsetenv("OMX_FATAL_ERRORS");
  unsetenv("MX_ERRORS_ARE_FATAL");
  mx_open_endpoint(0, 0, TKEY, NULL, 0, &ep);
  _exit(0); /* reaching this means the error was not fatal */
}

/* After mx_init without OMX_FATAL_ERRORS the default handler is fatal. */
static void child_fatal_default(void) {
  mx_endpoint_t ep;
  unsetenv("OMX_FATAL_ERRORS");
  unsetenv("MX_ERRORS_ARE_FATAL");
  if (mx_init() != MX_SUCCESS)
    _exit(3);
  mx_open_endpoint(0, 99, TKEY, NULL, 0, &ep);
  _exit(0);
}

/* OMX_FATAL_ERRORS=0: the default handler returns the code. */
static void child_fatal_off(void) {
  mx_endpoint_t ep;
  setenv("OMX_FATAL_ERRORS", "0", 1);
  if (mx_init() != MX_SUCCESS)
    _exit(3);
  mx_return_t rc = mx_open_endpoint(0, 99, TKEY, NULL, 0, &ep);
  _exit(rc == MX_BAD_ENDPOINT ? 0 : 4);
}

/* MX_ERRORS_ARE_FATAL installed explicitly overrides OMX_FATAL_ERRORS=0. */
static void child_explicit_fatal(void) {
  mx_endpoint_t ep;
  setenv("OMX_FATAL_ERRORS", "0", 1);
  if (mx_init() != MX_SUCCESS)
    _exit(3);
  mx_set_error_handler(MX_ERRORS_ARE_FATAL);
  mx_open_endpoint(0, 99, TKEY, NULL, 0, &ep);
  _exit(0);
}

/* MX_ERRORS_RETURN installed explicitly overrides the fatal default. */
static void child_explicit_return(void) {
  mx_endpoint_t ep;
  unsetenv("OMX_FATAL_ERRORS");
  unsetenv("MX_ERRORS_ARE_FATAL");
  if (mx_init() != MX_SUCCESS)
    _exit(3);
  mx_set_error_handler(MX_ERRORS_RETURN);
  mx_return_t rc = mx_open_endpoint(0, 99, TKEY, NULL, 0, &ep);
  _exit(rc == MX_BAD_ENDPOINT ? 0 : 4);
}

/* MX_ERRORS_ARE_FATAL=0 in the environment (the original's name) acts as
 * OMX_FATAL_ERRORS=0... */
static void child_mx_env_alias(void) {
  mx_endpoint_t ep;
  unsetenv("OMX_FATAL_ERRORS");
  unsetenv("OMX_IGNORE_MX_ENV");
  setenv("MX_ERRORS_ARE_FATAL", "0", 1);
  if (mx_init() != MX_SUCCESS)
    _exit(3);
  mx_return_t rc = mx_open_endpoint(0, 99, TKEY, NULL, 0, &ep);
  _exit(rc == MX_BAD_ENDPOINT ? 0 : 4);
}

/* ...unless OMX_IGNORE_MX_ENV=1: the default stays fatal. */
static void child_mx_env_ignored(void) {
  mx_endpoint_t ep;
  unsetenv("OMX_FATAL_ERRORS");
  setenv("OMX_IGNORE_MX_ENV", "1", 1);
  setenv("MX_ERRORS_ARE_FATAL", "0", 1);
  if (mx_init() != MX_SUCCESS)
    _exit(3);
  mx_open_endpoint(0, 99, TKEY, NULL, 0, &ep);
  _exit(0);
}

static int died(int ws) {
  return (WIFEXITED(ws) && WEXITSTATUS(ws) != 0 && WEXITSTATUS(ws) != 3) ||
         WIFSIGNALED(ws);
}

static mx_return_t other_handler(char *msg, mx_return_t code) {
  (void)msg;
  return code;
}

int main(void) {
  int ws;

  ws = in_child(child_fail_before_init);
  CHECK(died(ws), "an error before mx_init did not end the process (status %#x)",
        ws);
  CHECK(WIFEXITED(ws), "error before mx_init: killed by a signal instead of exiting (status %#x)",
        ws);
  ws = in_child(child_fatal_default);
  CHECK(died(ws), "default handler after mx_init is not fatal (status %#x)", ws);
  CHECK(WIFEXITED(ws), "fatal handler crashed instead of exiting (status %#x)",
        ws);
  ws = in_child(child_fatal_off);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
        "OMX_FATAL_ERRORS=0: error not returned (status %#x)", ws);
  ws = in_child(child_explicit_fatal);
  CHECK(died(ws), "MX_ERRORS_ARE_FATAL did not end the process (status %#x)",
        ws);
  ws = in_child(child_mx_env_alias);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
        "MX_ERRORS_ARE_FATAL=0 in the environment: error not returned (status %#x)", ws);
  ws = in_child(child_mx_env_ignored);
  CHECK(died(ws), "OMX_IGNORE_MX_ENV=1 did not ignore MX_ERRORS_ARE_FATAL=0 (status %#x)", ws);
  ws = in_child(child_explicit_return);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
        "MX_ERRORS_RETURN did not make the call return (status %#x)", ws);

  /* The two predefined handlers exist and differ. */
  CHECK(MX_ERRORS_ARE_FATAL != NULL && MX_ERRORS_RETURN != NULL,
        "predefined handlers are NULL");
  CHECK(MX_ERRORS_ARE_FATAL != MX_ERRORS_RETURN, "predefined handlers equal");

  /* API version check, reported through a handler installed before init. */
  mx_error_handler_t prev = mx_set_error_handler(record_handler);
  CHECK(prev != NULL, "no default handler before mx_init");
  CHECK_ERR(mx__init_api(0), MX_BAD_LIB_VERSION);
  CHECK_ERR(mx__init_api(0x201), MX_BAD_LIB_VERSION);
  CHECK_ERR(mx__init_api(0x401), MX_BAD_LIB_VERSION);
  CHECK(MX_API == 0x301, "MX_API is %#x", MX_API);

  /* Not initialised yet: opening fails, and so does every query of the boards,
   * the peer table or the library (spec 8.1: before mx_init the library is not
   * initialised; 4.1: MX_NOT_INITIALIZED). */
  {
    mx_endpoint_t ep;
    uint64_t nic = 0;
    uint32_t v = 0, b = 0;
    char name[MX_MAX_HOSTNAME_LEN];
    CHECK_ERR(mx_open_endpoint(0, 0, TKEY, NULL, 0, &ep), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_board_number_to_nic_id(0, &nic), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_nic_id_to_board_number(0, &b), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_hostname_to_nic_id((char *)"localhost", &nic), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_nic_id_to_hostname(0, name), MX_NOT_INITIALIZED);
    CHECK_ERR(mx_get_info(NULL, MX_NIC_COUNT, NULL, 0, &v, sizeof v), MX_NOT_INITIALIZED);
  }

  /* Only the major part (high byte) of the API version matters. */
  CHECK_OK(mx__init_api(0x300));
  mx_set_error_handler(record_handler);
  CHECK_ERR(mx_init(), MX_ALREADY_INITIALIZED);
  CHECK_OK(mx_finalize());

  CHECK_OK(mx_init());
  mx_set_error_handler(record_handler);
  CHECK_ERR(mx_init(), MX_ALREADY_INITIALIZED);
  CHECK_ERR(mx__init_api(MX_API), MX_ALREADY_INITIALIZED);

  /* mx_set_error_handler returns the previous handler (MX semantics). */
  prev = mx_set_error_handler(other_handler);
  CHECK(prev == record_handler, "set_error_handler returned %p, expected the previous %p",
        (void *)(uintptr_t)prev, (void *)(uintptr_t)record_handler);
  prev = mx_set_error_handler(MX_ERRORS_RETURN);
  CHECK(prev == other_handler, "set_error_handler did not return the previous handler");
  prev = mx_set_error_handler(record_handler);
  CHECK(prev == MX_ERRORS_RETURN, "set_error_handler did not return MX_ERRORS_RETURN");

  /* A working endpoint, then finalize and re-initialise cleanly. */
  uint32_t copy_max = 0, copy_max2 = 0;
  mx_endpoint_t ep = t_open(0, TKEY);
  CHECK_OK(mx_get_info(NULL, MX_COPY_SEND_MAX, NULL, 0, &copy_max, sizeof copy_max));
  CHECK(copy_max > 0, "MX_COPY_SEND_MAX is 0 with an endpoint open");
  CHECK_OK(mx_close_endpoint(ep));
  CHECK_OK(mx_finalize());
  {
    mx_endpoint_t e2;
    CHECK_ERR(mx_open_endpoint(0, 0, TKEY, NULL, 0, &e2), MX_NOT_INITIALIZED);
  }
  CHECK_OK(mx_init());
  mx_set_error_handler(record_handler);
  ep = t_open(0, TKEY);
  CHECK_OK(mx_get_info(NULL, MX_COPY_SEND_MAX, NULL, 0, &copy_max2, sizeof copy_max2));
  CHECK(copy_max2 == copy_max,
        "re-init after finalize changed MX_COPY_SEND_MAX: %u -> %u", copy_max,
        copy_max2);

  /* Communication works after re-init (self send, eager and rendezvous). */
  {
    mx_endpoint_addr_t self;
    uint32_t lens[2] = {64, 100000};
    CHECK_OK(mx_connect(ep, t_nic(), 0, TKEY, 5000, &self));
    for (int i = 0; i < 2; i++) {
      unsigned char *s = xmalloc(lens[i]), *r = xmalloc(lens[i]);
      mx_status_t st;
      fill(s, lens[i], 7u + (uint32_t)i);
      memset(r, 0, lens[i]);
      mx_request_t rr = t_recv(ep, r, lens[i], 5, MX_MATCH_MASK_NONE, CTX(1));
      mx_request_t sr = t_send(ep, self, s, lens[i], 5, CTX(2));
      CHECK(t_wait(ep, &rr, &st), "self receive after re-init did not complete");
      CHECK_STATUS(st, MX_STATUS_SUCCESS, 5, lens[i], lens[i], CTX(1));
      CHECK(verify(r, lens[i], 7u + (uint32_t)i) < 0, "self data after re-init");
      CHECK(t_wait(ep, &sr, &st), "self send after re-init did not complete");
      CHECK(st.code == MX_STATUS_SUCCESS, "self send status %s", mx_strstatus(st.code));
      free(s);
      free(r);
    }
  }
  CHECK_OK(mx_close_endpoint(ep));
  CHECK_OK(mx_finalize());
  DONE();
}
