/* sbx_gate_int.h - inside the request gate: the parser's entry points the connection code (sbx_gate.c) uses besides sbx_gate_parse (sbx_gate_parse.c). */
#ifndef SBX_GATE_INT_H
#define SBX_GATE_INT_H

#include <stddef.h>

#include "sbx_gate.h"

/*
 * Fills h from the n bytes of a complete head (p, ending in its empty line,
 * as found by sbx_gate_parse_from): every field checked as sbx_gate_parse
 * documents; h->bad says what was refused.
 */
void sbx_gate_head_parse(const char *p, size_t n,
    const struct sbx_gate_limits *lim, struct sbx_gate_head *h);

/*
 * sbx_gate_parse with a resume offset: the search for the end of the head
 * starts at byte from (bytes before it were searched already; 0 at first).
 * Returns as sbx_gate_parse does.
 */
int sbx_gate_parse_from(const char *p, size_t n, size_t from,
    const struct sbx_gate_limits *lim, struct sbx_gate_head *h);

/* 1 when the n bytes at name are the field name want (ASCII case-insensitive,
 * RFC 9110 §5.1). */
int sbx_gate_hname_is(const char *name, size_t n, const char *want);

/*
 * The next line of a head in [*ls, end): 1 with *line at its start and *len
 * its bytes without the CR LF (or bare LF, RFC 9112 §2.2), *ls moved past
 * it; 0 at the empty line that ends the head or when no LF is left.
 */
int sbx_gate_line(const char **ls, const char *end, const char **line,
    size_t *len);

#endif
