/* strings.c - mx_strerror and mx_strstatus: a distinct, non-empty text for
 * every code of the MX interface, and a text (no crash) for unknown codes.
 * Needs no mx_init. */
#include "common.h"

int main(void) {
  const char *e[MX_NOT_SUPPORTED_WITH_CONTEXT_ID + 1];
  const char *s[MX_STATUS_NO_RESOURCES + 1];

  for (int i = 0; i <= MX_NOT_SUPPORTED_WITH_CONTEXT_ID; i++) {
    e[i] = mx_strerror((mx_return_t)i);
    CHECK(e[i] != NULL && e[i][0] != 0, "mx_strerror(%d) empty", i);
    if (!e[i])
      continue;
    CHECK(strlen(e[i]) < 200, "mx_strerror(%d) too long", i);
    for (int j = 0; j < i; j++)
      CHECK(e[j] == NULL || strcmp(e[i], e[j]) != 0, "mx_strerror(%d) == mx_strerror(%d): %s", i,
            j, e[i]);
  }
  for (int i = 0; i <= MX_STATUS_NO_RESOURCES; i++) {
    s[i] = mx_strstatus((mx_status_code_t)i);
    CHECK(s[i] != NULL && s[i][0] != 0, "mx_strstatus(%d) empty", i);
    if (!s[i])
      continue;
    for (int j = 0; j < i; j++)
      CHECK(s[j] == NULL || strcmp(s[i], s[j]) != 0, "mx_strstatus(%d) == mx_strstatus(%d): %s",
            i, j, s[i]);
  }
  /* Codes outside the interface still get a text. */
  {
    int bad[] = {44, 95, 99, 1000, 0x7fffffff, -1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      const char *t = mx_strerror((mx_return_t)bad[i]);
      CHECK(t != NULL && t[0] != 0, "mx_strerror(%d)", bad[i]);
      t = mx_strstatus((mx_status_code_t)bad[i]);
      CHECK(t != NULL && t[0] != 0, "mx_strstatus(%d)", bad[i]);
    }
  }
  /* A few texts mean what they should. */
  CHECK(e[MX_SUCCESS] && strstr(e[MX_SUCCESS], "uccess"), "MX_SUCCESS text: %s", e[MX_SUCCESS]);
  CHECK(s[MX_STATUS_TRUNCATED] && strstr(s[MX_STATUS_TRUNCATED], "runcat"),
        "MX_STATUS_TRUNCATED text: %s", s[MX_STATUS_TRUNCATED]);
  CHECK(e[MX_TIMEOUT] && strstr(e[MX_TIMEOUT], "imeout"), "MX_TIMEOUT text: %s", e[MX_TIMEOUT]);
  /* Same pointer-stable text on a second call, and after init. */
  CHECK(mx_strerror(MX_BUSY) && strcmp(mx_strerror(MX_BUSY), e[MX_BUSY]) == 0, "unstable text");
  CHECK_OK(mx_init());
  CHECK(strcmp(mx_strstatus(MX_STATUS_CANCELLED), s[MX_STATUS_CANCELLED]) == 0,
        "text changed after mx_init");
  mx_finalize();
  DONE();
}
