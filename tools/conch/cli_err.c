/* How the conch CLI fails: one exit code per class of failure (cli.h,
   CLI_EXIT_*), one message per failure, as text ("conch: code: message")
   or, with --json-errors (CONCH_JSON_ERRORS), as one JSON object on a
   line of its own on stderr.  Also the checks on the CLI's own output: a
   write to stdout or stderr that fails ends with a message and
   CLI_EXIT_OUTPUT. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <conch/base64.h>
#include <conch/conch.h>

#include "cli.h"

static int json_mode;
/* A failed write of output was reported: the last check says no more. */
static int output_reported;
/* The last byte this process wrote to stderr for the remote process, so
   that conch's own line starts a line of its own. */
static int stderr_mid_line;

void cli_set_json_errors(int on) { json_mode = on; }

int cli_json_errors(void) { return json_mode; }

void cli_stderr_passed(const uint8_t *p, size_t n) {
  if (n > 0) {
    stderr_mid_line = p[n - 1] != '\n';
  }
}

int cli_exit_code(conch_code code) {
  switch (code) {
  case CONCH_CODE_OK:
    return 0;
  case CONCH_CODE_UNAVAILABLE:
    return CLI_EXIT_UNAVAILABLE;
  case CONCH_CODE_DEADLINE_EXCEEDED:
    return CLI_EXIT_DEADLINE;
  case CONCH_CODE_NOT_FOUND:
    return CLI_EXIT_NOT_FOUND;
  case CONCH_CODE_UNAUTHENTICATED:
  case CONCH_CODE_PERMISSION_DENIED:
    return CLI_EXIT_DENIED;
  case CONCH_CODE_INVALID_ARGUMENT:
  case CONCH_CODE_FAILED_PRECONDITION:
  case CONCH_CODE_OUT_OF_RANGE:
    return CLI_EXIT_INVALID;
  case CONCH_CODE_RESOURCE_EXHAUSTED:
    return CLI_EXIT_EXHAUSTED;
  default:
    return CLI_EXIT_RPC;
  }
}

/* gRPC's guidance (doc/statuscodes.md): unavailable is "most likely a
   transient condition, which can be corrected by retrying with a
   backoff"; aborted asks for a retry "at a higher level" (the whole
   command); resource_exhausted from the server is load or a quota that
   frees up (conch serve: its buffer budget, process and descriptor
   limits, a full stdin queue), but made here it is one of the client's own
   caps (a response too large), which a retry meets again.  Everything else
   fails the same way until something changes: deadline_exceeded too (a
   process that reached its lifetime would reach it again). */
int cli_retryable(const conch_status *st) {
  switch (st->code) {
  case CONCH_CODE_UNAVAILABLE:
  case CONCH_CODE_ABORTED:
    return 1;
  case CONCH_CODE_RESOURCE_EXHAUSTED:
    return st->origin != CONCH_ORIGIN_LOCAL;
  default:
    return 0;
  }
}

/* Length of the valid UTF-8 sequence at |s| (1-4), or 0. */
static size_t utf8_len(const unsigned char *s) {
  if (s[0] < 0x80) {
    return 1;
  }
  if (s[0] >= 0xc2 && s[0] <= 0xdf) {
    return (s[1] & 0xc0) == 0x80 ? 2 : 0;
  }
  if (s[0] >= 0xe0 && s[0] <= 0xef) {
    if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
        (s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f)) {
      return 0;
    }
    return 3;
  }
  if (s[0] >= 0xf0 && s[0] <= 0xf4) {
    if ((s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
        (s[3] & 0xc0) != 0x80 || (s[0] == 0xf0 && s[1] < 0x90) ||
        (s[0] == 0xf4 && s[1] > 0x8f)) {
      return 0;
    }
    return 4;
  }
  return 0;
}

void cli_json_string(FILE *f, const char *s, int strict) {
  const unsigned char *u = (const unsigned char *)(s != NULL ? s : "");
  fputc('"', f);
  while (*u != '\0') {
    size_t n;
    if (*u == '"' || *u == '\\') {
      fprintf(f, "\\%c", *u);
    } else if (*u == '\n') {
      fputs("\\n", f);
    } else if (*u == '\t') {
      fputs("\\t", f);
    } else if (*u == '\r') {
      fputs("\\r", f);
    } else if (*u < 0x20 || *u == 0x7f) {
      fprintf(f, "\\u%04x", *u);
    } else if (*u >= 0x80 && strict && (n = utf8_len(u)) != 0) {
      fwrite(u, 1, n, f);
      u += n;
      continue;
    } else if (*u >= 0x80 && strict) {
      fputs("\\ufffd", f); /* not UTF-8: the replacement character */
    } else {
      fputc(*u, f);
    }
    u++;
  }
  fputc('"', f);
}

/* Standard base64 with padding, which every decoder takes. */
static void put_base64(FILE *f, const uint8_t *p, size_t n) {
  char buf[4096];
  fputc('"', f);
  while (n > 0) {
    size_t take = n < 3000 ? n : 3000; /* a multiple of 3 */
    size_t w = conch_base64_encode(p, take, CONCH_BASE64_PAD, buf);
    fwrite(buf, 1, w, f);
    p += take;
    n -= take;
  }
  fputc('"', f);
}

