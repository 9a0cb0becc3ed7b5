/* driver_broker_list.h - a broker list answer decoded entry by entry as it arrives, so no turn of the api's loop parses a whole page (adr/0030). */
#ifndef DRIVER_BROKER_LIST_H
#define DRIVER_BROKER_LIST_H

#include <stddef.h>

#include <jansson.h>

#include "sbx_types.h"

struct lscan;

/* A scanner for one answer of at most limit entries (more: malformed);
 * NULL when out of memory. */
struct lscan *lscan_new(size_t limit);

/* Feeds len bytes of the answer body (untrusted): each entry object of
 * the entries array is parsed alone (sbx_wire_dirent_decode) when its last
 * byte comes; an entry over 4 KiB, a shell (what is outside the entries)
 * over 4 KiB, or too many entries mark the answer bad. */
void lscan_feed(struct lscan *l, const unsigned char *p, size_t len);

/* Every byte came: 0 with *root the shell parsed ({"entries":[],
 * "truncated":B,"cursor":C}, or [] from a broker before adr/0013; caller
 * decrefs), *ents (malloc'ed, caller frees; may be NULL when n is 0) and
 * *n; -1 for an answer that is not a whole page. */
int lscan_finish(struct lscan *l, json_t **root, struct sbx_dirent **ents,
    size_t *n);

/* Frees l (and entries not taken); NULL ok. */
void lscan_free(struct lscan *l);

#endif
