/* test_driver_kube_spec.c - the kubernetes driver's objects (broker/driver_kube_spec.c, adr/0072): the pod's security context, mounts and labels as issue 27 asks, the deny-all NetworkPolicy, a Pod read back strictly (not a PVC, not unlabelled), a lost node read from the pod's conditions, and a warm pool member's objects and claim patch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver_kube_int.h"

static struct kube K;

static json_t *
at(json_t *o, const char *path)
{
	char buf[256], *save = NULL, *p;

	snprintf(buf, sizeof(buf), "%s", path);
	for (p = strtok_r(buf, ".", &save); p != NULL && o != NULL;
	    p = strtok_r(NULL, ".", &save))
		o = json_is_array(o) ? json_array_get(o, (size_t)atoi(p)) :
		    json_object_get(o, p);
	return o;
}

static void
test_pod_is_locked_down(void **state)
{
	json_t *pod = kube_spec_pod(&K, "abc", NULL, "work-abc", "img:1", 0, 1 << 20,
	    500);
	json_t *c;

	(void)state;
	assert_non_null(pod);
	assert_true(json_is_true(at(pod, "spec.securityContext.runAsNonRoot")));
	assert_int_equal(json_integer_value(at(pod, "spec.securityContext.runAsUser")), 1000);
	assert_string_equal(json_string_value(at(pod,
	    "spec.securityContext.seccompProfile.type")), "RuntimeDefault");
	assert_true(json_is_false(at(pod, "spec.automountServiceAccountToken")));
	assert_string_equal(json_string_value(at(pod, "spec.serviceAccountName")), KUBE_SA);
	assert_string_equal(json_string_value(json_object_get(at(pod, "metadata.labels"), KUBE_L_ID)), "abc");
	c = at(pod, "spec.containers.0");
	assert_true(json_is_false(at(c, "securityContext.allowPrivilegeEscalation")));
	assert_true(json_is_true(at(c, "securityContext.readOnlyRootFilesystem")));
	assert_string_equal(json_string_value(at(c,
	    "securityContext.capabilities.drop.0")), "ALL");
	assert_string_equal(json_string_value(at(c, "resources.limits.cpu")), "500m");
	assert_string_equal(json_string_value(at(c, "resources.limits.memory")), "1048576");
	assert_string_equal(json_string_value(at(pod,
	    "spec.volumes.0.persistentVolumeClaim.claimName")), "work-abc");
	assert_true(json_is_true(at(c, "volumeMounts.0.readOnly")));   /* /.sbx */
	json_decref(pod);
}

static void
test_netpol_denies_all_without_a_grant(void **state)
{
	json_t *np = kube_spec_netpol(&K, "abc", 1);   /* no egress_cidrs */

	(void)state;
	assert_int_equal(json_array_size(at(np, "spec.policyTypes")), 2);
	assert_int_equal(json_array_size(at(np, "spec.ingress")), 0);
	assert_int_equal(json_array_size(at(np, "spec.egress")), 0);
	json_decref(np);
	K.egress_cidrs = "10.0.0.0/8,192.168.0.0/16";
	np = kube_spec_netpol(&K, "abc", 1);
	assert_string_equal(json_string_value(at(np,
	    "spec.egress.0.to.1.ipBlock.cidr")), "192.168.0.0/16");
	json_decref(np);
	K.egress_cidrs = NULL;
}

static void
test_only_our_pods_are_read(void **state)
{
	json_t *pod = kube_spec_pod(&K, "abc", NULL, "work-abc", "img:1", 0, 1 << 20,
	    500);
	json_t *pvc = kube_spec_pvc(&K, "abc", NULL);
	json_t *bare = json_pack("{s:s,s:{s:s}}", "kind", "Pod", "metadata",
	    "name", "sbx-abc");
	struct kube_pod p;

	(void)state;
	json_object_set_new(pod, "status", json_pack("{s:s,s:[{s:{s:{s:s}}}]}",
	    "phase", "Pending", "containerStatuses", "state", "waiting", "reason",
	    "ErrImagePull"));
	assert_int_equal(kube_pod_read(pod, &p), 0);
	assert_string_equal(p.id, "abc");
	assert_string_equal(p.image, "img:1");
	assert_string_equal(p.stuck, "ErrImagePull");
	assert_int_equal(kube_pod_read(pvc, &p), -1);
	assert_int_equal(kube_pod_read(bare, &p), -1);
	json_decref(pod);
	json_decref(pvc);
	json_decref(bare);
}

/* Pod status with phase and the two conditions (NULL: left out). */
static json_t *
with_status(json_t *pod, const char *phase, const char *ready,
    const char *cready)
{
	json_t *conds = json_array();

	if (ready != NULL)
		json_array_append_new(conds, json_pack("{s:s,s:s}", "type", "Ready",
		    "status", ready));
	if (cready != NULL)
		json_array_append_new(conds, json_pack("{s:s,s:s}", "type",
		    "ContainersReady", "status", cready));
	json_object_set_new(pod, "status", json_pack("{s:s,s:o}", "phase", phase,
	    "conditions", conds));
	return pod;
}

