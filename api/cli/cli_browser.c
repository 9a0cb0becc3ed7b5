/* cli_browser.c - sbxctl browser NPC start|stop|status: the sandbox's headless Chromium through POST/DELETE/GET .../sandbox/browser (docs/api.md "Browser", adr/0064); prints its state and, running, the CDP endpoint a Playwright or Puppeteer client connects to. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "cli_int.h"

int
c_browser(struct ctx *x)
{
	const char *act = x->o.pos[1], *method;
	json_t *j = NULL, *ep;
	int rc;

	if (strcmp(act, "start") == 0)
		method = "POST";
	else if (strcmp(act, "stop") == 0)
		method = "DELETE";
	else if (strcmp(act, "status") == 0)
		method = "GET";
	else
		return usage_err(x->cmd, "the action must be start, stop or "
		    "status, not \"%s\"", act);
	if ((rc = npc_view(x, method, x->o.pos[0], "/sandbox/browser", &j)) !=
	    CX_OK || j == NULL)
		return rc;
	printf("browser: %s", jstr(j, "state"));
	if (strcmp(jraw(j, "state"), "crashed") == 0)
		printf(" (exit status %" JSON_INTEGER_FORMAT ")",
		    json_integer_value(json_object_get(j, "exit_code")));
	printf("\n");
	if ((ep = json_object_get(j, "endpoint")) != NULL) {
		/* The ticket in ws_url is a credential for ticket_ttl: it is
		 * what the user asked for, printed to the terminal only. */
		printf("cdp:     %s\n", jstr(ep, "ws_url"));
		printf("         (chromium.connectOverCDP(URL) in Playwright; the "
		    "ticket in it is valid until %s)\n",
		    ms_time(json_object_get(ep, "ticket_expires_at"),
		    (char[32]){ 0 }, 32));
	}
	json_decref(j);
	return CX_OK;
}
