/* The checks and stores of the option setters both roles have (optset.h). */
#include <stddef.h>
#include <stdint.h>

#include <conch/status.h>

#include "optset.h"

int conch__optset_size(size_t *field, size_t v, size_t min) {
  if (field == NULL || v < min) {
    return CONCH_ERR_INVALID;
  }
  *field = v;
  return 0;
}

int conch__optset_u32(uint32_t *field, uint32_t v, uint32_t min, uint32_t max) {
  if (field == NULL || v < min || v > max) {
    return CONCH_ERR_INVALID;
  }
  *field = v;
  return 0;
}

int conch__optset_int(int *field, int v, int min, int max) {
  if (field == NULL || v < min || v > max) {
    return CONCH_ERR_INVALID;
  }
  *field = v;
  return 0;
}

int conch__optset_ms(long *field, long ms, long min) {
  if (field == NULL || ms < min) {
    return CONCH_ERR_INVALID;
  }
  *field = ms;
  return 0;
}

int conch__optset_mem(conch_mem *field, const conch_mem *mem) {
  if (field == NULL ||
      (mem != NULL && (mem->malloc == NULL || mem->free == NULL ||
                       mem->calloc == NULL || mem->realloc == NULL))) {
    return CONCH_ERR_INVALID;
  }
  *field = mem != NULL ? *mem : *conch_mem_default();
  return 0;
}

int conch__optset_clock(int64_t (**field)(void *user_data), void **ud,
                        int64_t (*now_ms)(void *user_data), void *user_data) {
  if (field == NULL || ud == NULL) {
    return CONCH_ERR_INVALID;
  }
  *field = now_ms;
  *ud = now_ms != NULL ? user_data : NULL;
  return 0;
}

int conch__optset_resolver(conch_json_resolver *field, void **ud,
                           conch_json_resolver fn, void *user_data) {
  if (field == NULL || ud == NULL) {
    return CONCH_ERR_INVALID;
  }
  *field = fn;
  *ud = fn != NULL ? user_data : NULL;
  return 0;
}
