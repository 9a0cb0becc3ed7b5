/* sbx_egress.c - checks of an egress allowlist, shared by sandbox-api and sandbox-broker (adr/0026). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy_policy.h"
#include "sbx_egress.h"
#include "sbx_proto.h"

int
egress_allow_check(json_t *allow, const char *field, struct sbx_err *err)
{
	static struct proxy_policy p;   /* large: not on the stack */
	char why[PROXY_WHY_MAX];
	size_t i, n;

	if (!json_is_array(allow))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "%s must be an array of "
		    "host names.", field);
	n = json_array_size(allow);
	if (n == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s is empty: name at "
		    "least one host, or \"*\" for full egress.", field);
	if (n > EGRESS_ALLOW_MAX)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s has %zu entries; at "
		    "most %d are accepted.", field, n, EGRESS_ALLOW_MAX);
	memset(&p, 0, sizeof(p));
	for (i = 0; i < n; i++) {
		json_t *v = json_array_get(allow, i);
		const char *s = json_string_value(v);
		int rc;

		if (s == NULL)
			return sbx_err_set(err, SBX_E_WRONG_TYPE, "%s[%zu] must be a "
			    "string.", field, i);
		if (strlen(s) != json_string_length(v))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s[%zu] holds a "
			    "NUL byte.", field, i);
		if (strcmp(s, "*") == 0 && n > 1)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s[%zu]: \"*\" "
			    "(full egress) stands alone.", field, i);
		if (strchr(s, '/') != NULL)
			rc = proxy_policy_add_cidr(&p, s, why, sizeof(why));
		else
			rc = proxy_policy_add_allow(&p, s, why, sizeof(why));
		if (rc != 0)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s[%zu]: %s.", field, i, why);
	}
	return 0;
}

int
egress_allow_full(json_t *allow)
{
	return allow == NULL || (json_array_size(allow) == 1 &&
	    json_string_value(json_array_get(allow, 0)) != NULL &&
	    strcmp(json_string_value(json_array_get(allow, 0)), "*") == 0);
}


char *
egress_allow_join(json_t *allow)
{
	size_t i, n = 1;
	char *out;

	for (i = 0; i < json_array_size(allow); i++)
		n += json_string_length(json_array_get(allow, i)) + 1;
	if ((out = calloc(1, n)) == NULL)
		return NULL;
	for (i = 0; i < json_array_size(allow); i++) {
		if (i > 0)
			strcat(out, "\n");
		strcat(out, json_string_value(json_array_get(allow, i)));
	}
	return out;
}

json_t *
egress_allow_split(const char *s)
{
	json_t *a;
	const char *nl;

	if (s == NULL || *s == '\0' || (a = json_array()) == NULL)
		return NULL;
	while (*s != '\0') {
		nl = strchr(s, '\n');
		if (json_array_append_new(a, json_stringn(s, nl != NULL ? (size_t)(nl - s) :
		    strlen(s))) != 0) {
			json_decref(a);
			return NULL;
		}
		s = nl != NULL ? nl + 1 : s + strlen(s);
	}
	return a;
}
