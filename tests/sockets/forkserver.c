/* forkserver.c - a connection that changes process: the server accepts, its parent
 * writes a greeting (and in the first round reads the head of the request), forks, and
 * the child reads the rest, answers and closes; the parent closes its copy at once.
 * The client checks every byte both ways and the end of the stream. Run unchanged
 * over the kernel or preloaded with omx_sockets (docs/SOCKETS.md, "Processes: fork
 * and exec").
 *
 *   forkserver server PORT        (serves ROUNDS connections, then exits)
 *   forkserver orphan PORT close|keep
 *       (one connection; the parent reads the head and greets, forks, closes its copy
 *        or keeps it, and exits at once; the child waits until the parent is gone, then
 *        reads the rest and answers)
 *   forkserver execl PORT execl|execlp|execle
 *       (one connection; the server reads the head and greets, then replaces itself
 *        by the list form of exec named: the new image reads the rest and answers)
 *   forkserver client IP PORT [ROUNDS]
 *   (forkserver rest FD HOW 7th 8th  the exec'd image; internal)
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define ROUNDS 2
#define REQUEST (6u << 20)  /* client -> server, beyond the 4 MiB send window */
#define ANSWER (2u << 20)   /* server -> client */
#define HEAD 1000           /* read by the parent in round 0 */
#define GREETING "greeting from the parent\n"

static void die(const char *what) {
  perror(what);
  exit(1);
}

static uint8_t pattern(uint64_t k, int round) { return (uint8_t)(k * 7 + round * 13 + (k >> 12)); }

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0) die("write");
    c += w;
    n -= (size_t)w;
  }
}

static void read_all(int fd, void *p, size_t n) {
  char *c = p;
  while (n > 0) {
    ssize_t r = read(fd, c, n);
    if (r < 0) die("read");
    if (r == 0) {
      fprintf(stderr, "early end of stream, %zu bytes missing\n", n);
      exit(1);
    }
    c += r;
    n -= (size_t)r;
  }
}

/* Reads `n` request bytes from offset `from` and checks them against the pattern. */
static void check_request(int fd, uint64_t from, uint64_t n, int round) {
  static uint8_t buf[65536];
  while (n > 0) {
    size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
    ssize_t r = read(fd, buf, want);
    if (r <= 0) die("read request");
    for (ssize_t i = 0; i < r; i++)
      if (buf[i] != pattern(from + (uint64_t)i, round)) {
        fprintf(stderr, "round %d: request byte %llu wrong\n", round,
                (unsigned long long)(from + (uint64_t)i));
        exit(1);
      }
    from += (uint64_t)r;
    n -= (uint64_t)r;
  }
}

static void child(int fd, uint64_t already, int round) {
  /* The child's first call is a poll, as sshd's. */
  struct pollfd p = {.fd = fd, .events = POLLIN};
  if (poll(&p, 1, -1) != 1) die("poll");
  check_request(fd, already, REQUEST - already, round);
  uint8_t *a = malloc(ANSWER);
  for (uint64_t k = 0; k < ANSWER; k++) a[k] = pattern(k, round + 1);
  write_all(fd, "ok", 2);
  write_all(fd, a, ANSWER);
  close(fd);
  exit(0);
}

static int listening(int port) {
  int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  if (bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 4)) die("bind/listen");
  printf("listening\n");
  fflush(stdout);
  return l;
}

/* The parent leaves before its child first uses the connection: the child must still
 * read every byte the client wrote, in order, and its answer must reach the client. */
static int orphan(int port, int keep_copy) {
  int l = listening(port);
  int fd = accept(l, NULL, NULL);
  if (fd < 0) die("accept");
  check_request(fd, 0, HEAD, 0);
  write_all(fd, GREETING, strlen(GREETING));
  /* The child learns that the parent is gone when the pipe's only writer closes. */
  int gone[2];
  if (pipe(gone)) die("pipe");
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    close(l);
    close(gone[1]);
    char c;
    if (read(gone[0], &c, 1) != 0) die("wait for the parent's exit");
    close(gone[0]);
    child(fd, HEAD, 0);
  }
  close(gone[0]);
  if (!keep_copy) close(fd);
  printf("parent exits (%s its copy)\n", keep_copy ? "keeping" : "after closing");
  fflush(stdout);
  exit(0);
}

#define EXECLE_ENV "FORKSERVER_EXECLE=passed"

/* The image an `execl*` started: the connection is the inherited descriptor FD; it
 * reads the rest of the request and answers, as a forked child does. */
