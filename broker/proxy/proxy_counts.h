/* proxy_counts.h - the egress proxy's allowed/denied totals kept in a file of the socket volume, so they survive its restarts and replacements (adr/0027). */
#ifndef SBX_PROXY_COUNTS_H
#define SBX_PROXY_COUNTS_H

/* The file holds PROXY_COUNTS_LEN bytes at offset 0: "%020lu %020lu\n". */
#define PROXY_COUNTS_LEN 42

/*
 * Opens (creating, mode 0644, never following a symlink) the counts file at
 * path and sets *allowed and *denied to the totals it holds; a file that is
 * empty or not two 20-digit decimal numbers leaves them 0. Returns the open
 * descriptor (the caller's), or -1 with errno when it cannot be opened.
 */
int proxy_counts_open(const char *path, unsigned long *allowed,
    unsigned long *denied);

/* Same for a descriptor open read-write that the proxy was handed
 * (--counts-fd: the vm driver's, whose file sits in a directory the
 * proxy's user cannot enter). Returns fd. */
int proxy_counts_read(int fd, unsigned long *allowed, unsigned long *denied);

/* Rewrites the record at offset 0 of fd (no fsync). fd < 0: nothing, 0.
 * Returns 0, or -1 with errno (a short or failed write). */
int proxy_counts_save(int fd, unsigned long allowed, unsigned long denied);

#endif
