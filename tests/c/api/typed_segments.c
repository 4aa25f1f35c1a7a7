/* typed_segments.c - omx_isend_typed()/omx_irecv_typed(): messages of every
 * class (20 B to 3 MB) sent from memory, a file range and another process's
 * memory mixed in one list, received into the three kinds cut differently, at
 * offsets that are not page-aligned; the receiving file and process memory
 * hold the message afterwards. Bad lists (a send's file shorter than its
 * range, unknown kind, reserved field set, no such process, more than 256
 * segments) are refused at post time with MX_BAD_SEG_LIST or MX_BAD_SEG_CNT
 * through the error handler, and nothing is sent. The other process is a
 * forked child holding a copy of the parent's buffers; it dumps them on
 * request through a pipe. */
#define _GNU_SOURCE
#include "common.h"

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#define AREA (8u << 20)

static unsigned char *area; /* the child's copy is the process memory */
static int to_child[2], from_child[2];
static pid_t child;

static void holder(void) {
  char c;
  while (read(to_child[0], &c, 1) == 1 && c == 'd') {
    size_t done = 0;
    while (done < AREA) {
      ssize_t n = write(from_child[1], area + done, AREA - done);
      if (n <= 0)
        _exit(1);
      done += (size_t)n;
    }
  }
  _exit(0);
}

/* The child's copy of the area, into out. */
static void dump(unsigned char *out) {
  REQUIRE(write(to_child[1], "d", 1) == 1, "ask the holder");
  size_t done = 0;
  while (done < AREA) {
    ssize_t n = read(from_child[0], out + done, AREA - done);
    REQUIRE(n > 0, "read from the holder");
    done += (size_t)n;
  }
}

static omx_typed_segment_t mem_seg(void *p, uint64_t len) {
  omx_typed_segment_t s = {OMX_SEG_MEMORY, -1, 0, 0, (uint64_t)(uintptr_t)p, 0, len};
  return s;
}

static omx_typed_segment_t file_seg(int fd, uint64_t off, uint64_t len) {
  omx_typed_segment_t s = {OMX_SEG_FILE, fd, 0, 0, 0, off, len};
  return s;
}

static omx_typed_segment_t proc_seg(void *p, uint64_t len) {
  omx_typed_segment_t s = {OMX_SEG_PROCESS, -1, (uint32_t)child, 0, (uint64_t)(uintptr_t)p, 0,
                           len};
  return s;
}

static int temp_file(const char *what) {
  char path[] = "/tmp/omx-typed-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0, "mkstemp for %s", what);
  unlink(path);
  return fd;
}

