/* api_envd_stub.c - envd's entry until api/api_envd.c (the Connect method table, adr/0060) is built in: every envd request on port 49983 answers 501 in Connect's shape. A weak definition in a member of its own, so the archive's index finds api_envd.o's strong api_h_envd first once it exists (a weak one in a member the linker pulls anyway would hide it); delete this file when api_envd.c lands. */
#include "api_e2b.h"
#include "api_int.h"
#include "sbx_proto.h"

__attribute__((weak)) int
api_h_envd(struct areq *a, struct sbx_err *err)
{
	(void)a;
	return sbx_err_set(err, SBX_E_NOT_IMPLEMENTED, "envd's methods are not "
	    "built into this api.");
}