/* A lost node shows as Ready False with ContainersReady True (1.24's
 * MarkPodsNotReady); a kubelet never writes that pair. */
static void
test_lost_node_from_the_pod_alone(void **state)
{
	static const struct {
		const char *phase, *ready, *cready;
		int lost;
		enum sbx_state st;
		const char *reason;
	} cases[] = {
		{ "Running", "True", "True", 0, SBX_STATE_RUNNING, "" },
		{ "Running", "False", "True", 1, SBX_STATE_STOPPED, "lost" },
		{ "Running", "Unknown", "True", 1, SBX_STATE_STOPPED, "lost" },
		{ "Running", "False", "False", 0, SBX_STATE_STOPPED, "exited" },
		{ "Pending", "False", "True", 0, SBX_STATE_STOPPED, "starting" },
		{ "Running", NULL, NULL, 0, SBX_STATE_RUNNING, "" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *pod = with_status(kube_spec_pod(&K, "abc", NULL, "work-abc",
		    "img:1", 0, 1 << 20, 500), cases[i].phase, cases[i].ready,
		    cases[i].cready);
		struct kube_pod p;
		struct sbx_status st;

		assert_int_equal(kube_pod_read(pod, &p), 0);
		assert_int_equal(p.lost, cases[i].lost);
		memset(&st, 0, sizeof(st));
		kube_pod_status(&p, &st);
		if (cases[i].lost || strcmp(cases[i].phase, "Running") != 0 ||
		    cases[i].st == SBX_STATE_RUNNING) {
			assert_int_equal(st.state, cases[i].st);
			assert_string_equal(st.stop_reason, cases[i].reason);
		}
		json_decref(pod);
	}
}

/* A warm pool member: its own names, no sbx.dev/id, read only as a
 * member; the claim patch tests the pool label before it moves it. */
static void
test_pool_member_and_claim(void **state)
{
	json_t *pod = kube_spec_pod(&K, NULL, "0123abcd", "work-pool.0123abcd",
	    "img:1", 0, 1 << 20, 500);
	json_t *pvc = kube_spec_pvc(&K, NULL, "0123abcd");
	json_t *np = kube_spec_pool_netpol();
	json_t *claim = kube_spec_claim("abc");
	json_t *list;
	struct kube_pod p;

	(void)state;
	assert_string_equal(json_string_value(at(pod, "metadata.name")),
	    "sbx-pool.0123abcd");
	assert_string_equal(json_string_value(at(pvc, "metadata.name")),
	    "work-pool.0123abcd");
	assert_null(json_object_get(at(pod, "metadata.labels"), KUBE_L_ID));
	assert_null(json_object_get(at(pvc, "metadata.labels"), KUBE_L_ID));
	assert_string_equal(json_string_value(json_object_get(at(pod,
	    "metadata.labels"), KUBE_L_POOL)), "true");
	assert_string_equal(json_string_value(json_object_get(at(np,
	    "spec.podSelector.matchLabels"), KUBE_L_POOL)), "true");
	assert_int_equal(json_array_size(at(np, "spec.egress")), 0);
	assert_int_equal(kube_pod_read(pod, &p), -1);
	assert_int_equal(kube_member_read(pod, &p), 0);
	assert_string_equal(p.name, "sbx-pool.0123abcd");
	assert_string_equal(p.pvc, "work-pool.0123abcd");
	assert_string_equal(json_string_value(at(claim, "0.op")), "test");
	assert_string_equal(json_string_value(at(claim, "0.path")),
	    "/metadata/labels/sbx.dev~1pool");
	assert_string_equal(json_string_value(at(claim, "1.op")), "remove");
	assert_string_equal(json_string_value(at(claim, "2.path")),
	    "/metadata/labels/sbx.dev~1id");
	assert_string_equal(json_string_value(at(claim, "2.value")), "abc");
	/* a list answer: the item not being deleted wins */
	list = json_pack("{s:[{s:{s:s,s:s}},{s:{s:s}}]}", "items", "metadata",
	    "name", "old", "deletionTimestamp", "2026-12-02T10:00:00Z",
	    "metadata", "name", "new");
	assert_string_equal(json_string_value(at(kube_list_pick(list),
	    "metadata.name")), "new");
	json_decref(list);
	list = json_pack("{s:[]}", "items");
	assert_null(kube_list_pick(list));
	json_decref(list);
	json_decref(pod);
	json_decref(pvc);
	json_decref(np);
	json_decref(claim);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pod_is_locked_down),
		cmocka_unit_test(test_netpol_denies_all_without_a_grant),
		cmocka_unit_test(test_only_our_pods_are_read),
		cmocka_unit_test(test_lost_node_from_the_pod_alone),
		cmocka_unit_test(test_pool_member_and_claim),
	};

	K.helper_image = "helper:1";
	K.work_size = "1Gi";
	return cmocka_run_group_tests(tests, NULL, NULL);
}
