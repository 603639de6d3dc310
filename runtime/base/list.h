/* Intrusive doubly-linked lists: a conch_link in each element, a conch_link
   as the head.  Header only; private to the runtime. */
#ifndef CONCH_LIST_H
#define CONCH_LIST_H

#include <stddef.h>

typedef struct conch_link {
  struct conch_link *prev;
  struct conch_link *next;
} conch_link;

static inline void conch__list_init(conch_link *head) {
  head->prev = head->next = head;
}
static inline int conch__list_empty(const conch_link *head) {
  return head->next == head;
}
static inline int conch__linked(const conch_link *l) { return l->next != NULL; }
static inline void conch__list_push(conch_link *head, conch_link *l) {
  l->prev = head->prev;
  l->next = head;
  head->prev->next = l;
  head->prev = l;
}
static inline void conch__list_remove(conch_link *l) {
  if (l->next == NULL) {
    return;
  }
  l->prev->next = l->next;
  l->next->prev = l->prev;
  l->prev = l->next = NULL;
}
#define CONCH_CONTAINER(ptr, type, member)                                     \
  ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#endif
