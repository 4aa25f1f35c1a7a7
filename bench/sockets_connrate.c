/* Connection set-up rate for bench/sockets.sh: the client connects, writes one byte,
 * reads the server's one-byte answer and closes, as many times as it can for SECONDS
 * (the byte makes each connection carry data, so over omx it is set up on omx too).
 *   sockets_connrate server PORT
 *   sockets_connrate client IP PORT SECONDS   -> "connections N seconds S per_s R" */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int server(int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 128)) {
        perror("bind/listen");
        return 1;
    }
    for (;;) {
        int c = accept(s, NULL, NULL);
        char b;
        if (c < 0)
            continue;
        if (read(c, &b, 1) == 1 && write(c, &b, 1) != 1)
            perror("write");
        close(c);
    }
}

static int client(const char *ip, int port, double seconds)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    long n = 0;
    double start = now(), end = start + seconds, t = start;
    if (inet_pton(AF_INET, ip, &a.sin_addr) != 1) {
        fprintf(stderr, "bad address %s\n", ip);
        return 2;
    }
    while (t < end) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        char b = 'x';
        if (connect(s, (struct sockaddr *)&a, sizeof a) || write(s, &b, 1) != 1 ||
            read(s, &b, 1) != 1 || b != 'x') {
            perror("connection");
            return 1;
        }
        close(s);
        n++;
        t = now();
    }
    printf("connections %ld seconds %.3f per_s %.1f\n", n, t - start, (double)n / (t - start));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "server"))
        return server(atoi(argv[2]));
    if (argc == 5 && !strcmp(argv[1], "client"))
        return client(argv[2], atoi(argv[3]), atof(argv[4]));
    fprintf(stderr, "usage: sockets_connrate server PORT | client IP PORT SECONDS\n");
    return 2;
}
