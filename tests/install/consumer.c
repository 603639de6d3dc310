/* Builds against the installed headers and library and makes a client. */
#include <stdio.h>

#include <conch/conch.h>

int main(void) {
  conch_client *c;
  int rv = conch_client_new(&c, "http://127.0.0.1:1", NULL);
  if (rv != 0) {
    fprintf(stderr, "conch_client_new: %s\n", conch_strerror(rv));
    return 1;
  }
  printf("conch %s\n", conch_version()->version_str);
  conch_client_free(c);
  return 0;
}
