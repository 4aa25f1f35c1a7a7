/* raw.c - the raw API between two hosts: h1 waits for a RAW frame, h0 sends one
 * (type byte 1, its own header); both check events, lengths and bytes.
 * Usage: raw recv | raw send */
#include <myriexpress.h>
#include <mx_raw.h>
#include <stdio.h>
#include <string.h>

static int failures, checks;
#define CHECK(c, ...) do { checks++; if (!(c)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
  fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

int main(int argc, char **argv) {
  int sending = argc > 1 && strcmp(argv[1], "send") == 0;
  mx_raw_endpoint_t ep, ep2;
  unsigned char frame[1024];
  uint32_t ports = 0, len;
  mx_raw_status_t st;
  void *ctx = NULL;
  CHECK(mx_init() == MX_SUCCESS, "init");
  mx_set_error_handler(MX_ERRORS_RETURN);
  CHECK(mx_raw_open_endpoint(0, NULL, 0, &ep) == MX_SUCCESS, "open");
  CHECK(mx_raw_open_endpoint(0, NULL, 0, &ep2) == MX_BUSY, "second raw endpoint on the board is busy");
  CHECK(mx_raw_handle(ep) >= 0, "handle");
  CHECK(mx_raw_num_ports(ep, &ports) == MX_SUCCESS && ports == 1, "ports");
  if (sending) {
    uint64_t nic = 0;
    mx_board_number_to_nic_id(0, &nic);
    memset(frame, 0, 64);
    memset(frame, 0xff, 6);
    for (int i = 0; i < 6; i++) frame[6 + i] = (unsigned char)(nic >> (40 - 8 * i));
    frame[12] = 0x86; frame[13] = 0xdf; frame[16] = 1;
    for (int i = 17; i < 64; i++) frame[i] = (unsigned char)i;
    for (int n = 0; n < 20; n++) {  /* repeated: the receiver may start later */
      CHECK(mx_raw_send(ep, 0, NULL, 0, frame, 64, (void *)(uintptr_t)(n + 1)) == MX_SUCCESS, "send");
      CHECK(mx_raw_next_event(ep, NULL, &ctx, NULL, NULL, 100, &st) == MX_SUCCESS, "event");
      CHECK(st == MX_RAW_SEND_COMPLETE && ctx == (void *)(uintptr_t)(n + 1), "send completion %d", st);
      /* Pace the repeats: nothing else arrives, so this waits the whole timeout. */
      mx_raw_next_event(ep, NULL, &ctx, NULL, NULL, 100, &st);
    }
  } else {
    int got = 0;
    for (int n = 0; n < 100 && !got; n++) {
      uint32_t port = 9;
      len = sizeof frame;
      CHECK(mx_raw_next_event(ep, &port, &ctx, frame, &len, 100, &st) == MX_SUCCESS, "event");
      if (st == MX_RAW_RECV_COMPLETE) {
        got = 1;
        CHECK(len == 64 && port == 0 && frame[16] == 1 && frame[40] == 40, "frame: %u bytes", len);
      }
    }
    CHECK(got, "no raw frame received");
  }
  if (sending) {
    /* peer table management */
    uint64_t ghost = 0x0200000000aaULL, n = 0;
    CHECK(mx_raw_set_peer_name(ep, ghost, (char *)"ghost:0") == MX_SUCCESS, "set peer name");
    CHECK(mx_hostname_to_nic_id((char *)"ghost:0", &n) == MX_SUCCESS && n == ghost, "named peer found");
    CHECK(mx_raw_remove_peer(ep, ghost) == MX_SUCCESS, "remove peer");
    CHECK(mx_hostname_to_nic_id((char *)"ghost:0", &n) == MX_HOST_NOT_FOUND, "removed peer is gone");
    CHECK(mx_raw_remove_peer(ep, ghost) == MX_HOST_NOT_FOUND, "removing twice");
  }
  CHECK(mx_raw_close_endpoint(ep) == MX_SUCCESS, "close");
  CHECK(mx_raw_close_endpoint(ep) == MX_BAD_ENDPOINT, "use after close");
  printf("raw %s: %d checks, %d failed\n", sending ? "send" : "recv", checks, failures);
  return failures ? 1 : 0;
}
