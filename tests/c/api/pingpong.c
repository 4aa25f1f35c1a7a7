/* MX ping-pong through libmyriexpress: server (no argument) or client (peer name).
 * Every size from 0 to 8 MiB, data checked, statuses and lengths checked. */
#define _POSIX_C_SOURCE 200809L
#include <myriexpress.h>
#include <mx_extensions.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEY 0x1234u
#define MAXLEN (8u << 20)

static int failures;

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); failures++; } } while (0)

static void fill(unsigned char *b, uint32_t len, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (uint32_t i = 0; i < len; i++) { x ^= x << 13; x ^= x >> 17; x ^= x << 5; b[i] = (unsigned char)x; }
}

static int ok(const unsigned char *b, uint32_t len, uint32_t seed) {
    unsigned char *e = malloc(len ? len : 1);
    fill(e, len, seed);
    int r = memcmp(b, e, len) == 0;
    free(e);
    return r;
}

static void xfer(mx_endpoint_t ep, mx_endpoint_addr_t peer, int sending, uint32_t len, uint32_t seed,
                 unsigned char *buf) {
    mx_segment_t seg = { buf, len };
    mx_request_t req;
    mx_status_t st;
    uint32_t result = 0;
    mx_return_t rc;
    if (sending) {
        fill(buf, len, seed);
        rc = mx_isend(ep, &seg, 1, peer, (uint64_t)seed, (void *)(uintptr_t)seed, &req);
    } else {
        memset(buf, 0, len);
        rc = mx_irecv(ep, &seg, 1, (uint64_t)seed, MX_MATCH_MASK_NONE, (void *)(uintptr_t)seed, &req);
    }
    CHECK(rc == MX_SUCCESS, "post: %s", mx_strerror(rc));
    rc = mx_wait(ep, &req, MX_INFINITE, &st, &result);
    CHECK(rc == MX_SUCCESS && result == 1, "wait: rc %d result %u", rc, result);
    CHECK(st.code == MX_STATUS_SUCCESS, "status %s", mx_strstatus(st.code));
    CHECK(st.context == (void *)(uintptr_t)seed, "context");
    CHECK(st.msg_length == len && st.xfer_length == len, "lengths %u/%u for %u", st.msg_length, st.xfer_length, len);
    if (!sending) {
        CHECK(st.match_info == (uint64_t)seed, "match info");
        CHECK(ok(buf, len, seed), "data mismatch at length %u", len);
    }
}

int main(int argc, char **argv) {
    mx_endpoint_t ep;
    mx_endpoint_addr_t peer;
    unsigned char *buf = malloc(MAXLEN);
    int client = argc > 1;
    mx_return_t rc = mx_init();
    CHECK(rc == MX_SUCCESS, "mx_init: %s", mx_strerror(rc));
    mx_set_error_handler(MX_ERRORS_RETURN);
    rc = mx_open_endpoint(0, client ? 1 : 0, KEY, NULL, 0, &ep);
    CHECK(rc == MX_SUCCESS, "open: %s", mx_strerror(rc));
    if (client) {
        uint64_t nic = 0;
        /* The server may still be starting: retry the lookup and the connect
         * (an endpoint not open yet is refused at once) for up to 20 s. */
        for (int tries = 0; tries < 200; tries++) {
            rc = mx_hostname_to_nic_id(argv[1], &nic);
            if (rc == MX_SUCCESS)
                rc = mx_connect(ep, nic, 0, KEY, 10000, &peer);
            if (rc == MX_SUCCESS || (rc != MX_HOST_NOT_FOUND && rc != MX_CONNECTION_FAILED))
                break;
            nanosleep(&(struct timespec){0, 100000000L}, NULL);
        }
        CHECK(rc == MX_SUCCESS, "lookup/connect %s: %s", argv[1], mx_strerror(rc));
        uint64_t n; uint32_t eid;
        mx_decompose_endpoint_addr(peer, &n, &eid);
        CHECK(n == nic && eid == 0, "decompose");
        /* Hello: lets the server learn our address from the receive status. */
        xfer(ep, peer, 1, 0, 1, buf);
    } else {
        mx_segment_t seg = { buf, 0 };
        mx_request_t req;
        mx_status_t st;
        uint32_t result;
        mx_irecv(ep, &seg, 1, 1, MX_MATCH_MASK_NONE, NULL, &req);
        mx_wait(ep, &req, MX_INFINITE, &st, &result);
        peer = st.source;
    }
    uint32_t seed = 100;
    for (uint32_t len = 0; len <= MAXLEN; len = len ? len * 2 : 1) {
        for (int i = 0; i < 3; i++, seed++) {
            xfer(ep, peer, client, len, seed, buf);
            xfer(ep, peer, !client, len, seed + 100000, buf);
        }
    }
    mx_close_endpoint(ep);
    mx_finalize();
    free(buf);
    printf("pingpong %s: %d passed, %d failed\n", client ? "client" : "server", failures ? 0 : 1, failures ? 1 : 0);
    return failures ? 1 : 0;
}