int main(void) {
  static const uint32_t lens[] = {20, 100, 5000, 100000, 3000001};
  enum { N = sizeof lens / sizeof lens[0] };
  unsigned char *msg = xmalloc(3000001), *copy = xmalloc(AREA);
  area = xmalloc(AREA);
  /* Each message's thirds at their places in the area (sender: first half,
   * receiver: second half) and in the files, before the fork. */
  int src = temp_file("source"), dst = temp_file("sink");
  size_t send_at[N], recv_at[N];
  off_t src_off[N], dst_off[N];
  size_t a = 13, b = AREA / 2 + 29;
  off_t fa = 4097, fb = 8191;
  memset(area, 0, AREA);
  for (int i = 0; i < N; i++) {
    uint32_t len = lens[i], t = len / 3;
    fill(msg, len, (uint32_t)i);
    /* sender: memory [0, t), file [t, 2t), process [2t, len) */
    send_at[i] = a;
    memcpy(area + a, msg + 2 * t, len - 2 * t);
    a += len - 2 * t + 7;
    src_off[i] = fa;
    REQUIRE(pwrite(src, msg + t, t, fa) == (ssize_t)t, "write the source file");
    fa += t + 4099;
    recv_at[i] = b;
    b += len + 11;
    dst_off[i] = fb;
    fb += len + 333;
  }
  REQUIRE(a < AREA / 2 && b < AREA, "area large enough");
  REQUIRE(pipe(to_child) == 0 && pipe(from_child) == 0, "pipes");
  child = fork();
  REQUIRE(child >= 0, "fork");
  if (child == 0)
    holder();

  t_init();
  mx_set_error_handler(record_handler);
  mx_endpoint_t e0 = t_open(0, TKEY), e1 = t_open(1, TKEY);
  mx_endpoint_addr_t to1 = t_connect(e0, 1, TKEY);
  unsigned char *smem = xmalloc(3000001), *rmem = xmalloc(3000001);

  /* Refused lists: nothing may arrive for match 0xbad. */
  mx_request_t bad_req;
  unsigned char sink[64];
  omx_typed_segment_t bad_recv = mem_seg(sink, sizeof sink);
  CHECK_OK(omx_irecv_typed(e1, &bad_recv, 1, 0xbad, MX_MATCH_MASK_NONE, NULL, &bad_req));
  {
    mx_request_t r;
    omx_typed_segment_t short_file[2] = {mem_seg(smem, 1000), file_seg(src, fa - 4099, 4100)};
    CHECK_ERR(omx_isend_typed(e0, short_file, 2, to1, 0xbad, NULL, &r), MX_BAD_SEG_LIST);
    CHECK(strstr(h_msg, "beyond the file") != NULL, "short file message: %s", h_msg);
    omx_typed_segment_t odd = mem_seg(smem, 10);
    odd.type = 7;
    CHECK_ERR(omx_isend_typed(e0, &odd, 1, to1, 0xbad, NULL, &r), MX_BAD_SEG_LIST);
    odd = mem_seg(smem, 10);
    odd.reserved = 1;
    CHECK_ERR(omx_isend_typed(e0, &odd, 1, to1, 0xbad, NULL, &r), MX_BAD_SEG_LIST);
    omx_typed_segment_t gone = proc_seg(area, 10);
    gone.pid = 0x7fffffff;
    CHECK_ERR(omx_isend_typed(e0, &gone, 1, to1, 0xbad, NULL, &r), MX_BAD_SEG_LIST);
    CHECK(strstr(h_msg, "no such process") != NULL, "no process message: %s", h_msg);
    CHECK_ERR(omx_irecv_typed(e1, &gone, 1, 0xbad, MX_MATCH_MASK_NONE, NULL, &r),
              MX_BAD_SEG_LIST);
    static omx_typed_segment_t many[257];
    for (int k = 0; k < 257; k++)
      many[k] = mem_seg(smem, 1);
    CHECK_ERR(omx_isend_typed(e0, many, 257, to1, 0xbad, NULL, &r), MX_BAD_SEG_CNT);
  }

  for (int i = 0; i < N; i++) {
    uint32_t len = lens[i], t = len / 3, q = len / 4;
    mx_status_t st;
    mx_request_t rr, sr;
    fill(msg, len, (uint32_t)i);
    memcpy(smem, msg, t);
    memset(rmem, 0, len);
    /* receiver: file [0, q), process [q, 2q), memory [2q, len) */
    omx_typed_segment_t rs[3] = {file_seg(dst, (uint64_t)dst_off[i], q),
                                 proc_seg(area + recv_at[i], q), mem_seg(rmem, len - 2 * q)};
    omx_typed_segment_t ss[4] = {mem_seg(smem, t), file_seg(src, (uint64_t)src_off[i], t),
                                 mem_seg(NULL, 0), proc_seg(area + send_at[i], len - 2 * t)};
    CHECK_OK(omx_irecv_typed(e1, rs, 3, 0x10 + i, MX_MATCH_MASK_NONE, NULL, &rr));
    CHECK_OK(omx_isend_typed(e0, ss, 4, to1, 0x10 + i, NULL, &sr));
    CHECK(t_wait(e1, &rr, &st) && st.code == MX_STATUS_SUCCESS && st.xfer_length == len,
          "%u bytes: receive (status %d, %u bytes)", len, (int)st.code, st.xfer_length);
    CHECK(t_wait(e0, &sr, &st) && st.code == MX_STATUS_SUCCESS, "%u bytes: send", len);
    unsigned char *got = xmalloc(len);
    CHECK(pread(dst, got, q, dst_off[i]) == (ssize_t)q, "%u bytes: read the sink", len);
    dump(copy);
    memcpy(got + q, copy + recv_at[i], q);
    memcpy(got + 2 * q, rmem, len - 2 * q);
    long bad = verify(got, len, (uint32_t)i);
    CHECK(bad < 0, "%u bytes: data differ at %ld", len, bad);
    free(got);
  }
  /* Messages from one sender match in order: a refused send that went out
   * anyway would have matched first. */
  uint32_t result = 1;
  CHECK_OK(mx_cancel(e1, &bad_req, &result));
  CHECK(result == 1, "the refused sends' receive was matched");

  kill(child, SIGTERM);
  waitpid(child, NULL, 0);
  CHECK_OK(mx_close_endpoint(e0));
  CHECK_OK(mx_close_endpoint(e1));
  mx_finalize();
  DONE();
}
