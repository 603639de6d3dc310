/* Internals of process handles, shared by process.c (starting, events,
   the blocking and asynchronous API) and process_close.c (the handle's
   release and the close that always ends the remote process). */
#ifndef CONCH_API_PROCESS_INT_H
#define CONCH_API_PROCESS_INT_H

#include "api_int.h"
#include "output.h"

struct conch_process {
  conch_sandbox *sb;
  const conch_mem *mem;
  conch_plink link;
  conch_call *call; /* Start or Connect, until released */
  conch_process_handler h;
  void *ud;
  unsigned is_connect : 1;
  unsigned async : 1;
  unsigned collect : 1;
  unsigned own : 1;
  unsigned pty : 1;
  unsigned started : 1;
  unsigned start_told : 1;
  unsigned ended : 1;
  unsigned done : 1;     /* the stream is over; |st| is final */
  unsigned end_told : 1; /* on_end ran */
  unsigned closing : 1;
  unsigned detaching : 1; /* our own handlers ignore the call now */
  unsigned release_pending : 1;
  unsigned escalated : 1;
  /* Closing: the server answered something of the close (the SIGTERM, or
     the watch's headers, messages or end); the SIGTERM is under way; the
     watch timed out on the client's clock and waits for the SIGTERM's
     answer to say whether the server is there to take a SIGKILL. */
  unsigned heard : 1;
  unsigned term_pending : 1;
  unsigned await_term : 1;
  unsigned tree : 1; /* started under the tree leader (tree.c) */
  /* The runtime may still call our handlers for |call| (async handles, until
     its on_close ran): the memory of |p| waits for that. */
  unsigned call_open : 1;
  unsigned free_when_closed : 1;
  unsigned in_handler;
  uint32_t pid;
  char *tag;
  int64_t start_by; /* monotonic ms; 0 = no limit */
  conch_alarm *start_alarm;
  /* Liveness: when the stream last received something, and the alarm that
     checks it (asynchronous handles). */
  int64_t last_rx;
  int64_t live_due;
  conch_alarm *live_alarm;
  conch_exec_result res;
  conch__output output; /* collected (run), bounded per stream */
  conch_status st;
  ProtobufCMessage *cur; /* pull: the message behind the last chunk */
  void (*on_out)(const uint8_t *, size_t, void *);
  void (*on_err)(const uint8_t *, size_t, void *);
  void *out_ud;
  /* Closing. */
  int pending;
  int close_rv;
  struct close_note *note; /* delivers conch_process_close_async's done */
};
/* Records the end event |e| in |p|'s result (once). */
void conch__proc_record_end(conch_process *p,
                            const Process__ProcessEvent__EndEvent *e);

/* Frees |p|, or marks it to be freed by the on_close the runtime still
   owes its call. */
void conch__proc_free(conch_process *p);

/* Leaves one of |p|'s handlers: a release asked for inside it happens
   now. */
void conch__proc_leave_handler(conch_process *p);

/* Closes a started process: SIGTERM, a watch for its end, SIGKILL after
   the grace period. */
void conch__proc_kill_started(conch_process *p);

/* Closes a handle whose stream is over without a reported start. */
void conch__proc_close_unstarted(conch_process *p);

#endif
