/* intranode.h - scaffolding of the multi-process intranode_* tests (tests/c/api).
 *
 * The parent process never touches the MX library: it forks every child first
 * (so no library thread exists at fork time), relays barriers and small
 * one-character messages through a pair of pipes per child, reaps the
 * children, and fails when one of them exits non-zero, dies of an unexpected
 * signal or is still running at the deadline (INTRANODE_TIMEOUT_S, 60 s by
 * default), in which case every remaining child is killed with SIGKILL.
 * Children open their endpoints with fixed indexes on board 0, so addresses
 * need no exchange: after a barrier, mx_connect(nic of board 0, index).
 *
 * INTRANODE_TRACE=1 makes the children print their steps on stderr.
 *
 * Header-only (each test is one .c file); include it instead of common.h.
 */
#ifndef OMX_INTRANODE_H
#define OMX_INTRANODE_H

#include "common.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

#define IN_MAX 16
#define IN_WAIT_MS 30000 /* one request, one probe, one barrier */

struct in_child {
  pid_t pid;
  int up, down;    /* parent's ends: child -> parent, parent -> child */
  int alive;       /* not reaped yet */
  int at_barrier;  /* waiting in in_barrier() */
  int expect_kill; /* a death by SIGKILL is part of the test */
  int status;      /* waitpid status once reaped */
  double started;  /* now_ms() at fork */
  char name[32];
};

static struct in_child in_kids[IN_MAX];
static int in_nkids;
/* In a child: its own ends of the pipes, and its name for messages. */
static int in_up_fd = -1, in_down_fd = -1;
static char in_me[48] = "parent";
static const char *in_prog = "intranode";

/* Called by the parent for characters other than the barrier 'B'. */
typedef void (*in_hook_fn)(int child, char c);

/* ---- child side ---- */

/* "test.c[name]: N checks, M failed", then _exit. */
static inline void in_child_done(void) {
  char what[96];
  snprintf(what, sizeof what, "%s[%s]", in_prog, in_me);
  t_done(what);
}

/* A required check in a child: report, then end the child. */
#define C_REQUIRE(cond, ...)                                                   \
  do {                                                                         \
    int creq_ok_ = (cond) ? 1 : 0;                                             \
    CHECK(creq_ok_, __VA_ARGS__);                                              \
    if (!creq_ok_) {                                                           \
      fprintf(stderr, "[%s] aborting after a required check\n", in_me);        \
      in_child_done();                                                         \
    }                                                                          \
  } while (0)

/* Sends one character to the parent. */
static inline void in_tell(char c) {
  while (write(in_up_fd, &c, 1) < 0 && errno == EINTR) {
  }
}

