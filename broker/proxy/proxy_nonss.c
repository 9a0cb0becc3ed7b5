/* proxy_nonss.c - the static sbx-proxy's stand-ins for glibc's NSS lookups: names are resolved through evdns only (adr/0026). Calls nothing. */
/*
 * libevent's evutil.o refers to getaddrinfo, getservbyname and
 * getprotobynumber; linked statically, glibc's versions would need NSS
 * modules at run time (and warn at link time). The proxy resolves every
 * name with evdns_getaddrinfo (numeric hosts and the --hosts file included),
 * so these definitions, which always fail, make sure no second resolver path
 * (nsswitch.conf, nscd, /etc/hosts of the image) can answer instead. Only
 * the sbx-proxy binary links this file.
 */
#include <netdb.h>
#include <stddef.h>

int
getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
    struct addrinfo **res)
{
	(void)node;
	(void)service;
	(void)hints;
	*res = NULL;
	return EAI_FAIL;
}

void
freeaddrinfo(struct addrinfo *res)
{
	(void)res;
}

struct servent *
getservbyname(const char *name, const char *proto)
{
	(void)name;
	(void)proto;
	return NULL;
}

struct protoent *
getprotobynumber(int proto)
{
	(void)proto;
	return NULL;
}
