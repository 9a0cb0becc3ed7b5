/* sbx_daemon.c - the start-up both daemons' mains share. */
#include <sys/stat.h>

#include <signal.h>

#include "sbx_daemon.h"
#include "sbx_log.h"

void
sbx_daemon_begin(const char *name)
{
	signal(SIGPIPE, SIG_IGN);
	umask(077);
	sbx_log_init(name, 2, SBX_LOG_INFO);
}
