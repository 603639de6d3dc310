/* conformance-server: shared declarations (main.c, service.c). */
#ifndef CONCH_CONFORMANCE_SERVER_CS_H
#define CONCH_CONFORMANCE_SERVER_CS_H

#include <conch/conch.h>
#include <conch/server.h>

#include "conformance/v1/server_compat.pb-c.h"
#include "conformance/v1/service.conch.h"
#include "conformance/v1/service.pb-c.h"
#include "google/protobuf/any.pb-c.h"

typedef Connectrpc__Conformance__V1__ServerCompatRequest CompatRequest;

/* Registers the six methods of ConformanceService on |s|.  Returns 0 or a
   CONCH_ERR_*. */
int cs_register(conch_server *s);
/* Milliseconds until the next response delay ends, 0 when one is due, -1
   when none runs. */
long cs_next_delay_ms(void);
/* Goes on with every call whose delay has ended. */
void cs_run_due(void);

#endif
