/* test_driver_kube_spec.c - the kubernetes driver's objects (broker/driver_kube_spec.c, adr/0072): the pod's security context, mounts and labels as issue 27 asks, the deny-all NetworkPolicy, and a Pod read back strictly (not a PVC, not unlabelled). */
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
	json_t *pod = kube_spec_pod(&K, "abc", "img:1", 0, 1 << 20, 500);
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
	json_t *pod = kube_spec_pod(&K, "abc", "img:1", 0, 1 << 20, 500);
	json_t *pvc = kube_spec_pvc(&K, "abc");
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pod_is_locked_down),
		cmocka_unit_test(test_netpol_denies_all_without_a_grant),
		cmocka_unit_test(test_only_our_pods_are_read),
	};

	K.helper_image = "helper:1";
	K.work_size = "1Gi";
	return cmocka_run_group_tests(tests, NULL, NULL);
}