static const char *origin_name(conch_origin o) {
  switch (o) {
  case CONCH_ORIGIN_SERVER:
    return "server";
  case CONCH_ORIGIN_HTTP:
    return "http";
  case CONCH_ORIGIN_LOCAL:
    return "local";
  default:
    return "cli";
  }
}

/* A line of its own, after the remote process's stderr. */
static void fresh_line(void) {
  if (stderr_mid_line) {
    fputc('\n', stderr);
    stderr_mid_line = 0;
  }
}

/* The one JSON object of a failure.  |origin| NULL: the status's. */
static void put_json(const conch_status *st, const char *message,
                     const char *origin, int exit_code, const char *hint,
                     uint32_t pid) {
  const char *name = conch_code_name(st->code);
  size_t k;
  FILE *f = stderr;

  fprintf(f, "{\"code\":");
  cli_json_string(f, name != NULL ? name : "unknown", 1);
  fprintf(f, ",\"grpc_code\":%d,\"message\":", (int)st->code);
  cli_json_string(f, message, 1);
  fputs(",\"details\":[", f);
  for (k = 0; k < st->ndetails; k++) {
    const char *t = st->details[k].type_url;
    const char *slash = t != NULL ? strrchr(t, '/') : NULL;
    fputs(k > 0 ? ",{\"type\":" : "{\"type\":", f);
    /* Connect's form: the message name, without the type URL's host. */
    cli_json_string(f, slash != NULL ? slash + 1 : t, 1);
    fputs(",\"value\":", f);
    put_base64(f, st->details[k].value, st->details[k].len);
    fputc('}', f);
  }
  fprintf(f, "],\"retryable\":%s,\"exit_code\":%d,\"origin\":",
          cli_retryable(st) ? "true" : "false", exit_code);
  cli_json_string(f, origin != NULL ? origin : origin_name(st->origin), 1);
  if (st->http_status != 0) {
    fprintf(f, ",\"http_status\":%d", st->http_status);
  }
  if (pid != 0) {
    fprintf(f, ",\"pid\":%u", pid);
  }
  if (hint != NULL) {
    fputs(",\"hint\":", f);
    cli_json_string(f, hint, 1);
  }
  fputs("}\n", f);
}

int cli_fail_status(const conch_status *st, const char *hint, uint32_t pid) {
  const char *msg = conch_status_message(st);
  int code = cli_exit_code(st->code);
  if (code == 0) {
    code = CLI_EXIT_RPC; /* an OK status is no failure: not ours to meet */
  }
  fflush(stdout);
  fresh_line();
  if (json_mode) {
    put_json(st, msg, NULL, code, hint, pid);
  } else {
    fprintf(stderr, "conch: %s: %s\n", conch_code_name(st->code), msg);
    if (hint != NULL) {
      fprintf(stderr, "conch: %s\n", hint);
    }
  }
  fflush(stderr);
  return code;
}

int cli_fail_local(int exit_code, conch_code code, const char *prefix,
                   const char *hint, uint32_t pid, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  conch_status st;

  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fflush(stdout);
  fresh_line();
  if (json_mode) {
    conch_status_init(&st);
    st.code = code;
    st.origin = CONCH_ORIGIN_LOCAL; /* retryable as a local status */
    put_json(&st, msg, code == CONCH_CODE_UNAVAILABLE ? "local" : "cli",
             exit_code, hint, pid);
  } else {
    fprintf(stderr, "%s: %s\n", prefix != NULL ? prefix : "conch", msg);
    if (hint != NULL) {
      fprintf(stderr, "%s\n", hint);
    }
  }
  fflush(stderr);
  return exit_code;
}

void cli_note(const char *fmt, ...) {
  va_list ap;
  fflush(stdout);
  fresh_line();
  fputs("conch: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(stderr);
}

int cli_fail_output(const char *stream, int err, uint32_t pid,
                    const char *what) {
  const char *why = err == EPIPE ? "the reader went away (EPIPE)"
                    : err > 0    ? strerror(err)
                                 : "write error";
  output_reported = 1;
  return cli_fail_local(CLI_EXIT_OUTPUT, CONCH_CODE_DATA_LOSS, NULL, NULL, pid,
                        "cannot write to %s: %s%s%s", stream, why,
                        what != NULL ? "; " : "", what != NULL ? what : "");
}

int cli_finish_output(int rc) {
  int out_err = 0, err_err = 0;

  /* -1: stdio met an error earlier, whose errno is gone. */
  errno = 0;
  if (fflush(stdout) != 0) {
    out_err = errno != 0 ? errno : -1;
  } else if (ferror(stdout)) {
    out_err = -1;
  }
  errno = 0;
  if (fclose(stdout) != 0 && out_err == 0) {
    out_err = errno != 0 ? errno : -1;
  }
  if (out_err != 0 && output_reported) {
    rc = rc == 0 ? CLI_EXIT_OUTPUT : rc;
  } else if (out_err != 0) {
    int code = cli_fail_output("stdout", out_err, 0, NULL);
    rc = rc == 0 ? code : rc;
  }
  if (fflush(stderr) != 0 || ferror(stderr)) {
    err_err = 1; /* nowhere left to say it */
  }
  if (err_err && rc == 0) {
    rc = CLI_EXIT_OUTPUT;
  }
  return rc;
}
