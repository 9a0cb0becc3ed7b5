/* api_term_ring.c - a terminal's scrollback: the ring of blocks in memory (terminal_scrollback bytes), the safe cut of a replay start over it, and the on-disk log of two segments it is read back from (adr/0051). Below api_term.c; touches only the record's ring and log fields and its directory. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api_term_int.h"
#include "sbx_log.h"

static void
seg_path(char *buf, size_t cap, const struct api_term *t, uint64_t first)
{
	snprintf(buf, cap, "%s/%s/%020" PRIu64 ".log", t->s->terms_dir, t->id,
	    first);
}

static size_t
ring_max_blocks(const struct api_term *t)
{
	size_t n = (size_t)t->s->cfg->terminal_scrollback / sizeof(struct tblock);

	return n > 1 ? n : 2;
}

/* ------------------------------------------------------------------ */
/* The scrollback ring                                                 */

void
ring_free(struct api_term *t)
{
	struct tblock *b;

	while ((b = t->head) != NULL) {
		t->head = b->next;
		free(b);
	}
	t->tail = NULL;
	t->nblocks = 0;
	t->seen[0] = t->seen[1] = 0;
	memset(t->cut_head, 0, sizeof(t->cut_head));
	t->ring_in = 0;
}

/* Offset of the oldest byte in memory (t->total when none). */
uint64_t
ring_start(const struct api_term *t)
{
	return t->head != NULL ? t->head->off : t->total;
}

/* Drops the oldest block; its bytes advance its stream's head state. */
static void
ring_drop(struct api_term *t)
{
	struct tblock *b = t->head;

	term_cut_feed(&t->cut_head[b->stream - 1], b->data, b->len);
	t->head = b->next;
	if (t->head == NULL)
		t->tail = NULL;
	t->nblocks--;
	free(b);
}

/*
 * Appends n bytes of stream at offset off (= the ring's end) whose stream
 * state before them was before. Returns 0, or -1 out of memory (the bytes
 * are then lost from the ring: the next attach starts after them).
 */
int
ring_append(struct api_term *t, int stream, uint64_t off,
    const unsigned char *p, size_t n, const struct term_cut *before)
{
	struct tblock *b;
	size_t k;

	if (!t->seen[stream - 1]) {
		t->cut_head[stream - 1] = *before;
		t->seen[stream - 1] = 1;
	}
	while (n > 0) {
		b = t->tail;
		if (b == NULL || b->stream != stream || b->len == TERM_BLOCK ||
		    b->off + b->len != off) {
			while (t->nblocks >= ring_max_blocks(t))
				ring_drop(t);
			if ((b = malloc(sizeof(*b))) == NULL)
				return -1;
			b->off = off;
			b->len = 0;
			b->stream = (uint8_t)stream;
			b->next = NULL;
			if (t->tail != NULL)
				t->tail->next = b;
			else
				t->head = b;
			t->tail = b;
			t->nblocks++;
		}
		k = TERM_BLOCK - b->len;
		if (k > n)
			k = n;
		memcpy(b->data + b->len, p, k);
		b->len += (uint32_t)k;
		p += k;
		n -= k;
		off += k;
	}
	return 0;
}

/*
 * The first safe cut at or after want (>= ring_start): every stream's
 * state there is safe (api_term_cut.h). t->total when none is found in
 * what is kept.
 */
uint64_t
ring_cut(const struct api_term *t, uint64_t want)
{
	struct term_cut st[2];
	const struct tblock *b;
	size_t from, k;
	int s, o;

	st[0] = t->cut_head[0];
	st[1] = t->cut_head[1];
	for (b = t->head; b != NULL; b = b->next) {
		s = b->stream - 1;
		o = 1 - s;
		if (b->off + b->len <= want) {
			term_cut_feed(&st[s], b->data, b->len);
			continue;
		}
		from = want > b->off ? (size_t)(want - b->off) : 0;
		term_cut_feed(&st[s], b->data, from);
		k = term_cut_find(&st[s], b->data + from, b->len - from);
		if (from + k < b->len && term_cut_safe(&st[o]))
			return b->off + from + k;
		term_cut_feed(&st[s], b->data + from + k, b->len - from - k);
		if (b->next == NULL && term_cut_safe(&st[s]) &&
		    term_cut_safe(&st[o]))
			return b->off + b->len;
		want = b->off + b->len;
	}
	return t->total;
}

