"""The runtime fixture itself: the runtime under test answers, is the engine it
claims to be, and runs the test image as the sandbox user."""

import unittest

import sbxtest


class FixtureTest(sbxtest.EngineTestCase):

    def test_runtime_answers_version_as_the_expected_engine(self):
        v = self.engine.version()
        names = [c.get("Name", "") for c in v.get("Components") or []]
        if sbxtest.runtime() == "docker":
            self.assertIn("Engine", names)
            self.assertNotIn("Podman Engine", names)
        else:
            self.assertIn("Podman Engine", names)
        # Engine API v1.41 is the contract (SPEC §3); both serve at least that.
        major, minor = (int(x) for x in v["ApiVersion"].split(".")[:2])
        self.assertGreaterEqual((major, minor), (1, 41))

    def test_test_image_runs_exec_as_sandbox_user(self):
        label = "io.sbx.test-fixture"
        cid = self.run_container(labels={label: "1"})
        listed = [c["Id"] for c in self.engine.containers(label=label)]
        self.assertIn(cid, listed)
        code, out, err = self.engine.exec(cid, ["id", "-u"], user="1000")
        self.assertEqual((code, out, err), (0, b"1000\n", b""))
        code, out, _ = self.engine.exec(cid, ["sh", "-c", "echo $HOME; stat -c %u:%g /work; echo x >&2; exit 3"],
                                        user="1000:1000")
        self.assertEqual(code, 3)
        self.assertEqual(out, b"/work\n1000:1000\n")
        self.engine.remove(cid)
        self.assertNotIn(cid, [c["Id"] for c in self.engine.containers(label=label)])

    def test_exec_stdin_and_binary_output_round_trip(self):
        cid = self.run_container()
        data = bytes(range(256)) * 64
        code, out, err = self.engine.exec(cid, ["cat"], user="1000", stdin=data)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, data)


if __name__ == "__main__":
    unittest.main()
