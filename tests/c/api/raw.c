/* raw.c - the raw API between two hosts: h0 broadcasts a RAW frame (type
 * byte 1, its own header) until h1 answers it with a frame of its own, so
 * neither side depends on when the other started; both check events,
 * lengths and bytes. The sender then checks the peer-table, route, map,
 * line speed and host name calls; the host name is read back by a fresh process
 * (raw name EXPECTED), as a board's name is read when the library starts.
 * Usage: raw recv | raw send | raw name EXPECTED
 * Limits (scaled by TEST_TIME_FACTOR): 30 s for the exchange. */
#include <myriexpress.h>
#include <mx_raw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;
#define CHECK(c, ...) do { checks++; if (!(c)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
  fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); } } while (0)

enum { EXCHANGE_LIMIT_MS = 30000, REPEAT_MS = 100, FRAME_LEN = 64, ANSWER = 0xac };

static uint32_t scaled(uint32_t ms) {
  const char *f = getenv("TEST_TIME_FACTOR");
  double k = f ? atof(f) : 1.0;
  return (uint32_t)(ms * (k >= 1.0 ? k : 1.0));
}

static uint64_t own_nic(void) {
  uint64_t nic = 0;
  CHECK(mx_board_number_to_nic_id(0, &nic) == MX_SUCCESS, "own nic id");
  return nic;
}

/* A RAW frame from `src` to `dst`: type byte 1, then bytes i at offset i, and
 * `mark` at offset 17 (the sender's frame carries 17, the answer ANSWER). */
static void make_frame(unsigned char *f, uint64_t dst, uint64_t src, unsigned char mark) {
  memset(f, 0, FRAME_LEN);
  for (int i = 0; i < 6; i++) {
    f[i] = (unsigned char)(dst >> (40 - 8 * i));
    f[6 + i] = (unsigned char)(src >> (40 - 8 * i));
  }
  f[12] = 0x86; f[13] = 0xdf; f[16] = 1;
  for (int i = 17; i < FRAME_LEN; i++) f[i] = (unsigned char)i;
  f[17] = mark;
}

static uint64_t frame_src(const unsigned char *f) {
  uint64_t n = 0;
  for (int i = 6; i < 12; i++) n = n << 8 | f[i];
  return n;
}

/* Waits up to timeout_ms for a received RAW frame whose byte 17 is `mark`;
 * send completions and other frames are passed over. */
static int recv_marked(mx_raw_endpoint_t ep, unsigned char *f, uint32_t timeout_ms, int mark) {
  for (uint32_t waited = 0; waited < timeout_ms; waited += REPEAT_MS) {
    uint32_t port = 9, len = FRAME_LEN * 16;
    mx_raw_status_t st = 0;
    void *ctx = NULL;
    if (mx_raw_next_event(ep, &port, &ctx, f, &len, REPEAT_MS, &st) != MX_SUCCESS) return 0;
    if (st == MX_RAW_RECV_COMPLETE && len == FRAME_LEN && f[17] == mark) {
      CHECK(port == 0 && f[16] == 1 && f[40] == 40, "frame: port %u bytes %u", port, len);
      return 1;
    }
  }
  return 0;
}

