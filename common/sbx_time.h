/* sbx_time.h - the clocks both daemons read, in milliseconds. */
#ifndef SBX_TIME_H
#define SBX_TIME_H

#include <stdint.h>

/* Milliseconds on CLOCK_MONOTONIC (durations, deadlines; never stored). */
int64_t sbx_mono_ms(void);

/* Milliseconds since the Unix epoch on CLOCK_REALTIME (stored times:
 * audit rows, last_used_at, created_at; SPEC §4). */
int64_t sbx_wall_ms(void);

#endif
