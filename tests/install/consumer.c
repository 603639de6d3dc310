/* Builds against the installed headers and library and makes a client;
   checks that the installed conch/features.h tells the truth about the
   library it came with, and that what a build left out answers as the
   headers say. */
#include <stdio.h>
#include <string.h>

#include <conch/base64.h>
#include <conch/conch.h>
#include <conch/server.h>

static int expect(int got, int want, const char *what) {
  if (got != want) {
    fprintf(stderr, "%s: %d (%s), want %d\n", what, got, conch_strerror(got),
            want);
    return 1;
  }
  return 0;
}

int main(void) {
  const conch_version_info *v = conch_version();
  unsigned want = (CONCH_WITH_SERVER ? CONCH_FEATURE_SERVER : 0) |
                  (CONCH_WITH_BROTLI ? CONCH_FEATURE_BROTLI : 0) |
                  (CONCH_WITH_ZSTD ? CONCH_FEATURE_ZSTD : 0) |
                  (CONCH_WITH_SNAPPY ? CONCH_FEATURE_SNAPPY : 0) |
                  (CONCH_WITH_JSON ? CONCH_FEATURE_JSON : 0);
  conch_client_opts *o;
  conch_server_opts *so;
  conch_client *c;
  int rv, bad = 0;

  rv = conch_client_new(&c, "http://127.0.0.1:1", NULL);
  if (rv != 0) {
    fprintf(stderr, "conch_client_new: %s\n", conch_strerror(rv));
    return 1;
  }
  conch_client_free(c);
  if (v->age < 2 || v->features != want) {
    fprintf(stderr, "features: library %#x, conch/features.h %#x\n",
            v->features, want);
    return 1;
  }
  if (conch_client_opts_new(&o) != 0) {
    return 1;
  }
  bad |= expect(conch_client_opts_set_codec(o, CONCH_CODEC_JSON),
                CONCH_WITH_JSON ? 0 : CONCH_ERR_UNSUPPORTED, "JSON codec");
  bad |= expect(conch_client_opts_set_send_compression_name(o, "br"),
                CONCH_WITH_BROTLI ? 0 : CONCH_ERR_UNSUPPORTED, "br");
  bad |= expect(conch_client_opts_set_send_compression_name(o, "zstd"),
                CONCH_WITH_ZSTD ? 0 : CONCH_ERR_UNSUPPORTED, "zstd");
  bad |= expect(conch_client_opts_set_send_compression_name(o, "snappy"),
                CONCH_WITH_SNAPPY ? 0 : CONCH_ERR_UNSUPPORTED, "snappy");
  conch_client_opts_free(o);
  rv = conch_server_opts_new(&so);
  bad |= expect(rv, CONCH_WITH_SERVER ? 0 : CONCH_ERR_UNSUPPORTED, "server");
  conch_server_opts_free(so);
  {
    /* The public base64 (conch/base64.h) is exported. */
    char enc[8];
    uint8_t dec[8];
    size_t n =
        conch_base64_encode((const uint8_t *)"fo", 2, CONCH_BASE64_PAD, enc);
    size_t m = 0;

    bad |= expect(n == 4 && memcmp(enc, "Zm8=", 4) == 0, 1, "base64 encode");
    bad |= expect(conch_base64_decode(enc, n, 0, dec, &m), 0, "base64 decode");
    bad |= expect(m == 2 && memcmp(dec, "fo", 2) == 0, 1, "base64 round trip");
  }
  if (bad) {
    return 1;
  }
  printf("conch %s, features %#x\n", v->version_str, v->features);
  return 0;
}
