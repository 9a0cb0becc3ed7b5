/* sbx_cred.c - systemd service credentials: files in $CREDENTIALS_DIRECTORY (systemd.exec(5)). */
#include <sys/stat.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_cred.h"

static int
valid_name(const char *name)
{
	size_t i, n;

	if (name == NULL || (n = strlen(name)) == 0 || n > 64 ||
	    strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return 0;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-'))
			return 0;
	}
	return 1;
}

int
sbx_credential_path(const char *name, char *buf, size_t cap)
{
	const char *dir = getenv("CREDENTIALS_DIRECTORY");
	struct stat st;
	int n;

	if (buf == NULL || cap == 0)
		return 0;
	buf[0] = '\0';
	if (dir == NULL || dir[0] != '/' || !valid_name(name))
		return 0;
	n = snprintf(buf, cap, "%s/%s", dir, name);
	if (n < 0 || (size_t)n >= cap || stat(buf, &st) == -1) {
		buf[0] = '\0';
		return 0;
	}
	return 1;
}

int
sbx_credential_default(char **field, const char *name)
{
	char cred[4096], *dup;

	if (*field != NULL && (*field)[0] != '\0')
		return 0;
	if (!sbx_credential_path(name, cred, sizeof(cred)))
		return 0;
	if ((dup = strdup(cred)) == NULL)
		return -1;
	free(*field);
	*field = dup;
	return 0;
}