static int rest(int fd, const char *how) {
  const char *env = getenv("FORKSERVER_EXECLE");
  if (!strcmp(how, "execle") && (!env || strcmp(env, "passed"))) {
    fprintf(stderr, "execle's environment did not reach the new image\n");
    return 1;
  }
  printf("%s'd image reads the rest\n", how);
  fflush(stdout);
  child(fd, HEAD, 0);
  return 0;
}

/* The process that carried the connection replaces itself through a list form of exec
 * (eight arguments: the last ones, the NULL and execle's envp are passed on the
 * stack). */
static int exec_list(int port, const char *how, const char *self) {
  int l = listening(port);
  int fd = accept(l, NULL, NULL);
  if (fd < 0) die("accept");
  close(l);
  check_request(fd, 0, HEAD, 0);
  write_all(fd, GREETING, strlen(GREETING));
  char fds[16];
  snprintf(fds, sizeof fds, "%d", fd);
  if (!strcmp(how, "execl")) {
    execl(self, self, "rest", fds, how, "7th", "8th", (char *)NULL);
  } else if (!strcmp(how, "execlp")) {
    execlp(self, self, "rest", fds, how, "7th", "8th", (char *)NULL);
  } else {
    char *const envp[] = {EXECLE_ENV, NULL};
    execle(self, self, "rest", fds, how, "7th", "8th", (char *)NULL, envp);
  }
  die(how);
  return 1;
}

static int server(int port) {
  int l = listening(port);
  for (int round = 0; round < ROUNDS; round++) {
    int fd = accept(l, NULL, NULL);
    if (fd < 0) die("accept");
    uint64_t already = 0;
    if (round == 0) {
      /* The parent reads first, part of one message: the child gets the rest. */
      check_request(fd, 0, HEAD, round);
      already = HEAD;
    }
    write_all(fd, GREETING, strlen(GREETING));
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid == 0) child(fd, already, round);
    close(fd);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "round %d: child failed (status %#x)\n", round, st);
      return 1;
    }
  }
  printf("server done\n");
  return 0;
}

static int client(const char *ip, int port, int rounds) {
  for (int round = 0; round < rounds; round++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, ip, &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) die("connect");
    uint8_t *req = malloc(REQUEST);
    for (uint64_t k = 0; k < REQUEST; k++) req[k] = pattern(k, round);
    for (uint64_t off = 0; off < REQUEST; off += 65536) write_all(fd, req + off, 65536);
    char greeting[sizeof GREETING - 1], ok[2];
    read_all(fd, greeting, sizeof greeting);
    read_all(fd, ok, 2);
    if (memcmp(greeting, GREETING, sizeof greeting) || memcmp(ok, "ok", 2)) {
      fprintf(stderr, "round %d: greeting or answer head wrong: got \"%.*s\" then \"%.2s\"\n",
              round, (int)sizeof greeting, greeting, ok);
      return 1;
    }
    uint8_t *ans = malloc(ANSWER);
    read_all(fd, ans, ANSWER);
    for (uint64_t k = 0; k < ANSWER; k++)
      if (ans[k] != pattern(k, round + 1)) {
        fprintf(stderr, "round %d: answer byte %llu wrong\n", round, (unsigned long long)k);
        return 1;
      }
    char extra;
    if (read(fd, &extra, 1) != 0) {
      fprintf(stderr, "round %d: no end of stream after the answer\n", round);
      return 1;
    }
    close(fd);
    free(req);
    free(ans);
    printf("round %d ok\n", round);
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "server")) return server(atoi(argv[2]));
  if (argc == 4 && !strcmp(argv[1], "orphan") &&
      (!strcmp(argv[3], "close") || !strcmp(argv[3], "keep")))
    return orphan(atoi(argv[2]), !strcmp(argv[3], "keep"));
  if (argc == 4 && !strcmp(argv[1], "execl") &&
      (!strcmp(argv[3], "execl") || !strcmp(argv[3], "execlp") || !strcmp(argv[3], "execle")))
    return exec_list(atoi(argv[2]), argv[3], argv[0]);
  if (argc == 6 && !strcmp(argv[1], "rest") && !strcmp(argv[4], "7th") && !strcmp(argv[5], "8th"))
    return rest(atoi(argv[2]), argv[3]);
  if ((argc == 4 || argc == 5) && !strcmp(argv[1], "client"))
    return client(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : ROUNDS);
  fprintf(stderr,
          "usage: forkserver server PORT | orphan PORT close|keep | execl PORT "
          "execl|execlp|execle | client IP PORT [ROUNDS]\n");
  return 2;
}
