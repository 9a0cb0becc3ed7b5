/* api_connect.c - the Connect protocol with the JSON codec (api_connect.h, adr/0060); may touch a request's reply (api_req.c's areq_* and the core's stream). Stub: every call answers unimplemented until the codec lands. */
#include <string.h>

#include "api_connect.h"
#include "api_int.h"

int
api_connect_serve(struct areq *a, enum api_connect_kind kind, api_connect_fn fn,
    struct sbx_err *err)
{
	(void)a; (void)kind; (void)fn;
	return sbx_err_set(err, SBX_E_INTERNAL, "Connect is not served yet.");
}

void api_connect_reply(struct api_connect_call *c, json_t *msg) { (void)c; json_decref(msg); }
void api_connect_error(struct api_connect_call *c, const char *code, const char *message) { (void)c; (void)code; (void)message; }
int api_connect_send(struct api_connect_call *c, json_t *msg) { (void)c; json_decref(msg); return -1; }
size_t api_connect_queued(const struct api_connect_call *c) { (void)c; return 0; }
void api_connect_on_drain(struct api_connect_call *c, void (*fn)(void *), void *arg) { (void)c; (void)fn; (void)arg; }
void api_connect_end(struct api_connect_call *c, const char *code, const char *message) { (void)c; (void)code; (void)message; }
void api_connect_on_cancel(struct api_connect_call *c, void (*fn)(void *), void *arg) { (void)c; (void)fn; (void)arg; }
const char *api_connect_code_of(const struct sbx_err *err) { (void)err; return "internal"; }
void api_connect_fail(struct api_connect_call *c, const struct sbx_err *err) { (void)c; (void)err; }
int api_connect_http_status(const char *code) { (void)code; return 500; }