/* ------------------------------------------------------------------ */
/* The on-disk log                                                     */

static void
put_be(unsigned char *p, uint64_t v, int n)
{
	int i;

	for (i = n - 1; i >= 0; i--, v >>= 8)
		p[i] = (unsigned char)(v & 0xFF);
}

static uint64_t
get_be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/* Writes all of p (n bytes) to fd. 0 or -1. */
static int
write_all(int fd, const unsigned char *p, size_t n)
{
	ssize_t w;

	while (n > 0) {
		w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Opens a new segment at t->total; the one before the current goes. */
static int
log_rotate(struct api_term *t)
{
	char path[1024];

	if (t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
		if (t->seg_prev != UINT64_MAX) {
			seg_path(path, sizeof(path), t, t->seg_prev);
			unlink(path);
		}
		t->seg_prev = t->seg_cur;
	}
	t->seg_cur = t->total;
	t->seg_bytes = 0;
	seg_path(path, sizeof(path), t, t->seg_cur);
	t->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC,
	    0600);
	return t->fd < 0 ? -1 : 0;
}

/* Logs one record (stream, the bytes at t->total). A failure is logged
 * once per segment; the ring still gets the bytes. */
void
log_append(struct api_term *t, int stream, const unsigned char *p, size_t n,
    const struct term_cut *before)
{
	unsigned char h[TERM_REC_HEAD];

	if ((t->fd < 0 || t->seg_bytes >=
	    (uint64_t)t->s->cfg->terminal_scrollback) && log_rotate(t) == -1) {
		log_error("cannot write a terminal log", "terminal_id", t->id,
		    "error", strerror(errno), NULL);
		return;
	}
	h[0] = (unsigned char)stream;
	h[1] = 0;
	put_be(h + 2, term_cut_pack(before), 2);
	put_be(h + 4, n, 4);
	put_be(h + 8, t->total, 8);
	if (write_all(t->fd, h, sizeof(h)) == -1 || write_all(t->fd, p, n) == -1) {
		log_error("cannot write a terminal log", "terminal_id", t->id,
		    "error", strerror(errno), NULL);
		/* Whole records only: the segment ends here. */
		if (ftruncate(t->fd, (off_t)t->seg_bytes) == -1)
			log_warn("cannot cut a torn terminal record", NULL);
		return;
	}
	t->seg_bytes += sizeof(h) + n;
}

/* Reads one segment's records into the ring; a torn last record is
 * ignored. Sets t->total to the end of the last whole record. */
static void
seg_load(struct api_term *t, uint64_t first)
{
	char path[1024];
	unsigned char h[TERM_REC_HEAD], *buf = NULL;
	struct term_cut before;
	uint64_t off;
	size_t n;
	int fd, stream;

	seg_path(path, sizeof(path), t, first);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return;
	while (read(fd, h, sizeof(h)) == (ssize_t)sizeof(h)) {
		stream = h[0];
		n = (size_t)get_be(h + 4, 4);
		off = get_be(h + 8, 8);
		if ((stream != 1 && stream != 2) || n == 0 || n > (64u << 20) ||
		    (t->tail != NULL && off != t->total) ||
		    term_cut_unpack(&before, (uint16_t)get_be(h + 2, 2)) == -1)
			break;
		if ((buf = malloc(n)) == NULL)
			break;
		if (read(fd, buf, n) != (ssize_t)n) {
			free(buf);
			break;
		}
		if (t->tail == NULL)
			t->total = off;
		ring_append(t, stream, off, buf, n, &before);
		t->total = off + n;
		term_cut_feed(&t->cut_live[stream - 1], buf, n);
		free(buf);
	}
	close(fd);
}

/* Reads the scrollback of an ended terminal back from disk. */
void
ring_load(struct api_term *t)
{
	if (t->ring_in)
		return;
	ring_free(t);
	if (t->seg_prev != UINT64_MAX)
		seg_load(t, t->seg_prev);
	if (t->seg_cur != UINT64_MAX)
		seg_load(t, t->seg_cur);
	t->ring_in = 1;
}

