/* 8-byte MX ping-pong with a pause before each round, as an application that computes
 * between messages: the client pauses (usleep or a busy loop), then posts mx_isend and
 * mx_irecv and waits with mx_wait; the time is taken after the pause.
 *   server:  paused_pingpong
 *   client:  paused_pingpong PEER PAUSE_US [ROUNDS] [sleep|busy]
 * Prints "pause_us mode median_oneway_us p90_oneway_us". A benchmark, not a test. */
#define _DEFAULT_SOURCE
#include <myriexpress.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KEY 0x5157u
#define MATCH 0x77u

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void die(const char *what, mx_return_t rc) {
    fprintf(stderr, "paused_pingpong: %s: %s\n", what, mx_strerror(rc));
    exit(1);
}

/* One round from the client's side, or the echo on the server's. */
static void round_trip(mx_endpoint_t ep, mx_endpoint_addr_t peer, char *buf, int send_first) {
    mx_segment_t seg = {buf, 8};
    mx_request_t sreq, rreq;
    mx_status_t st;
    uint32_t result;
    mx_return_t rc;
    if (send_first) {
        if ((rc = mx_isend(ep, &seg, 1, peer, MATCH, NULL, &sreq)) != MX_SUCCESS)
            die("isend", rc);
        if ((rc = mx_irecv(ep, &seg, 1, MATCH, MX_MATCH_MASK_NONE, NULL, &rreq)) != MX_SUCCESS)
            die("irecv", rc);
        if ((rc = mx_wait(ep, &sreq, MX_INFINITE, &st, &result)) != MX_SUCCESS || !result)
            die("wait send", rc);
        if ((rc = mx_wait(ep, &rreq, MX_INFINITE, &st, &result)) != MX_SUCCESS || !result)
            die("wait recv", rc);
    } else {
        if ((rc = mx_irecv(ep, &seg, 1, MATCH, MX_MATCH_MASK_NONE, NULL, &rreq)) != MX_SUCCESS)
            die("irecv", rc);
        if ((rc = mx_wait(ep, &rreq, MX_INFINITE, &st, &result)) != MX_SUCCESS || !result)
            die("wait recv", rc);
        if ((rc = mx_isend(ep, &seg, 1, st.source, MATCH, NULL, &sreq)) != MX_SUCCESS)
            die("isend", rc);
        if ((rc = mx_wait(ep, &sreq, MX_INFINITE, &st, &result)) != MX_SUCCESS || !result)
            die("wait send", rc);
    }
}

static void pause_for(double us, int busy) {
    if (us <= 0)
        return;
    if (!busy) {
        usleep((useconds_t)us);
        return;
    }
    double until = now_us() + us;
    while (now_us() < until)
        ;
}

int main(int argc, char **argv) {
    mx_endpoint_t ep;
    mx_endpoint_addr_t peer;
    char buf[8] = {0};
    int client = argc > 2;
    mx_return_t rc;
    mx_init();
    mx_set_error_handler(MX_ERRORS_RETURN);
    if ((rc = mx_open_endpoint(0, client ? 1 : 0, KEY, NULL, 0, &ep)) != MX_SUCCESS)
        die("open", rc);
    if (!client) {
        for (;;)
            round_trip(ep, peer, buf, 0);
    }
    double pause = atof(argv[2]);
    int rounds = argc > 3 ? atoi(argv[3]) : 2000;
    int busy = argc > 4 && strcmp(argv[4], "busy") == 0;
    uint64_t nic = 0;
    for (int tries = 0; tries < 200; tries++) {
        rc = mx_hostname_to_nic_id(argv[1], &nic);
        if (rc == MX_SUCCESS)
            rc = mx_connect(ep, nic, 0, KEY, 10000, &peer);
        if (rc == MX_SUCCESS)
            break;
        usleep(100000);
    }
    if (rc != MX_SUCCESS)
        die("connect", rc);
    for (int i = 0; i < 100; i++)
        round_trip(ep, peer, buf, 1);
    double *t = malloc(sizeof(double) * (size_t)rounds);
    for (int i = 0; i < rounds; i++) {
        pause_for(pause, busy);
        double t0 = now_us();
        round_trip(ep, peer, buf, 1);
        t[i] = (now_us() - t0) / 2;
    }
    qsort(t, (size_t)rounds, sizeof(double), cmp);
    printf("%g %s %.2f %.2f\n", pause, busy ? "busy" : "sleep", t[rounds / 2], t[rounds * 9 / 10]);
    free(t);
    mx_close_endpoint(ep);
    mx_finalize();
    return 0;
}
