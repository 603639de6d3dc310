/* The in-memory transport: see memxport.h. */
#include "memxport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Handles far above any real descriptor, so they never collide with one
   the client has (its wakeup fd). */
#define MEMX_HANDLE0 0x40000000

static memx_conn *by_handle(memx *m, int h) {
  int i = h - MEMX_HANDLE0;
  return i >= 0 && i < m->nconns ? m->conns[i] : NULL;
}

static int x_open(void *ud, const struct sockaddr *addr, socklen_t len) {
  memx *m = ud;
  memx_conn *mc;
  int connect_err = 0;
  m->opens++;
  if (m->refuse != 0) {
    return -m->refuse;
  }
  if (m->on_open != NULL) {
    int err = m->on_open(m, addr, len, &connect_err);
    if (err != 0) {
      return -err;
    }
  }
  if (m->nconns == MEMX_MAX_CONNS) {
    return -EMFILE;
  }
  mc = calloc(1, sizeof(*mc));
  if (mc == NULL) {
    return -ENOMEM;
  }
  mc->handle = MEMX_HANDLE0 + m->nconns;
  mc->open = 1;
  mc->connect_err = connect_err;
  if (len <= sizeof(mc->addr)) {
    memcpy(&mc->addr, addr, len);
    mc->addrlen = len;
  }
  m->conns[m->nconns++] = mc;
  return mc->handle;
}

static int x_connect_result(void *ud, int h) {
  memx_conn *mc = by_handle(ud, h);
  return mc != NULL ? mc->connect_err : EBADF;
}

static long x_read(void *ud, int h, void *buf, size_t len) {
  memx_conn *mc = by_handle(ud, h);
  size_t n;
  if (mc == NULL || !mc->open) {
    return -EBADF;
  }
  if (mc->read_err != 0) {
    return -mc->read_err;
  }
  n = mc->in_len - mc->in_off;
  if (n == 0) {
    return mc->eof ? 0 : -EAGAIN;
  }
  if (n > len) {
    n = len;
  }
  memcpy(buf, mc->in + mc->in_off, n);
  mc->in_off += n;
  if (mc->in_off == mc->in_len) {
    mc->in_off = mc->in_len = 0;
  }
  return (long)n;
}

static long x_write(void *ud, int h, const void *buf, size_t len) {
  memx_conn *mc = by_handle(ud, h);
  if (mc == NULL || !mc->open) {
    return -EBADF;
  }
  if (mc->write_err != 0) {
    return -mc->write_err;
  }
  if (mc->write_block) {
    return -EAGAIN;
  }
  if (mc->out_len + len > mc->out_cap) {
    size_t cap = mc->out_cap ? mc->out_cap : 4096;
    uint8_t *p;
    while (cap < mc->out_len + len) {
      cap *= 2;
    }
    p = realloc(mc->out, cap);
    if (p == NULL) {
      return -EAGAIN;
    }
    mc->out = p;
    mc->out_cap = cap;
  }
  memcpy(mc->out + mc->out_len, buf, len);
  mc->out_len += len;
  mc->out_total += len;
  return (long)len;
}

static void x_close(void *ud, int h) {
  memx_conn *mc = by_handle(ud, h);
  if (mc != NULL) {
    mc->open = 0;
    mc->watched = 0;
  }
}

static int64_t x_clock(void *ud) { return ((memx *)ud)->now; }

static int x_watch(int h, unsigned events, void *ud) {
  memx_conn *mc = by_handle(ud, h);
  if (mc != NULL) {
    mc->watched = (events & CONCH_IO_REMOVE) ? 0 : events;
  }
  return 0;
}

static int x_timer(long ms, void *ud) {
  memx *m = ud;
  m->timer_due = ms < 0 ? -1 : m->now + ms;
  return 0;
}

void memx_init(memx *m) {
  memset(m, 0, sizeof(*m));
  m->now = 1000000;
  m->timer_due = -1;
}

void memx_clear(memx *m) {
  int i;
  for (i = 0; i < m->nconns; i++) {
    free(m->conns[i]->in);
    free(m->conns[i]->out);
    free(m->conns[i]);
  }
  m->nconns = 0;
}

void memx_setup(memx *m, conch_client_opts *opts) {
  conch_transport t = {x_open, x_connect_result, x_read, x_write, x_close,
                       NULL};
  t.user_data = m;
  if (conch_client_opts_set_transport(opts, &t) != 0 ||
      conch_client_opts_set_clock(opts, x_clock, m) != 0) {
    abort();
  }
}

void memx_attach(memx *m, conch_client *c) {
  conch_io_hooks h = {x_watch, x_timer, NULL};
  h.user_data = m;
  m->client = c;
  if (conch_client_set_io_hooks(c, &h) != 0) {
    abort();
  }
}

memx_conn *memx_last(memx *m) {
  return m->nconns > 0 ? m->conns[m->nconns - 1] : NULL;
}

void memx_feed(memx_conn *mc, const void *p, size_t n) {
  uint8_t *q;
  if (n == 0) {
    return;
  }
  q = realloc(mc->in, mc->in_len + n);
  if (q == NULL) {
    abort();
  }
  memcpy(q + mc->in_len, p, n);
  mc->in = q;
  mc->in_len += n;
}

void memx_drain(memx_conn *mc) { mc->out_len = 0; }

/* What |mc| is ready for, as poll would say. */
static unsigned ready(const memx_conn *mc) {
  unsigned ev = mc->write_block ? 0 : CONCH_IO_WRITE; /* else always fit */
  if (mc->in_len > mc->in_off || mc->eof || mc->read_err != 0) {
    ev |= CONCH_IO_READ;
  }
  return ev;
}

void memx_pump(memx *m, int rounds) {
  int r, i;
  for (r = 0; r < rounds; r++) {
    int acted = 0;
    for (i = 0; i < m->nconns; i++) {
      memx_conn *mc = m->conns[i];
      unsigned ev = mc->open ? ready(mc) & mc->watched : 0;
      if (ev != 0) {
        conch_client_on_io(m->client, mc->handle, ev);
        acted = 1;
      }
    }
    if (m->timer_due >= 0 && m->timer_due <= m->now) {
      m->timer_due = -1;
      conch_client_on_timer(m->client);
      acted = 1;
    }
    if (!acted) {
      return;
    }
  }
}

void memx_advance(memx *m, int64_t ms) {
  m->now += ms;
  memx_pump(m, 16);
}
