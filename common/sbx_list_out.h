/* sbx_list_out.h - a list page's JSON reply encoded in slices over turns of the event loop, shared by the broker and the api (adr/0030). */
#ifndef SBX_LIST_OUT_H
#define SBX_LIST_OUT_H

#include <stddef.h>

#include "sbx_err.h"
#include "sbx_types.h"

struct evbuffer;
struct event_base;

/*
 * Entries encoded per turn of the event loop: a 10,000-entry page encoded
 * in one go held the loop ~90 ms on a loaded 2-core machine, and every
 * other stream waited (adr/0030; docs/security.md).
 */
#define SBX_LIST_SLICE 500

struct sbx_list_out;

/*
 * The end of a list reply, called exactly once, on the event loop (or from
 * inside sbx_list_out_start). Either err is set (SBX_E_INTERNAL, "Out of
 * memory.") and text is NULL, or err is NULL and text holds the whole JSON
 * body: the page object {"entries":[...],"truncated":B,"cursor":S|null}
 * when obj was set, else the bare v1 array [...] (its caller adds the
 * Sbx-List-Truncated/-Cursor headers). text is borrowed: it belongs to the
 * list_out and lives until sbx_list_out_free. truncated is the value given
 * to sbx_list_out_start; cursor is sbx_wire_cursor_encode of the last
 * entry's name when truncated and n > 0, else "" (borrowed, valid during
 * the call). The callee may free the list_out (with its request) before
 * returning; nothing touches it after done.
 */
typedef void (*sbx_list_out_done)(void *arg, const struct sbx_err *err,
    struct evbuffer *text, int truncated, const char *cursor);

/*
 * Starts the reply of one list page (proto/broker-api.md "list", adr/0013):
 * ents[0..n) are copied (the driver's are borrowed); each turn of base's
 * loop encodes SBX_LIST_SLICE of them (sbx_wire_dirents_text), the first
 * before this returns. *out is set before the first slice runs, so a done
 * that frees the caller's request can free the list_out with it; free it
 * with sbx_list_out_free after done, or before to cancel (done is then not
 * called). The bytes are those sbx_wire_list_encode (obj) or
 * sbx_wire_dirents_encode (not obj) would give.
 * Returns 0 (done will be or has been called), or -1 with err
 * (SBX_E_INTERNAL) when out of memory before anything started: *out is
 * NULL and done is never called.
 */
int sbx_list_out_start(struct sbx_list_out **out, struct event_base *base,
    const struct sbx_dirent *ents, size_t n, int truncated, int obj,
    sbx_list_out_done done, void *arg, struct sbx_err *err);

/* Frees lo and its text, cancels a pending slice. NULL is fine. */
void sbx_list_out_free(struct sbx_list_out *lo);

#endif