/* Waits (up to ms) for one character from the parent; 0 on timeout or EOF. */
static inline char in_hear(int ms) {
  struct pollfd p = {in_down_fd, POLLIN, 0};
  char c = 0;
  double end = now_ms() + ms;
  for (;;) {
    int left = (int)(end - now_ms());
    if (left < 0)
      left = 0;
    int n = poll(&p, 1, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return 0;
    ssize_t r = read(in_down_fd, &c, 1);
    if (r < 0 && errno == EINTR)
      continue;
    return r == 1 ? c : 0;
  }
}

/* Every live child of the group reaches this point before any goes on. */
static inline void in_barrier(void) {
  in_tell('B');
  char c = in_hear(2 * IN_WAIT_MS);
  C_REQUIRE(c == 'G', "[%s] barrier not released by the parent", in_me);
}

/* ---- parent side ---- */

typedef void (*in_role_fn)(int rank, void *arg);

/* Forks a child running role(rank, arg) (which must end with in_child_done). */
static inline int in_spawn(const char *name, in_role_fn role, int rank, void *arg) {
  int up[2], down[2];
  signal(SIGPIPE, SIG_IGN); /* a child gone early must not kill the parent */
  if (in_nkids >= IN_MAX || pipe(up) != 0 || pipe(down) != 0) {
    fprintf(stderr, "FAIL: cannot create child %s\n", name);
    exit(1);
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    for (int i = 0; i < in_nkids; i++) {
      if (in_kids[i].up >= 0)
        close(in_kids[i].up);
      if (in_kids[i].down >= 0)
        close(in_kids[i].down);
    }
    close(up[0]);
    close(down[1]);
    in_up_fd = up[1];
    in_down_fd = down[0];
    snprintf(in_me, sizeof in_me, "%s", name);
    t_checks = 0;
    t_failures = 0;
    role(rank, arg);
    in_child_done();
  }
  close(up[1]);
  close(down[0]);
  struct in_child *k = &in_kids[in_nkids];
  memset(k, 0, sizeof *k);
  k->pid = pid;
  k->up = up[0];
  k->down = down[1];
  k->alive = 1;
  k->started = now_ms();
  snprintf(k->name, sizeof k->name, "%s", name);
  return in_nkids++;
}

/* Sends one character to child i (ignored if it is gone). */
static inline void in_send_to(int i, char c) {
  if (in_kids[i].alive && in_kids[i].down >= 0)
    while (write(in_kids[i].down, &c, 1) < 0 && errno == EINTR) {
    }
}

/* Forgets every (reaped) child: closes what is left of their pipes. */
static inline void in_reset(void) {
  for (int i = 0; i < in_nkids; i++) {
    if (in_kids[i].up >= 0)
      close(in_kids[i].up);
    if (in_kids[i].down >= 0)
      close(in_kids[i].down);
  }
  in_nkids = 0;
}

static inline void in_kill_all(void) {
  for (int i = 0; i < in_nkids; i++)
    if (in_kids[i].alive)
      kill(in_kids[i].pid, SIGKILL);
}

/* Records how child i ended (CHECK on failure). */
static inline void in_judge(int i) {
  struct in_child *k = &in_kids[i];
  int ws = k->status;
  double secs = (now_ms() - k->started) / 1e3;
  if (WIFEXITED(ws)) {
    CHECK(WEXITSTATUS(ws) == 0, "child %s (pid %d) exited with %d after %.1f s", k->name,
          (int)k->pid, WEXITSTATUS(ws), secs);
  } else if (WIFSIGNALED(ws)) {
    CHECK(k->expect_kill && WTERMSIG(ws) == SIGKILL,
          "child %s (pid %d) killed by signal %d after %.1f s", k->name, (int)k->pid,
          WTERMSIG(ws), secs);
  }
}

/* Reaps what has ended; returns how many children are still alive. */
static inline int in_reap(void) {
  int alive = 0;
  for (int i = 0; i < in_nkids; i++) {
    struct in_child *k = &in_kids[i];
    if (!k->alive)
      continue;
    int ws = 0;
    pid_t r = waitpid(k->pid, &ws, WNOHANG);
    if (r == k->pid) {
      k->alive = 0;
      k->status = ws;
      close(k->down);
      k->down = -1;
      in_judge(i);
    } else {
      alive++;
    }
  }
  return alive;
}

static inline double in_deadline(void) {
  const char *s = getenv("INTRANODE_TIMEOUT_S");
  double secs = s && atof(s) > 0 ? atof(s) : 60;
  return now_ms() + secs * 1e3;
}

/* Serves barriers and hook characters until `until` returns true (or every
 * child is gone when until is NULL), the deadline passes (failure: every child
 * is killed), or a child failed (the others get 3 s to finish their reports,
 * then are killed). Returns 1 while the test can go on. */
static inline int in_serve(double deadline, in_hook_fn hook, int (*until)(void)) {
  double fail_at = 0;
  for (;;) {
    int before = t_failures;
    int alive = in_reap();
    if (t_failures > before && !fail_at)
      fail_at = now_ms() + 3000;
    if (until ? until() : alive == 0)
      return t_failures == 0;
    if (alive == 0) {
      CHECK(0, "every child ended before the test reached its next step");
      return 0;
    }
    if (fail_at && now_ms() > fail_at) {
      fprintf(stderr, "killing the remaining children after a failure\n");
      in_kill_all();
      while (in_reap() > 0)
        sleep_ms(10);
      return 0;
    }
    if (now_ms() > deadline) {
      for (int i = 0; i < in_nkids; i++)
        if (in_kids[i].alive)
          CHECK(0, "child %s (pid %d) still running at the deadline: killed", in_kids[i].name,
                (int)in_kids[i].pid);
      fprintf(stderr, "(INTRANODE_TRACE=1 shows the children's steps)\n");
      in_kill_all();
      while (in_reap() > 0)
        sleep_ms(10);
      return 0;
    }
    struct pollfd p[IN_MAX];
    int map[IN_MAX], n = 0;
    for (int i = 0; i < in_nkids; i++)
      if (in_kids[i].up >= 0) {
        p[n].fd = in_kids[i].up;
        p[n].events = POLLIN;
        p[n].revents = 0;
        map[n++] = i;
      }
    if (n == 0 || poll(p, (nfds_t)n, 20) <= 0) {
      if (n == 0)
        sleep_ms(20);
      continue;
    }
    for (int j = 0; j < n; j++) {
      if (!p[j].revents)
        continue;
      struct in_child *k = &in_kids[map[j]];
      char c = 0;
      ssize_t r = read(k->up, &c, 1);
      if (r <= 0) { /* EOF: the child is exiting */
        close(k->up);
        k->up = -1;
        k->at_barrier = 0;
        continue;
      }
      if (c == 'B')
        k->at_barrier = 1;
      else if (hook)
        hook(map[j], c);
    }
    /* Release a barrier once every child still able to talk is in it. */
    int waiting = 0, talking = 0;
    for (int i = 0; i < in_nkids; i++)
      if (in_kids[i].alive && in_kids[i].up >= 0) {
        talking++;
        waiting += in_kids[i].at_barrier;
      }
    if (talking > 0 && waiting == talking)
      for (int i = 0; i < in_nkids; i++)
        if (in_kids[i].at_barrier) {
          in_kids[i].at_barrier = 0;
          in_send_to(i, 'G');
        }
  }
}

/* ---- children's helpers ---- */

static inline double in_env_num(const char *name, double dflt) {
  const char *s = getenv(name);
  return s && *s ? atof(s) : dflt;
}

/* INTRANODE_TRACE=1: children print each step on stderr (to find a hang). */
#define TRACE(...)                                                             \
  do {                                                                         \
    if (in_env_num("INTRANODE_TRACE", 0) > 0) {                                \
      fprintf(stderr, "[%s %.3f] ", in_me, now_ms() / 1e3);                    \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

/* mx_wait up to ms; returns 1 and fills *st when the request completed. */
static inline int in_wait(mx_endpoint_t ep, mx_request_t *r, uint32_t ms, mx_status_t *st) {
  uint32_t result = 0;
  mx_status_t tmp;
  if (!st)
    st = &tmp;
  memset(st, 0, sizeof *st);
  mx_return_t rc = mx_wait(ep, r, ms, st, &result);
  if (rc != MX_SUCCESS) {
    fprintf(stderr, "[%s] mx_wait: %s\n", in_me, mx_strerror(rc));
    return 0;
  }
  return result == 1;
}

static inline mx_request_t in_isend(mx_endpoint_t ep, mx_endpoint_addr_t to, mx_segment_t *seg,
                                    uint32_t nseg, uint64_t m, void *ctx, int sync) {
  mx_request_t r = NULL;
  mx_return_t rc = sync ? mx_issend(ep, seg, nseg, to, m, ctx, &r)
                        : mx_isend(ep, seg, nseg, to, m, ctx, &r);
  CHECK(rc == MX_SUCCESS, "[%s] mx_i%ssend(match %#" PRIx64 "): %s", in_me, sync ? "s" : "", m,
        mx_strerror(rc));
  return rc == MX_SUCCESS ? r : NULL;
}

static inline mx_request_t in_irecv(mx_endpoint_t ep, mx_segment_t *seg, uint32_t nseg,
                                    uint64_t m, uint64_t mask, void *ctx) {
  mx_request_t r = NULL;
  mx_return_t rc = mx_irecv(ep, seg, nseg, m, mask, ctx, &r);
  CHECK(rc == MX_SUCCESS, "[%s] mx_irecv(match %#" PRIx64 "): %s", in_me, m, mx_strerror(rc));
  return rc == MX_SUCCESS ? r : NULL;
}

/* mx_connect to endpoint `index` of the local board 0, retried for up to 10 s. */
static inline mx_endpoint_addr_t in_connect(mx_endpoint_t ep, uint32_t index) {
  mx_endpoint_addr_t a;
  mx_return_t rc = MX_SUCCESS;
  double end = now_ms() + 10000;
  memset(&a, 0, sizeof a);
  do {
    rc = mx_connect(ep, t_nic(), index, TKEY, 3000, &a);
    if (rc == MX_SUCCESS)
      return a;
    sleep_ms(50);
  } while (now_ms() < end);
  C_REQUIRE(0, "[%s] mx_connect to endpoint %u: %s", in_me, index, mx_strerror(rc));
  return a;
}

/* Opens endpoint `index` of board 0 (retried for a few seconds: the lock of a
 * dead owner is released by the kernel, maybe a moment after its death). */
static inline mx_endpoint_t in_open(uint32_t index) {
  mx_endpoint_t ep = NULL;
  mx_return_t rc = MX_SUCCESS;
  double end = now_ms() + 5000;
  do {
    rc = mx_open_endpoint(0, index, TKEY, NULL, 0, &ep);
    if (rc == MX_SUCCESS)
      return ep;
    sleep_ms(50);
  } while (now_ms() < end);
  C_REQUIRE(0, "[%s] mx_open_endpoint(0, %u): %s", in_me, index, mx_strerror(rc));
  return ep;
}

static inline void in_init(void) {
  mx_return_t rc = mx_init();
  C_REQUIRE(rc == MX_SUCCESS, "[%s] mx_init: %s", in_me, mx_strerror(rc));
  mx_set_error_handler(record_handler);
}

#endif /* OMX_INTRANODE_H */
