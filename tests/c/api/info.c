/* info.c - mx_get_info for every key (with and without an endpoint), short
 * output buffers (MX_BAD_INFO_LENGTH), unknown keys (MX_BAD_INFO_KEY), NULL
 * output (MX_BAD_INFO_VAL); counter values follow the traffic. */
#include "common.h"

static uint32_t u32_info(mx_endpoint_t ep, mx_get_info_key_t key) {
  uint32_t v = 0xdeadbeefu;
  CHECK_OK(mx_get_info(ep, key, NULL, 0, &v, sizeof v));
  return v;
}

static uint64_t counters_sum(mx_endpoint_t ep, uint32_t count) {
  uint32_t *vals = xmalloc(4u * count);
  uint64_t sum = 0;
  CHECK_OK(mx_get_info(ep, MX_COUNTERS_VALUES, NULL, 0, vals, 4u * count));
  for (uint32_t i = 0; i < count; i++)
    sum += vals[i];
  free(vals);
  return sum;
}

int main(void) {
  t_init();
  /* MX_COPY_SEND_MAX is meaningful before any endpoint is open (not 0) */
  {
    uint32_t v = 0;
    CHECK_OK(mx_get_info(NULL, MX_COPY_SEND_MAX, NULL, 0, &v, sizeof v));
    CHECK(v > 0, "MX_COPY_SEND_MAX is 0 before the first endpoint is open");
  }
  mx_endpoint_t ep = t_open(0, TKEY), ep1 = t_open(1, TKEY);
  uint64_t nic = t_nic();
  mx_endpoint_t eps[3] = {NULL, ep, NULL};

  /* Keys that do not depend on the endpoint: same answer with and without. */
  for (int k = 0; k < 2; k++) {
    mx_endpoint_t e = eps[k];
    uint32_t count = u32_info(e, MX_NIC_COUNT);
    CHECK(count == 1, "MX_NIC_COUNT %u with only lo", count);
    CHECK(u32_info(e, MX_MAX_NATIVE_ENDPOINTS) == 32, "MX_MAX_NATIVE_ENDPOINTS");
    CHECK(u32_info(e, MX_NATIVE_REQUESTS) == 0xffffffffu, "MX_NATIVE_REQUESTS");
    CHECK(u32_info(e, MX_PORT_COUNT) == 1, "MX_PORT_COUNT");
    CHECK(u32_info(e, MX_PIO_SEND_MAX) == 128, "MX_PIO_SEND_MAX");
    {
      /* the smaller of the network and shared-memory eager limits: larger local
       * sends are read in place, not buffered */
      const char *env = getenv("OMX_RNDV_THRESHOLD");
      const char *shm_env = getenv("OMX_SHARED_RNDV_THRESHOLD");
      uint32_t net = env ? (uint32_t)strtoul(env, NULL, 0) : 32768u;
      uint32_t shm = shm_env ? (uint32_t)strtoul(shm_env, NULL, 0) : 4096u;
      uint32_t want = net < shm ? net : shm;
      uint32_t got = u32_info(e, MX_COPY_SEND_MAX);
      CHECK(got == want, "MX_COPY_SEND_MAX %u, expected %u", got, want);
    }
    {
      uint32_t node = u32_info(e, MX_NUMA_NODE);
      CHECK(node == 0xffffffffu || node < 1024, "MX_NUMA_NODE %u", node);
    }
    CHECK(u32_info(e, MX_NET_TYPE) == MX_NET_ETHER, "MX_NET_TYPE");
    CHECK(u32_info(e, MX_LINE_SPEED) == MX_SPEED_OPEN_MX ||
              u32_info(e, MX_LINE_SPEED) == MX_SPEED_10G,
          "MX_LINE_SPEED %u", u32_info(e, MX_LINE_SPEED));

    /* MX_NIC_IDS: count ids, then a 0 terminator. */
    {
      uint64_t ids[4] = {7, 7, 7, 7};
      CHECK_OK(mx_get_info(e, MX_NIC_IDS, NULL, 0, ids, 8u * (count + 1)));
      CHECK(ids[0] == nic, "MX_NIC_IDS[0] %#" PRIx64 ", expected %#" PRIx64, ids[0], nic);
      CHECK(ids[count] == 0, "MX_NIC_IDS not 0-terminated");
      CHECK(ids[count + 1] == 7, "MX_NIC_IDS wrote past the buffer");
      CHECK_ERR(mx_get_info(e, MX_NIC_IDS, NULL, 0, ids, 8u * count), MX_BAD_INFO_LENGTH);
      CHECK_ERR(mx_get_info(e, MX_NIC_IDS, NULL, 0, ids, 0), MX_BAD_INFO_LENGTH);
    }

    /* Counters: labels (128-byte slots), values. */
    {
      uint32_t n = u32_info(e, MX_COUNTERS_COUNT);
      CHECK(n > 0 && n < 10000, "MX_COUNTERS_COUNT %u", n);
      char *labels = xmalloc((size_t)n * MX_MAX_STR_LEN + 1);
      memset(labels, 'x', (size_t)n * MX_MAX_STR_LEN + 1);
      CHECK_OK(mx_get_info(e, MX_COUNTERS_LABELS, NULL, 0, labels, n * MX_MAX_STR_LEN));
      for (uint32_t i = 0; i < n; i++) {
        const char *l = labels + (size_t)i * MX_MAX_STR_LEN;
        size_t len = strnlen(l, MX_MAX_STR_LEN);
        CHECK(len > 0 && len < MX_MAX_STR_LEN, "label %u length %zu", i, len);
        for (uint32_t j = 0; j < i && len < MX_MAX_STR_LEN; j++)
          CHECK(strcmp(l, labels + (size_t)j * MX_MAX_STR_LEN) != 0,
                "labels %u and %u equal (%s)", i, j, l);
      }
      CHECK(labels[(size_t)n * MX_MAX_STR_LEN] == 'x', "labels wrote past the buffer");
      CHECK_ERR(mx_get_info(e, MX_COUNTERS_LABELS, NULL, 0, labels, n * MX_MAX_STR_LEN - 1),
                MX_BAD_INFO_LENGTH);
      free(labels);
      uint32_t *vals = xmalloc(4u * n + 4);
      vals[n] = 0x12345678u;
      CHECK_OK(mx_get_info(e, MX_COUNTERS_VALUES, NULL, 0, vals, 4u * n));
      CHECK(vals[n] == 0x12345678u, "values wrote past the buffer");
      CHECK_ERR(mx_get_info(e, MX_COUNTERS_VALUES, NULL, 0, vals, 4u * n - 1),
                MX_BAD_INFO_LENGTH);
      /* board given as a uint8 in in_val when there is no endpoint */
      if (!e) {
        uint8_t board = 0;
        CHECK_OK(mx_get_info(NULL, MX_COUNTERS_VALUES, &board, 1, vals, 4u * n));
        CHECK_OK(mx_get_info(NULL, MX_NUMA_NODE, &board, 1, vals, 4));
      }
      free(vals);
    }

    /* Strings: NUL-terminated, truncated to out_len - 1. */
    {
      mx_get_info_key_t skeys[3] = {MX_PRODUCT_CODE, MX_PART_NUMBER, MX_SERIAL_NUMBER};
      for (int i = 0; i < 3; i++) {
        char s[256], small[5];
        memset(s, 'x', sizeof s);
        CHECK_OK(mx_get_info(e, skeys[i], NULL, 0, s, sizeof s));
        CHECK(memchr(s, 0, sizeof s) != NULL && strlen(s) > 0, "key %d: empty or unterminated",
              (int)skeys[i]);
        memset(small, 'x', sizeof small);
        CHECK_OK(mx_get_info(e, skeys[i], NULL, 0, small, 4));
        CHECK(small[3] == 0 && strncmp(small, s, 3) == 0 && small[4] == 'x',
              "key %d: not truncated to out_len - 1", (int)skeys[i]);
        CHECK_ERR(mx_get_info(e, skeys[i], NULL, 0, s, 0), MX_BAD_INFO_LENGTH);
      }
    }

    /* Every uint32 key rejects a 3-byte buffer. */
    {
      mx_get_info_key_t ukeys[] = {MX_NIC_COUNT, MX_MAX_NATIVE_ENDPOINTS, MX_NATIVE_REQUESTS,
                                   MX_COUNTERS_COUNT, MX_PORT_COUNT, MX_PIO_SEND_MAX,
                                   MX_COPY_SEND_MAX, MX_NUMA_NODE, MX_NET_TYPE, MX_LINE_SPEED};
      for (size_t i = 0; i < sizeof ukeys / sizeof ukeys[0]; i++) {
        unsigned char b[4] = {0x55, 0x55, 0x55, 0x55};
        CHECK_ERR(mx_get_info(e, ukeys[i], NULL, 0, b, 3), MX_BAD_INFO_LENGTH);
        CHECK(b[3] == 0x55, "key %d wrote a 4th byte into a 3-byte buffer", (int)ukeys[i]);
        CHECK_ERR(mx_get_info(e, ukeys[i], NULL, 0, NULL, 4), MX_BAD_INFO_VAL);
      }
    }

    /* Unknown keys. */
    {
      uint32_t v;
      CHECK_ERR(mx_get_info(e, (mx_get_info_key_t)0, NULL, 0, &v, sizeof v), MX_BAD_INFO_KEY);
      CHECK_ERR(mx_get_info(e, (mx_get_info_key_t)17, NULL, 0, &v, sizeof v), MX_BAD_INFO_KEY);
      CHECK_ERR(mx_get_info(e, (mx_get_info_key_t)0x7fffffff, NULL, 0, &v, sizeof v),
                MX_BAD_INFO_KEY);
    }
  }

  /* Counter values move with the traffic (polled: they may be published lazily). */
  {
    uint32_t n = u32_info(ep, MX_COUNTERS_COUNT);
    uint64_t before = counters_sum(ep, n), after = before;
    mx_endpoint_addr_t a = t_connect(ep, 1, TKEY);
    char b[16] = "counters";
    for (int i = 0; i < 20; i++) {
      mx_request_t s = t_send(ep, a, b, sizeof b, 9, NULL);
      mx_request_t r = t_recv(ep1, b, sizeof b, 9, MX_MATCH_MASK_NONE, NULL);
      t_wait(ep1, &r, NULL);
      t_wait(ep, &s, NULL);
    }
    for (int i = 0; i < 40 && after <= before; i++) {
      sleep_ms(50);
      after = counters_sum(ep, n);
    }
    CHECK(after > before, "counter values did not change with traffic (%" PRIu64 " -> %" PRIu64 ")",
          before, after);
  }

  CHECK_OK(mx_close_endpoint(ep1));
  CHECK_OK(mx_close_endpoint(ep));
  mx_finalize();
  DONE();
}
