/* sbx_time.c - the clocks both daemons read, in milliseconds. */
#include <time.h>

#include "sbx_time.h"

static int64_t
clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t
sbx_mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t
sbx_wall_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}
