/* driver_broker_list.c - a broker list answer decoded entry by entry as it arrives (adr/0030). Calls jansson and sbx_wire only. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "driver_broker_list.h"
#include "sbx_wire.h"

/*
 * A list page decoded as it arrives (adr/0030): each entry object of its
 * entries array is parsed alone (a few dozen bytes) when its last byte
 * comes, so no turn of the loop parses more than one read's worth; what is
 * outside the entries is kept as a small shell ({"entries":[],"truncated":
 * B,"cursor":C} or [] from a broker before adr/0013) parsed at the end. The
 * first array at depth 1 or 2 is the entries (the broker's own order).
 */
#define LSCAN_ENTRY_MAX 4096     /* one entry: a 255-byte name escaped, its base64 */
#define LSCAN_SHELL_MAX 4096

struct lscan {
	struct sbx_dirent *ents;
	size_t n, cap;
	char ent[LSCAN_ENTRY_MAX];
	size_t elen;
	char shell[LSCAN_SHELL_MAX];
	size_t slen, limit;
	int depth, arr_depth, in_arr, edepth, in_str, esc, bad;
};

struct lscan *
lscan_new(size_t limit)
{
	struct lscan *l = calloc(1, sizeof(*l));

	if (l != NULL)
		l->limit = limit;
	return l;
}

void
lscan_free(struct lscan *l)
{
	if (l == NULL)
		return;
	free(l->ents);
	free(l);
}

static void
lscan_entry(struct lscan *l)
{
	struct sbx_dirent *n;
	json_t *o;

	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;

		if (l->n >= l->limit ||
		    (n = realloc(l->ents, (cap + 1) * sizeof(*n))) == NULL) {
			l->bad = 1;
			return;
		}
		l->ents = n;
		l->cap = cap;
	}
	o = json_loadb(l->ent, l->elen, 0, NULL);
	if (!json_is_object(o)) {
		json_decref(o);
		l->bad = 1;
		return;
	}
	sbx_wire_dirent_decode(o, &l->ents[l->n++]);
	json_decref(o);
}

/* 1 when c ends a string being scanned (tracks backslash escapes). */
static int
lscan_str(struct lscan *l, unsigned char c)
{
	if (l->esc)
		l->esc = 0;
	else if (c == '\\')
		l->esc = 1;
	else if (c == '"')
		return 1;
	return 0;
}

void
lscan_feed(struct lscan *l, const unsigned char *p, size_t len)
{
	size_t i;
	unsigned char c;

	for (i = 0; i < len && !l->bad; i++) {
		c = p[i];
		if (l->edepth > 0) {            /* inside an entry */
			if (l->elen >= sizeof(l->ent)) {
				l->bad = 1;
				break;
			}
			l->ent[l->elen++] = (char)c;
			if (l->in_str)
				l->in_str = !lscan_str(l, c);
			else if (c == '"')
				l->in_str = 1;
			else if (c == '{' || c == '[')
				l->edepth++;
			else if ((c == '}' || c == ']') && --l->edepth == 0)
				lscan_entry(l);
			continue;
		}
		if (!l->in_str && l->in_arr && l->depth == l->arr_depth) {
			/* between entries: one starts, commas and blanks go */
			if (c == '{') {
				l->edepth = 1;
				l->elen = 0;
				l->ent[l->elen++] = (char)c;
				continue;
			}
			if (c == ',' || c == ' ' || c == '\t' || c == '\r' ||
			    c == '\n')
				continue;
			if (c != ']') {
				l->bad = 1;     /* an entry that is not an object */
				break;
			}
			l->in_arr = 0;
		}
		if (l->slen >= sizeof(l->shell)) {
			l->bad = 1;
			break;
		}
		l->shell[l->slen++] = (char)c;
		if (l->in_str)
			l->in_str = !lscan_str(l, c);
		else if (c == '"')
			l->in_str = 1;
		else if (c == '{' || c == '[') {
			l->depth++;
			if (c == '[' && l->arr_depth == 0 && l->depth <= 2) {
				l->arr_depth = l->depth;
				l->in_arr = 1;
			}
		} else if (c == '}' || c == ']')
			l->depth--;
	}
}

int
lscan_finish(struct lscan *l, json_t **root, struct sbx_dirent **ents,
    size_t *n)
{
	const json_t *list;

	*root = NULL;
	*ents = NULL;
	*n = 0;
	if (l->bad || l->depth != 0 || l->edepth != 0 || l->in_str ||
	    l->arr_depth == 0 ||
	    (*root = json_loadb(l->shell, l->slen, 0, NULL)) == NULL)
		return -1;
	/* the entries were the array we took them from */
	list = json_is_array(*root) ? *root : json_object_get(*root, "entries");
	if (!json_is_array(list) || json_array_size(list) != 0) {
		json_decref(*root);
		*root = NULL;
		return -1;
	}
	*ents = l->ents;
	*n = l->n;
	l->ents = NULL;
	return 0;
}
