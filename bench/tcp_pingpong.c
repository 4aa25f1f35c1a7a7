/* TCP ping-pong with TCP_NODELAY over the same sizes as omx_perf, so that the curves
 * line up. Server: tcp_pingpong server PORT
 * Client: tcp_pingpong client IP PORT START END ITERS [-L]   (sizes START, 2*START, ... <= END)
 * Prints one line per size: size, one-way latency (us), MB/s; with -L (as omx_perf -L)
 * also the median, 99th percentile and maximum of the timed iterations (us, halved). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void full(int fd, void *buf, size_t len, int sending) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = sending ? send(fd, p, len, 0) : recv(fd, p, len, 0);
    if (n <= 0) { perror(sending ? "send" : "recv"); exit(1); }
    p += n;
    len -= (size_t)n;
  }
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile q (0..1] of n sorted samples. */
static double rank(const double *sorted, uint32_t n, double q) {
  uint32_t r = (uint32_t)(q * n + 0.999999);
  if (r < 1) r = 1;
  if (r > n) r = n;
  return sorted[r - 1];
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "server") == 0) {
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 1)) { perror("listen"); return 1; }
    int fd = accept(ls, NULL, NULL);
    nodelay(fd);
    uint32_t hdr[2];
    char *buf = NULL;
    for (;;) {
      ssize_t n = recv(fd, hdr, sizeof hdr, MSG_WAITALL);
      if (n != sizeof hdr) break;
      uint32_t size = ntohl(hdr[0]), iters = ntohl(hdr[1]);
      buf = realloc(buf, size ? size : 1);
      for (uint32_t i = 0; i < iters; i++) {
        full(fd, buf, size, 0);
        full(fd, buf, size, 1);
      }
    }
    return 0;
  }
  int pct = argc == 8 && strcmp(argv[7], "-L") == 0;
  if (argc < 7 || argc > 7 + pct || strcmp(argv[1], "client") != 0) {
    fprintf(stderr, "usage: %s server PORT | client IP PORT START END ITERS [-L]\n", argv[0]);
    return 2;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
  inet_pton(AF_INET, argv[2], &a.sin_addr);
  for (int t = 0; connect(fd, (struct sockaddr *)&a, sizeof a) != 0; t++) {
    if (t > 50) { perror("connect"); return 1; }
    usleep(100000);
  }
  nodelay(fd);
  uint32_t start = (uint32_t)atol(argv[4]), end = (uint32_t)atol(argv[5]), iters = (uint32_t)atol(argv[6]);
  char *buf = malloc(end ? end : 1);
  memset(buf, 0x5a, end ? end : 1);
  for (uint32_t size = start ? start : 1; size <= end; size *= 2) {
    uint32_t n = size >= (1u << 20) ? (iters / 50 ? iters / 50 : 1) : iters;
    uint32_t hdr[2] = {htonl(size), htonl(n + n / 10)};
    full(fd, hdr, sizeof hdr, 1);
    for (uint32_t i = 0; i < n / 10; i++) { full(fd, buf, size, 1); full(fd, buf, size, 0); }
    double *rt = pct ? malloc(n * sizeof *rt) : NULL;
    double t0 = now_us();
    for (uint32_t i = 0; i < n; i++) {
      double ti = pct ? now_us() : 0;
      full(fd, buf, size, 1);
      full(fd, buf, size, 0);
      if (pct) rt[i] = (now_us() - ti) / 2;
    }
    double lat = (now_us() - t0) / n / 2;
    printf("%u %.3f %.2f", size, lat, size / lat);
    if (pct) {
      qsort(rt, n, sizeof *rt, by_value);
      printf(" %.3f %.3f %.3f", rank(rt, n, 0.5), rank(rt, n, 0.99), rt[n - 1]);
      free(rt);
    }
    printf("\n");
    fflush(stdout);
  }
  return 0;
}