/* The board's name as a newly started program reads it. */
static int check_name(const char *want) {
  char name[MX_MAX_HOSTNAME_LEN];
  CHECK(mx_init() == MX_SUCCESS, "init");
  CHECK(mx_nic_id_to_hostname(own_nic(), name) == MX_SUCCESS && strcmp(name, want) == 0,
        "board name after mx_raw_set_hostname: '%s', expected '%s'", name, want);
  printf("raw name: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}

/* Peer table, routes, line speed and host name (sender side, after the exchange). */
static void board_calls(mx_raw_endpoint_t ep, const char *name) {
  uint64_t ghost = 0x0200000000aaULL, routed = 0x0200000000bbULL, n = 0;
  mx_line_speed_t speed = MX_SPEED_2G;
  CHECK(mx_raw_set_peer_name(ep, ghost, (char *)"ghost:0") == MX_SUCCESS, "set peer name");
  CHECK(mx_hostname_to_nic_id((char *)"ghost:0", &n) == MX_SUCCESS && n == ghost, "named peer found");
  CHECK(mx_raw_remove_peer(ep, ghost) == MX_SUCCESS, "remove peer");
  CHECK(mx_hostname_to_nic_id((char *)"ghost:0", &n) == MX_HOST_NOT_FOUND, "removed peer is gone");
  CHECK(mx_raw_remove_peer(ep, ghost) == MX_HOST_NOT_FOUND, "removing twice");
  /* A route makes its destination a known peer (Ethernet needs no route itself):
   * known afterwards means remove_peer finds it; clear_routes keeps the peer. */
  unsigned char route[2] = {0x81, 0x82};
  CHECK(mx_raw_set_route_begin(ep) == MX_SUCCESS, "route begin");
  CHECK(mx_raw_set_route(ep, routed, route, 2, 0, 0, MX_HOST_GM) == MX_SUCCESS, "set route");
  CHECK(mx_raw_set_route_end(ep) == MX_SUCCESS, "route end");
  CHECK(mx_raw_clear_routes(ep, routed, 0) == MX_SUCCESS, "clear routes");
  CHECK(mx_raw_remove_peer(ep, routed) == MX_SUCCESS, "mx_raw_set_route did not add the peer");
  CHECK(mx_raw_set_route_mag(ep, routed, route, 2, 0, 0, MX_HOST_GM, 7) == MX_SUCCESS, "route mag");
  CHECK(mx_raw_remove_peer(ep, routed) == MX_SUCCESS, "mx_raw_set_route_mag did not add the peer");
  CHECK(mx_raw_remove_peer(ep, own_nic()) == MX_BAD_INFO_VAL, "the local board cannot be removed");
  CHECK(mx_raw_line_speed(ep, &speed) == MX_SUCCESS && speed == MX_SPEED_OPEN_MX, "line speed %d",
        (int)speed);
  /* discovery is dynamic: a map version and reply info are accepted and change nothing */
  unsigned char blob[4] = {1, 2, 3, 4};
  CHECK(mx_raw_set_map_version(ep, 0, own_nic(), 3, 2, 1) == MX_SUCCESS, "map version");
  CHECK(mx_raw_set_nic_reply_info(ep, blob, sizeof blob) == MX_SUCCESS, "nic reply info");
  CHECK(mx_hostname_to_nic_id((char *)"ghost:0", &n) == MX_HOST_NOT_FOUND, "peers unchanged");
  CHECK(mx_raw_set_hostname(ep, (char *)"") == MX_BAD_INFO_VAL, "empty host name refused");
  CHECK(mx_raw_set_hostname(ep, (char *)name) == MX_SUCCESS, "set host name");
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "name") == 0) return check_name(argv[2]);
  int sending = argc > 1 && strcmp(argv[1], "send") == 0;
  mx_raw_endpoint_t ep, ep2;
  unsigned char frame[FRAME_LEN * 16], out[FRAME_LEN];
  uint32_t ports = 0;
  mx_raw_status_t st;
  void *ctx = NULL;
  CHECK(mx_init() == MX_SUCCESS, "init");
  mx_set_error_handler(MX_ERRORS_RETURN);
  CHECK(mx_raw_open_endpoint(0, NULL, 0, &ep) == MX_SUCCESS, "open");
  CHECK(mx_raw_open_endpoint(0, NULL, 0, &ep2) == MX_BUSY, "second raw endpoint on the board is busy");
  CHECK(mx_raw_handle(ep) >= 0, "handle");
  CHECK(mx_raw_num_ports(ep, &ports) == MX_SUCCESS && ports == 1, "ports");
  uint64_t self = own_nic();
  if (sending) {
    /* broadcast until the receiver's answer comes back */
    int answered = 0;
    make_frame(out, 0xffffffffffffULL, self, 17);
    for (uint32_t n = 0; !answered && n * REPEAT_MS < scaled(EXCHANGE_LIMIT_MS); n++) {
      CHECK(mx_raw_send(ep, 0, NULL, 0, out, FRAME_LEN, (void *)(uintptr_t)(n + 1)) == MX_SUCCESS, "send");
      CHECK(mx_raw_next_event(ep, NULL, &ctx, NULL, NULL, 1000, &st) == MX_SUCCESS, "event");
      CHECK(st == MX_RAW_SEND_COMPLETE && ctx == (void *)(uintptr_t)(n + 1), "send completion %d", st);
      answered = recv_marked(ep, frame, REPEAT_MS, ANSWER);
    }
    CHECK(answered, "no answer from the receiver");
    if (answered) CHECK(frame_src(frame) != self, "the answer came from this board");
    board_calls(ep, "rawname:0");
  } else {
    int got = recv_marked(ep, frame, scaled(EXCHANGE_LIMIT_MS), 17);
    CHECK(got, "no raw frame received");
    if (got) {
      make_frame(out, frame_src(frame), self, ANSWER);
      CHECK(mx_raw_send(ep, 0, NULL, 0, out, FRAME_LEN, NULL) == MX_SUCCESS, "answer");
      CHECK(mx_raw_next_event(ep, NULL, &ctx, NULL, NULL, 1000, &st) == MX_SUCCESS &&
            st == MX_RAW_SEND_COMPLETE, "answer completion %d", st);
    }
  }
  CHECK(mx_raw_close_endpoint(ep) == MX_SUCCESS, "close");
  CHECK(mx_raw_close_endpoint(ep) == MX_BAD_ENDPOINT, "use after close");
  CHECK(mx_raw_set_route_begin(ep) == MX_BAD_ENDPOINT, "route begin after close");
  CHECK(mx_raw_line_speed(ep, NULL) == MX_BAD_ENDPOINT, "line speed after close");
  printf("raw %s: %d checks, %d failed\n", sending ? "send" : "recv", checks, failures);
  if (sending && !failures) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' name rawname:0", argv[0]);
    CHECK(system(cmd) == 0, "the name set by mx_raw_set_hostname is not the board's name");
  }
  return failures ? 1 : 0;
}
