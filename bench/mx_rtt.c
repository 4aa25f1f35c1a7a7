/* mx_rtt.c - exactly ROUNDS 8-byte MX round trips (after 100 warm-up ones), then exit on
 * both sides: the program bench/instructions.sh counts the instructions of (those run
 * inside measured_rounds, or a run of N rounds minus a run of 0).
 *   server:  mx_rtt server ROUNDS [MODE]
 *   client:  mx_rtt client PEER ROUNDS [MODE]      (PEER: "h0:0", a host name and board)
 * MODE picks how completions are taken:
 *   wait  mx_wait on each request (default)
 *   test  mx_test in a loop
 *   any   sends forgotten (mx_forget), receives found with mx_test_any in a loop
 * The server uses endpoint 0, the client endpoint 1 (so both may share a host).
 * A benchmark, not a test: it checks the bytes it receives and nothing else. */
#define _DEFAULT_SOURCE
#include <myriexpress.h>
#include <mx_extensions.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KEY 0x5158u
#define MATCH 0x78u
#define WARMUP 100

enum mode { WAIT, TEST, ANY };

static mx_endpoint_t ep;
static enum mode mode = WAIT;

static void die(const char *what, mx_return_t rc) {
    fprintf(stderr, "mx_rtt: %s: %s\n", what, mx_strerror(rc));
    exit(1);
}

/* Completes `req` the way MODE says; the status of a receive goes to `st`. */
static void complete(mx_request_t *req, mx_status_t *st, int is_recv) {
    uint32_t done = 0;
    mx_return_t rc;
    if (mode == ANY) {
        if (!is_recv) {
            if ((rc = mx_forget(ep, req)) != MX_SUCCESS)
                die("forget", rc);
            return;
        }
        do {
            if ((rc = mx_test_any(ep, MATCH, MX_MATCH_MASK_NONE, st, &done)) != MX_SUCCESS)
                die("test_any", rc);
        } while (!done);
    } else if (mode == TEST) {
        do {
            if ((rc = mx_test(ep, req, st, &done)) != MX_SUCCESS)
                die("test", rc);
        } while (!done);
    } else if ((rc = mx_wait(ep, req, MX_INFINITE, st, &done)) != MX_SUCCESS || !done) {
        die("wait", rc);
    }
    if (st->code != MX_STATUS_SUCCESS || (is_recv && st->xfer_length != 8))
        die("completion status", MX_BAD_REQUEST);
}

static void post(int send, mx_endpoint_addr_t peer, char *buf, mx_request_t *req) {
    mx_segment_t seg = {buf, 8};
    mx_return_t rc = send ? mx_isend(ep, &seg, 1, peer, MATCH, NULL, req)
                          : mx_irecv(ep, &seg, 1, MATCH, MX_MATCH_MASK_NONE, NULL, req);
    if (rc != MX_SUCCESS)
        die(send ? "isend" : "irecv", rc);
}

static mx_endpoint_addr_t peer;
static int client;

/* N round trips; the server forgets its reply of the very last one (its ack never
 * comes: the client is gone once it has the reply). */
static void run_rounds(long n, int last) {
    char out[8] = "ping-pon", in[8];
    mx_request_t sreq, rreq;
    mx_status_t st;
    mx_return_t rc;
    for (long i = 0; i < n; i++) {
        if (client) {
            post(0, peer, in, &rreq);
            post(1, peer, out, &sreq);
            complete(&sreq, &st, 0);
            complete(&rreq, &st, 1);
        } else {
            post(0, peer, in, &rreq);
            complete(&rreq, &st, 1);
            peer = st.source;
            post(1, peer, out, &sreq);
            if (!last || i + 1 < n)
                complete(&sreq, &st, 0);
            else if ((rc = mx_forget(ep, &sreq)) != MX_SUCCESS)
                die("forget", rc);
        }
        if (memcmp(in, out, 8) != 0)
            die("received bytes differ", MX_BAD_REQUEST);
    }
}

/* The measured rounds, in a function of their own: bench/instructions.sh counts
 * what runs inside it (callgrind --toggle-collect=measured_rounds). */
__attribute__((noinline)) static void measured_rounds(long n) {
    run_rounds(n, 1);
}

int main(int argc, char **argv) {
    client = argc >= 4 && !strcmp(argv[1], "client");
    int server = argc >= 3 && !strcmp(argv[1], "server");
    if (!client && !server) {
        fprintf(stderr, "usage: mx_rtt server ROUNDS [wait|test|any] | "
                        "mx_rtt client PEER ROUNDS [wait|test|any]\n");
        return 2;
    }
    long rounds = atol(argv[client ? 3 : 2]);
    const char *m = argc > (client ? 4 : 3) ? argv[client ? 4 : 3] : "wait";
    mode = !strcmp(m, "test") ? TEST : !strcmp(m, "any") ? ANY : WAIT;
    mx_return_t rc;
    mx_init();
    mx_set_error_handler(MX_ERRORS_RETURN);
    if ((rc = mx_open_endpoint(0, client ? 1 : 0, KEY, NULL, 0, &ep)) != MX_SUCCESS)
        die("open", rc);
    if (client) {
        uint64_t nic = 0;
        for (int tries = 0; tries < 200; tries++) {
            rc = mx_hostname_to_nic_id(argv[2], &nic);
            if (rc == MX_SUCCESS)
                rc = mx_connect(ep, nic, 0, KEY, 10000, &peer);
            if (rc == MX_SUCCESS)
                break;
            usleep(100000);
        }
        if (rc != MX_SUCCESS)
            die("connect", rc);
    }
    run_rounds(WARMUP, rounds == 0);
    measured_rounds(rounds);
    mx_close_endpoint(ep);
    mx_finalize();
    return 0;
}
