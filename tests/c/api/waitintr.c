/* waitintr.c - OMX_WAITINTR=1: a signal that interrupts a blocking call's sleep
 * ends the call as its timeout would. An infinite mx_wait for a receive that
 * nothing matches returns (result 0) once a signal reaches the waiting thread
 * (another thread signals it until it returns, since a signal that lands while
 * the wait spins instead of sleeping interrupts nothing); the receive is still
 * pending and can be cancelled; a later wait for a message that arrives still
 * completes it. Without the setting the same wait would sleep again after each
 * signal and never return. */
#include "common.h"

#include <pthread.h>
#include <signal.h>

static volatile sig_atomic_t signals_seen;
static volatile int waiting_done;

static void on_signal(int sig) {
  (void)sig;
  signals_seen++;
}

struct target {
  pthread_t thread;
};

static void *signaller(void *arg) {
  struct target *t = arg;
  while (!waiting_done) {
    pthread_kill(t->thread, SIGUSR1);
    sleep_ms(20);
  }
  return NULL;
}

int main(void) {
  setenv("OMX_WAITINTR", "1", 1);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
  t_init();
  mx_endpoint_t ep = t_open(MX_ANY_ENDPOINT, TKEY);

  char buf[64];
  mx_segment_t seg = {buf, sizeof buf};
  mx_request_t r = NULL;
  CHECK_OK(mx_irecv(ep, &seg, 1, 0x77, MX_MATCH_MASK_NONE, NULL, &r));
  struct target t = {pthread_self()};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, signaller, &t) == 0, "pthread_create");
  mx_status_t st;
  uint32_t result = 1;
  CHECK_OK(mx_wait(ep, &r, MX_INFINITE, &st, &result));
  waiting_done = 1;
  pthread_join(th, NULL);
  CHECK(result == 0, "an interrupted wait reported a completion");
  CHECK(signals_seen > 0, "no signal reached the waiting thread");

  /* Still pending: cancelled now. */
  uint32_t cancelled = 0;
  CHECK_OK(mx_cancel(ep, &r, &cancelled));
  CHECK(cancelled == 1, "the interrupted receive was not pending any more");

  /* A wait with no signal completes as usual. */
  mx_endpoint_addr_t self;
  CHECK_OK(mx_get_endpoint_addr(ep, &self));
  mx_request_t rr = NULL, sr = NULL;
  CHECK_OK(mx_irecv(ep, &seg, 1, 0x78, MX_MATCH_MASK_NONE, NULL, &rr));
  fill(buf, 0, 0);
  char msg[16];
  fill(msg, sizeof msg, 3);
  mx_segment_t ms = {msg, sizeof msg};
  CHECK_OK(mx_isend(ep, &ms, 1, self, 0x78, NULL, &sr));
  result = 0;
  CHECK_OK(mx_wait(ep, &rr, 30000, &st, &result));
  CHECK(result == 1 && st.msg_length == sizeof msg && verify(buf, sizeof msg, 3) < 0,
        "message after the signals: result %u, %u bytes", result, st.msg_length);
  result = 0;
  CHECK_OK(mx_wait(ep, &sr, 30000, &st, &result));
  CHECK(result == 1, "send to self not completed");
  mx_close_endpoint(ep);
  mx_finalize();
  DONE();
}
